"""The on-disk cache of our compiled kernels: where it is, what it holds, and clearing it.

Today the Triton backend's kernels live in Triton's own cache (``TRITON_CACHE_DIR``, by
default ``~/.triton/cache``): one directory per compiled variant, holding files named after
the kernel. Our entries are the directories whose kernel is one of :data:`KERNEL_NAMES`;
``clear`` removes only those and leaves other programs' kernels alone.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

#: The ``@triton.jit`` functions of inkling_ops/kernels/.
KERNEL_NAMES = ("rel_attn_fwd_kernel", "rel_attn_combine_kernel")


def cache_dir() -> Path:
    """Triton's cache directory as Triton resolves it (``TRITON_CACHE_DIR`` wins)."""
    try:
        from triton import knobs

        return Path(knobs.cache.dir)
    except (ImportError, AttributeError):
        return Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")


@dataclass(frozen=True)
class CacheInfo:
    """Our entries in the cache at ``location``: ``entries`` per kernel name, ``size_bytes`` in all."""

    location: Path
    entries: dict[str, int]
    size_bytes: int

    def __str__(self) -> str:
        per_kernel = ", ".join(f"{name}: {n}" for name, n in self.entries.items())
        total = sum(self.entries.values())
        return f"{self.location}: {total} compiled variants ({per_kernel}), {self.size_bytes / 1e6:.1f} MB"


def _our_entries(location: Path) -> list[tuple[Path, str]]:
    found = []
    if not location.is_dir():
        return found
    for entry in sorted(location.iterdir()):
        if not entry.is_dir():
            continue
        for name in KERNEL_NAMES:
            if (entry / f"{name}.json").exists() or (entry / f"{name}.cubin").exists():
                found.append((entry, name))
                break
    return found


def info(location: Path | None = None) -> CacheInfo:
    """Count our compiled variants and their size under ``location`` (default :func:`cache_dir`)."""
    location = location or cache_dir()
    entries = dict.fromkeys(KERNEL_NAMES, 0)
    size = 0
    for entry, name in _our_entries(location):
        entries[name] += 1
        size += sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
    return CacheInfo(location=location, entries=entries, size_bytes=size)


def clear(location: Path | None = None) -> int:
    """Delete our compiled variants under ``location`` (default :func:`cache_dir`); returns how many."""
    location = location or cache_dir()
    removed = 0
    for entry, _ in _our_entries(location):
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    return removed
