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
with ``warnings.warn`` and rebuilt, never fatal. A store that cannot be written (a read-only
file system, no permission) is reported once with ``warnings.warn``, and the process keeps the
kernels it builds under a temporary directory of its own. This module knows nothing of Triton: a
backend gives it bytes and gets paths back.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
FINGERPRINT = "FINGERPRINT.json"
#: the store directory's record of the compile keys warmups put there (one JSON file a key; hidden,
#: so not an entry)
WARMED = ".warmed"
#: Files of inkling_ops/kernels/ whose contents enter the fingerprint.
KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
#: the kernel modules a Triton entry depends on (an edit of a CuTe kernel leaves Triton's store valid)
TRITON_SOURCES = "triton_*.py"
#: The CuTe DSL kernel modules (and their runtime), the sources of a CuTe store's fingerprint.
CUTE_SOURCES = "cute_*.py"
#: What a CuTe entry depends on besides our sources: the DSL that compiled it (the meta-package and
#: the wheels that hold its compiler, whichever of the CUDA 12 or 13 builds is installed) and the
#: TVM-FFI ABI its object file is linked against. (Not torch, triton or the Python version: an
#: exported object calls neither.)
CUTE_TOOLCHAIN = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core",
                  "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13", "apache-tvm-ffi")  # fmt: skip


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
    (``inkling_ops/kernels/cute_*.py``), the versions of :data:`CUTE_TOOLCHAIN`, and
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
        self.arch = arch
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
            return None  # absent, or a stray file in its place (put() moves that aside)
        names, problem = self._read(path)
        if problem is None:
            return {name: path / name for name in names}
        warnings.warn(f"inkling_ops kernel cache: entry {path} is broken ({problem}); rebuilding it", stacklevel=3)
        return None

    @staticmethod
    def _read(path: Path) -> tuple[list[str], str | None]:
        """``(file names, None)`` for a complete entry at ``path``; ``([], what is wrong)`` otherwise."""
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except FileNotFoundError:
            return [], "no manifest"
        except (OSError, ValueError) as exc:
            return [], f"unreadable manifest: {exc}"
        files = manifest.get("files") if isinstance(manifest, dict) else None
        if not isinstance(files, dict) or not all(isinstance(want, dict) for want in files.values()):
            return [], "unreadable manifest: 'files' is not a mapping of file name to size and sha256"
        for name, want in files.items():
            if not name or "/" in name or name.startswith("."):
                return [], f"unreadable manifest: file name {name!r}"
            try:
                data = (path / name).read_bytes()
            except OSError:
                return [], f"{name} is missing"
            if len(data) != want.get("size") or _sha256(data) != want.get("sha256"):
                return [], f"{name} does not match the manifest (size {len(data)}, expected {want.get('size')})"
        return list(files), None

    @classmethod
    def _check(cls, path: Path) -> str | None:
        """What is wrong with the entry at ``path``, or None when it is complete."""
        return cls._read(path)[1]

    def put(self, entry: str, files: dict[str, bytes], *, describe: str = "") -> dict[str, Path]:
        """Write ``files`` (name -> bytes) as ``entry`` and return its files as :meth:`get` does.

        Atomic: the entry appears complete or not at all. If another process wrote the entry
        meanwhile, its copy is kept and ours dropped; a broken entry in the way is replaced. When
        the store directory is removed while we write (``cache clear``), the write starts again.
        """
        return self._again_if_cleared(lambda: self._put_once(entry, files, describe))

    @staticmethod
    def _again_if_cleared(write: Callable[[], Any]) -> Any:
        """``write()``, started again (three tries in all) when it finds the store directory gone:
        ``cache clear`` removed it meanwhile."""
        for attempt in range(3):
            try:
                return write()
            except FileNotFoundError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _make_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        facts_path = self.directory / FINGERPRINT
        if not facts_path.exists():
            self._write_atomically(facts_path, json.dumps(self.facts, indent=1, sort_keys=True).encode())

    def _put_once(self, entry: str, files: dict[str, bytes], describe: str) -> dict[str, Path]:
        self._make_directory()
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
            for _ in range(3):
                try:
                    os.rename(tmp, final)  # fails when final exists (a non-empty directory, or a file)
                    break
                except FileNotFoundError:
                    raise  # the store directory went away: put() starts again
                except OSError:
                    if self._check(final) is None:
                        break  # another process won; keep its entry
                    self._move_aside_if_broken(final)  # then try again
            else:
                raise RuntimeError(f"could not write kernel cache entry {final}")
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return {name: self.directory / entry / name for name in files}

    def obtain(self, entry: str, load: Callable[[dict[str, Path]], Any], build: Callable[[], dict[str, bytes]],
               *, describe: str = "") -> tuple[Any, str]:  # fmt: skip
        """``(load(paths), how)``: the stored entry loaded (``"loaded"``), else ``build()``'s files
        (name -> bytes) written as ``entry`` and loaded back from there (``"compiled"``: also when
        this process built it but then loaded another process's copy).

        An entry that is complete but does not load is reported with ``warnings.warn``, discarded
        and rebuilt. An entry that vanished between lookup and load (another process replaced a
        broken copy, or cleared the store) is looked up again; ``build()`` runs at most once.
        """
        built: dict[str, bytes] | None = None
        vanished: FileNotFoundError | None = None
        for _ in range(4):
            paths = self.get(entry)
            if paths is None and self.directory in _WARNED_UNWRITABLE:
                paths = self._fallback_store().get(entry)  # built by this process after the store refused it
            if paths is not None:
                try:
                    return load(paths), "loaded" if built is None else "compiled"
                except FileNotFoundError as exc:
                    vanished = self._vanished(exc, entry)  # replaced under us: look again (else raises)
                    continue
                except Exception as exc:  # a complete entry the toolchain cannot read: rebuild it
                    warnings.warn(f"inkling_ops kernel cache: entry {self.directory / entry} does not load ({exc}); "
                                  "rebuilding it", stacklevel=2)  # fmt: skip
                    self.discard(entry)
            if built is None:
                built = build()
            try:
                return load(self.put(entry, built, describe=describe)), "compiled"
            except FileNotFoundError as exc:
                vanished = self._vanished(exc, entry)
            except OSError as exc:  # a store we cannot write (read-only, a file in its path, no permission)
                return load(self._fallback(exc).put(entry, built, describe=describe)), "compiled"
        raise RuntimeError(f"inkling_ops kernel cache: entry {self.directory / entry} kept vanishing while it was loaded") from vanished

    def _fallback(self, exc: OSError) -> KernelStore:
        """The store this process writes in place of this one, which it cannot write (``exc``):
        one of the same fingerprint under a temporary root of this process, removed at exit. Warns
        once a store directory, naming ``INKLING_OPS_CACHE_DIR``: the kernels still run, but a
        later process compiles them again."""
        if self.directory not in _WARNED_UNWRITABLE:
            _WARNED_UNWRITABLE.add(self.directory)
            warnings.warn(
                f"inkling_ops kernel cache: cannot write {self.directory} ({exc}); this process keeps its "
                f"kernels under {_fallback_root()} instead, so later processes compile them again (set "
                "INKLING_OPS_CACHE_DIR to a writable directory to keep them)",
                stacklevel=3,
            )
        return self._fallback_store()

    def _fallback_store(self) -> KernelStore:
        return KernelStore(self.arch, root=_fallback_root(), facts=self.facts)

    def _vanished(self, exc: FileNotFoundError, entry: str) -> FileNotFoundError:
        """``exc`` when it is about a file of ``entry`` (the entry vanished under us); any other
        missing file (a library the loader needs) is the loader's own error, raised as it is."""
        where = str(self.directory / entry)
        if exc.filename is None or not str(exc.filename).startswith(where):
            raise exc
        return exc

    def note_keys(self, keys: Iterable[dict]) -> None:
        """Record compile keys (each as a dict of its fields) that a warmup compiled or loaded into
        this store, so that a later process, which may never warm, can say in strict mode's error
        how a key it lacks differs from the warmed ones (:meth:`noted_keys`). Idempotent."""
        records = [json.dumps(fields, sort_keys=True).encode() for fields in keys]
        if not records:
            return
        try:
            self._again_if_cleared(lambda: self._note_once(records))
        except OSError as exc:  # a store we cannot write: the records only improve strict mode's errors
            warnings.warn(f"inkling_ops kernel cache: cannot record warmed keys in {self.directory} ({exc})",
                          stacklevel=2)  # fmt: skip

    def _note_once(self, records: list[bytes]) -> None:
        self._make_directory()
        (self.directory / WARMED).mkdir(exist_ok=True)
        for data in records:
            path = self.directory / WARMED / f"{_sha256(data)[:16]}.json"
            if not path.exists():
                self._write_atomically(path, data)

    def noted_keys(self) -> list[dict]:
        """The compile keys :meth:`note_keys` recorded here, as dicts (unreadable records skipped)."""
        try:
            paths = sorted((self.directory / WARMED).glob("*.json"))
        except OSError:
            return []
        keys = []
        for path in paths:
            try:
                fields = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(fields, dict):
                keys.append(fields)
        return keys

    def discard(self, entry: str) -> None:
        """Remove ``entry`` (one the backend found unusable), so that :meth:`put` can write it again."""
        self._discard(self.directory / entry)

    @staticmethod
    def _move_aside(path: Path) -> Path | None:
        """Rename ``path`` to a hidden name of its own; that name, or None when it was gone already."""
        aside = path.with_name(f".{path.name}.broken.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, aside)
        except OSError:
            return None
        return aside

    @staticmethod
    def _delete(path: Path) -> None:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    @classmethod
    def _discard(cls, path: Path) -> None:
        aside = cls._move_aside(path)
        if aside is not None:
            cls._delete(aside)

    @classmethod
    def _move_aside_if_broken(cls, path: Path) -> None:
        """Take the broken entry at ``path`` out of the way. Between our check and the move, another
        process may have replaced it with a complete one; that one is moved back, not deleted."""
        aside = cls._move_aside(path)
        if aside is None:
            return
        if aside.is_dir() and cls._check(aside) is None:
            try:
                os.rename(aside, path)  # fails if a third writer has installed its own meanwhile
                return
            except OSError:
                pass
        cls._delete(aside)

    @staticmethod
    def _write_atomically(path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
        tmp.write_bytes(data)
        os.replace(tmp, path)


#: store directories this process found it cannot write (KernelStore._fallback warned for each)
_WARNED_UNWRITABLE: set[Path] = set()


@functools.lru_cache(maxsize=1)
def _fallback_root() -> Path:
    """A temporary root of this process for the kernels of stores it cannot write, removed at exit."""
    import atexit

    root = Path(tempfile.mkdtemp(prefix="inkling_ops_kernels_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


#: a store directory's name: ``<arch>-<digest>`` or ``<arch>-<family>-<digest>`` (KernelStore)
_STORE_NAME = re.compile(r"[A-Za-z0-9_]+-(?:[a-z]+-)?[0-9a-f]{16}")


def _store_dirs(root: Path) -> list[Path]:
    """The fingerprint directories under ``root``: those with a ``FINGERPRINT.json``, or named as
    :class:`KernelStore` names them. Anything else under the root is not ours and is left alone
    (the root may be shared, e.g. ``INKLING_OPS_CACHE_DIR=~/.cache``)."""
    try:
        children = list(root.iterdir())
    except OSError:  # no root (yet), or removed meanwhile
        return []
    return sorted(
        fp for fp in children
        if not fp.name.startswith(".") and fp.is_dir() and ((fp / FINGERPRINT).is_file() or _STORE_NAME.fullmatch(fp.name))
    )  # fmt: skip


def _entries(root: Path) -> list[Path]:
    """Entry directories (with a manifest or not) of every fingerprint directory under ``root``."""
    entries = []
    for fp in _store_dirs(root):
        try:
            entries += [entry for entry in fp.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
        except OSError:  # removed meanwhile
            pass
    return sorted(entries)


def _size(entry: Path) -> int:
    """Bytes of the files of ``entry``; 0 for what vanished meanwhile (a writer or clear at work)."""
    size = 0
    try:
        for f in entry.iterdir():
            try:
                size += f.stat().st_size if f.is_file() else 0
            except OSError:
                pass
    except OSError:
        pass
    return size


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
        size += _size(entry)
    return CacheInfo(location=location, entries=entries, size_bytes=size)


def clear(location: Path | None = None) -> int:
    """Delete every entry and fingerprint directory under ``location`` (default :func:`cache_dir`);
    returns how many entries. Other files and directories under the root are left alone. A writer
    at work meanwhile starts its entry again (:meth:`KernelStore.put`)."""
    location = Path(location) if location is not None else cache_dir()
    entries = _entries(location)
    for fp in _store_dirs(location):
        shutil.rmtree(fp, ignore_errors=True)
    return len(entries)
