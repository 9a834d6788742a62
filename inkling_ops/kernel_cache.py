"""The persistent store of our compiled kernels: where it is, reading and writing entries, info and clear.

Layout (docs/compile_keys.md has an example)::

    <root>/                      INKLING_OPS_CACHE_DIR, else ~/.cache/inkling_ops
      <arch>-<fingerprint>/      one per (our version, kernel sources, toolchain versions, arch)
        FINGERPRINT.json         what the fingerprint was made of
        <entry>/                 one compiled variant: the hash of its spec
          <kernel>.json          Triton's metadata
          <kernel>.cubin         the binary
          MANIFEST.json          written last: each file's size and sha256, and the spec
      <arch>-cute-<fingerprint>/ CuTe DSL kernels (:func:`cute_fingerprint`): each entry holds
        <entry>/kernel.o         the exported TVM-FFI object (inkling_ops/kernels/cute_runtime.py)

An entry is written into a temporary directory and renamed into place, so readers see a
complete entry or none; when another process renamed its copy first, ours is discarded. An
entry whose files do not match its manifest (truncated, corrupt, or no manifest) is reported
with ``warnings.warn`` and rebuilt, never fatal. This module knows nothing of Triton: a
backend gives it bytes and gets paths back.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "MANIFEST.json"
FINGERPRINT = "FINGERPRINT.json"
#: Files of inkling_ops/kernels/ whose contents enter the fingerprint.
KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
#: the kernel modules a Triton entry depends on (an edit of a CuTe kernel leaves Triton's store valid)
TRITON_SOURCES = "triton_*.py"
#: The CuTe DSL kernel modules (and their runtime), the sources of a CuTe store's fingerprint.
CUTE_SOURCES = "cute_*.py"
#: What a CuTe entry depends on besides our sources: the DSL that compiled it and the TVM-FFI ABI
#: its object file is linked against. (Not torch, triton or the Python version: an exported object
#: calls neither.)
CUTE_TOOLCHAIN = ("nvidia-cutlass-dsl", "apache-tvm-ffi")


def cache_dir() -> Path:
    """The store's root: ``INKLING_OPS_CACHE_DIR``, else ``~/.cache/inkling_ops``."""
    root = os.environ.get("INKLING_OPS_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "inkling_ops"


def package_version() -> str:
    """inkling_ops.__version__, read without importing the package (this module is imported while
    the package initialises): from the loaded package, else the installed distribution's metadata."""
    version = getattr(sys.modules.get("inkling_ops"), "__version__", None)
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("inkling_ops")
        except metadata.PackageNotFoundError:
            version = "unknown"
    return version


@functools.lru_cache(maxsize=8)
def sources_hash(directory: Path = KERNELS_DIR, pattern: str = "*.py") -> str:
    """sha256 of the kernel modules' contents (the files of ``directory`` matching ``pattern``, by name)."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob(pattern)):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=4)
def toolchain_versions(names: tuple[str, ...] = ("torch", "triton", "nvidia-cutlass-dsl")) -> dict[str, str]:
    """Versions of the installed distributions among ``names`` (default: torch, triton and
    nvidia-cutlass-dsl)."""
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def fingerprint(arch: str, *, version: str | None = None, sources: str | None = None, toolchain: dict | None = None) -> dict:
    """What one store directory is specific to (defaults: this process's package, kernel sources
    and toolchain)."""
    return dict(
        inkling_ops=version if version is not None else package_version(),
        kernel_sources=sources if sources is not None else sources_hash(KERNELS_DIR, TRITON_SOURCES),
        toolchain=dict(toolchain if toolchain is not None else toolchain_versions()),
        arch=arch,
    )


def cute_fingerprint(arch: str, *, version: str | None = None, sources: str | None = None, toolchain: dict | None = None) -> dict:
    """What a store of CuTe DSL kernels is specific to: our version, the CuTe kernel sources
    (``inkling_ops/kernels/cute_*.py``), the nvidia-cutlass-dsl and apache-tvm-ffi versions, and
    the arch. Its directory is ``<arch>-cute-<digest>``."""
    return dict(
        family="cute",
        inkling_ops=version if version is not None else package_version(),
        kernel_sources=sources if sources is not None else sources_hash(KERNELS_DIR, CUTE_SOURCES),
        toolchain=dict(toolchain if toolchain is not None else toolchain_versions(CUTE_TOOLCHAIN)),
        arch=arch,
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class KernelStore:
    """The entries of one fingerprint under ``root`` (default :func:`cache_dir`). ``facts``
    defaults to :func:`fingerprint` (Triton's); a ``family`` in them (``"cute"`` from
    :func:`cute_fingerprint`) names the directory ``<arch>-<family>-<digest>``."""

    def __init__(self, arch: str, *, root: Path | str | None = None, facts: dict | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        self.facts = facts if facts is not None else fingerprint(arch)
        digest = _sha256(json.dumps(self.facts, sort_keys=True).encode())[:16]
        family = self.facts.get("family")
        self.directory = self.root / (f"{arch}-{family}-{digest}" if family else f"{arch}-{digest}")

    def get(self, entry: str) -> dict[str, Path] | None:
        """The files of a complete entry (name -> path, the manifest left out), or None: absent, or
        broken (then a warning says so, and the caller rebuilds it with :meth:`put`)."""
        path = self.directory / entry
        if not path.is_dir():
            return None
        problem = self._check(path)
        if problem is None:
            return {name: path / name for name in json.loads((path / MANIFEST).read_text())["files"]}
        warnings.warn(f"inkling_ops kernel cache: entry {path} is broken ({problem}); rebuilding it", stacklevel=3)
        return None

    @staticmethod
    def _check(path: Path) -> str | None:
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            files = manifest["files"]
        except FileNotFoundError:
            return "no manifest"
        except (ValueError, KeyError, TypeError) as exc:
            return f"unreadable manifest: {exc}"
        for name, want in files.items():
            try:
                data = (path / name).read_bytes()
            except OSError:
                return f"{name} is missing"
            if len(data) != want.get("size") or _sha256(data) != want.get("sha256"):
                return f"{name} does not match the manifest (size {len(data)}, expected {want.get('size')})"
        return None

    def put(self, entry: str, files: dict[str, bytes], *, describe: str = "") -> dict[str, Path]:
        """Write ``files`` (name -> bytes) as ``entry`` and return its files as :meth:`get` does.

        Atomic: the entry appears complete or not at all. If another process wrote the entry
        meanwhile, its copy is kept and ours dropped; a broken entry in the way is replaced.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        facts_path = self.directory / FINGERPRINT
        if not facts_path.exists():
            self._write_atomically(facts_path, json.dumps(self.facts, indent=1, sort_keys=True).encode())
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry}.", dir=self.directory))
        try:
            for name, data in files.items():
                (tmp / name).write_bytes(data)
            manifest = dict(
                files={name: dict(size=len(data), sha256=_sha256(data)) for name, data in files.items()},
                spec=describe,
            )
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))  # last: marks the entry complete
            final = self.directory / entry
            for _ in range(2):
                try:
                    os.rename(tmp, final)  # fails when final exists and is not empty
                    break
                except OSError:
                    if self._check(final) is None:
                        break  # another process won; keep its entry
                    self._discard(final)  # broken: move it aside, then try again
            else:
                raise RuntimeError(f"could not write kernel cache entry {final}")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return {name: self.directory / entry / name for name in files}

    def discard(self, entry: str) -> None:
        """Remove ``entry`` (one the backend found unusable), so that :meth:`put` can write it again."""
        self._discard(self.directory / entry)

    @staticmethod
    def _discard(path: Path) -> None:
        aside = path.with_name(f".{path.name}.broken.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, aside)
        except OSError:
            return  # someone else moved or replaced it
        shutil.rmtree(aside, ignore_errors=True)

    @staticmethod
    def _write_atomically(path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _entries(root: Path) -> list[Path]:
    """Entry directories (with a manifest or not) of every fingerprint under ``root``."""
    if not root.is_dir():
        return []
    return sorted(
        entry
        for fp in root.iterdir()
        if fp.is_dir() and not fp.name.startswith(".")
        for entry in fp.iterdir()
        if entry.is_dir() and not entry.name.startswith(".")
    )


@dataclass(frozen=True)
class CacheInfo:
    """The store at ``location``: ``entries`` (compiled variants) per fingerprint directory, ``size_bytes`` in all."""

    location: Path
    entries: dict[str, int]
    size_bytes: int

    def __str__(self) -> str:
        total = sum(self.entries.values())
        lines = [f"{self.location}: {total} compiled variants, {self.size_bytes / 1e6:.1f} MB"]
        lines += [f"  {name}: {n}" for name, n in sorted(self.entries.items())]
        return "\n".join(lines)


def info(location: Path | None = None) -> CacheInfo:
    """Entries and size of the store under ``location`` (default :func:`cache_dir`)."""
    location = Path(location) if location is not None else cache_dir()
    entries: dict[str, int] = {}
    size = 0
    for entry in _entries(location):
        entries[entry.parent.name] = entries.get(entry.parent.name, 0) + 1
        size += sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
    return CacheInfo(location=location, entries=entries, size_bytes=size)


def clear(location: Path | None = None) -> int:
    """Delete every entry (and fingerprint directory) under ``location`` (default :func:`cache_dir`);
    returns how many entries. Other files under the root are left alone."""
    location = Path(location) if location is not None else cache_dir()
    entries = _entries(location)
    fingerprints = {entry.parent for entry in entries}
    if location.is_dir():
        fingerprints |= {fp for fp in location.iterdir() if (fp / FINGERPRINT).is_file()}
    for fp in fingerprints:
        shutil.rmtree(fp, ignore_errors=True)
    return len(entries)
