"""What every CuTe DSL kernel of ours goes through: compile for a target arch (no GPU needed),
export into the persistent store and load back, and launch on torch's current stream.

- :func:`compile_for_arch` runs ``cute.compile`` with TVM-FFI on for ``arch`` (default
  ``sm_90a``), on any machine: the DSL embeds its PTX compiler and needs no driver
  (:func:`compile_with` does the same for a kernel module that makes its own arguments). Example
  arguments are fake tensors (``cute.runtime.make_fake_compact_tensor`` / ``make_fake_tensor``
  with ``cute.sym_int()`` sizes for what varies at run time), Python or DSL scalars, and
  :func:`env_stream` for the stream parameter. The user's ``CUTE_DSL_KEEP`` and
  ``CUTE_DSL_DUMP_DIR`` are honoured at each call; ``ptx=True`` also returns the PTX text.
- :func:`export_files` turns a compiled function into the files of a store entry (one object
  file, ``kernel.o``, from ``export_to_c``); :func:`load_files` loads such an entry
  (``cute.runtime.load_module(..., enable_tvm_ffi=True)``) and returns its ``tvm_ffi.Function``.
  Loading needs no GPU either: nothing touches the driver before the first call.
  :func:`obtain` is the store round trip a backend runs per compiled variant: load the entry,
  or build, export, write and load it (an entry that does not load is reported and rebuilt).
- Launch: call the loaded ``tvm_ffi.Function`` directly, with torch tensors and Python numbers,
  in the order of the jit function's runtime parameters (compile-time ones and the env stream
  are not in the signature). tvm_ffi converts each tensor in C (through torch's DLPack C exchange
  API, ``torch.Tensor.__dlpack_c_exchange_api__``; see :func:`torch_tensor_exchange`) and reads
  torch's current stream on the first CUDA tensor's device; the compiled wrapper checks dtypes,
  shapes, strides and alignment, sets that device and launches on that stream. There is no
  synchronisation and no allocation, so a call is recorded by ``torch.cuda.graph`` like any
  other launch. The first call on a device loads the module's cubin into the context: make it
  before capturing.

Equivalent PyTorch: none; this module compiles and launches kernels, it computes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .arch import arch_capability

#: The store entry's one file, and the symbol its TVM-FFI function is exported under.
OBJECT = "kernel.o"
SYMBOL = "kernel"
DEFAULT_ARCH = "sm_90a"
_KEEP_ARTIFACTS = ("ptx", "cubin", "sass")  # the CUTE_DSL_KEEP tokens cute.compile has options for
#: environment variables that change the code the DSL makes: its settings that enter its own JIT
#: cache key, less ``CUTE_DSL_ARCH`` (the store's arch is in its fingerprint already, and a build
#: machine sets it where a GPU host does not) and the path of the DSL's libraries (which differs
#: between machines that make the same code)
CODE_ENVIRONMENT = tuple(
    f"CUTE_DSL_{name}" for name in (
        "DEBUG", "LINEINFO", "COMPILER_OPT", "COMPILER_BACKEND", "ENABLE_ASSERTIONS", "LOC_TRACEBACKS", "AUTO_M2S",
        "TOLERATE_M2M", "ENABLE_PYIR", "ENABLE_TVM_FFI", "USE_EXTENSION_COMPILER", "DRYRUN",
    )
)  # fmt: skip


def code_environment() -> str:
    """The set variables of :data:`CODE_ENVIRONMENT`, ``NAME=value;`` each in order ("" when none
    is set): a fact of the kernel store's fingerprint, so that a debug or line-info build is never
    served to a process that builds without (or the reverse)."""
    return "".join(f"{name}={os.environ[name]};" for name in CODE_ENVIRONMENT if name in os.environ)


@dataclass(frozen=True)
class CuteCompiled:
    """One ``cute.compile`` result: ``function`` (the DSL's TVM-FFI ``JitCompiledFunction``:
    :func:`export_files` exports it; callable only on a GPU of ``arch``), the ``arch`` it was
    compiled for, and its ``ptx`` text when asked for or kept by ``CUTE_DSL_KEEP``, else None."""

    function: Any
    arch: str
    ptx: str | None = None


def unavailable_reason() -> str | None:
    """Why CuTe kernels cannot be compiled here (nvidia-cutlass-dsl or apache-tvm-ffi missing),
    or None."""
    try:
        import cutlass.cute  # noqa: F401
        import tvm_ffi  # noqa: F401
    except ImportError as exc:
        return f"the CuTe DSL is not importable ({exc}); pip install 'inkling_ops[cute]'"
    return None


def env_stream():
    """The example argument for a jit function's stream parameter: at run time the parameter
    leaves the signature and the kernel launches on torch's current stream (TVM-FFI's
    environment stream)."""
    import cutlass.cute as cute

    return cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)


def compile_for_arch(jit_fn: Callable, *example_args: Any, arch: str = DEFAULT_ARCH, options: str = "", ptx: bool = False) -> CuteCompiled:
    """``cute.compile(jit_fn, *example_args)`` with TVM-FFI for ``arch`` (e.g. ``"sm_90a"``),
    which needs no GPU.

    ``options`` are further ``cute.compile`` options (``"--opt-level 2"``). ``ptx=True`` keeps the
    PTX and returns its text in :attr:`CuteCompiled.ptx`: in ``CUTE_DSL_DUMP_DIR`` when the user
    asked the DSL to keep artifacts (``CUTE_DSL_KEEP``; the PTX joins them there), else in a
    temporary directory removed afterwards. ``CUTE_DSL_KEEP`` (``ptx``, ``cubin``, ``sass``,
    ``all``) and ``CUTE_DSL_DUMP_DIR`` are read at each call (the DSL reads them once, at import),
    and the dump directory is created if missing. For the duration of the compile the DSL's arch
    is ``arch`` too, so that code asking the DSL for the target (MMA and copy atoms) sees it on a
    machine whose own GPU, or lack of one, says otherwise.
    """
    import cutlass.cute as cute

    name = getattr(jit_fn, "__name__", jit_fn)
    return compile_with(lambda flags: cute.compile(jit_fn, *example_args, options=flags), arch=arch, options=options, ptx=ptx, name=name)


def compile_with(compile_fn: Callable[[str], Any], *, arch: str = DEFAULT_ARCH, options: str = "", ptx: bool = False, name: object = "") -> CuteCompiled:
    """:func:`compile_for_arch` for a kernel module that builds its own example arguments:
    ``compile_fn(flags)`` must return ``cute.compile(..., options=flags)``. ``flags`` hold
    ``--enable-tvm-ffi --gpu-arch <arch>``, the dump options of ``CUTE_DSL_KEEP`` /
    ``CUTE_DSL_DUMP_DIR`` (and of ``ptx``), then ``options``; the DSL's arch is ``arch`` meanwhile.
    ``name``: what the error says was compiled when no PTX was kept."""
    if not isinstance(arch, str):
        raise ValueError(f"arch must name a CUDA architecture like 'sm_90a', got {arch!r}")
    arch_capability(arch)  # ValueError naming it unless it is one
    dump_flags, private_dir = _dump_options(want_ptx=ptx)
    flags = f"--enable-tvm-ffi --gpu-arch {arch} {dump_flags} {options}".strip()
    try:
        with _dsl_arch(arch):
            function = compile_fn(flags)
        text = _ptx_text(function)
    finally:
        if private_dir is not None:
            shutil.rmtree(private_dir, ignore_errors=True)
    if ptx and text is None:
        raise RuntimeError(f"cute.compile kept no PTX for {name!r} (options {flags!r})")
    return CuteCompiled(function=function, arch=arch, ptx=text)


def _dump_options(*, want_ptx: bool) -> tuple[str, Path | None]:
    """The ``--keep-*`` / ``--dump-dir`` options for the user's CUTE_DSL_KEEP and CUTE_DSL_DUMP_DIR
    plus our own wish for the PTX, and the private directory to remove afterwards (or None)."""
    tokens = {t.strip().lower() for t in os.environ.get("CUTE_DSL_KEEP", "").split(",") if t.strip()}
    keep = set(_KEEP_ARTIFACTS) if "all" in tokens else tokens & set(_KEEP_ARTIFACTS)
    if not keep and not want_ptx:
        return "", None
    private = None
    if keep:
        directory = Path(os.environ.get("CUTE_DSL_DUMP_DIR") or Path.cwd())  # the DSL's default: the working directory
    else:
        directory = private = Path(tempfile.mkdtemp(prefix="inkling-cute-ptx-"))
    directory.mkdir(parents=True, exist_ok=True)
    if want_ptx:
        keep.add("ptx")
    flags = [f"--keep-{name}" for name in _KEEP_ARTIFACTS if name in keep]
    return " ".join(flags + ["--dump-dir", shlex.quote(str(directory))]), private


def _ptx_text(function: Any) -> str | None:
    """The PTX the DSL kept for ``function``: it reads the file into ``__ptx__`` when the file
    was written, and leaves the path there when it was not."""
    text = getattr(function, "__ptx__", None)
    if not isinstance(text, str) or not text:
        return None
    if ".target" in text:
        return text
    return Path(text).read_text() if os.path.isfile(text) else None


@contextlib.contextmanager
def _dsl_arch(arch: str):
    """Set the DSL's arch (``CUTE_DSL_ARCH``, read at import) to ``arch`` for the block."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    previous = envar.arch
    envar.arch = arch
    try:
        yield
    finally:
        envar.arch = previous


def export_files(compiled: CuteCompiled | Any) -> dict[str, bytes]:
    """The files of a store entry for ``compiled`` (a :class:`CuteCompiled` or the DSL's compiled
    function): ``{"kernel.o": the object file}``, whose TVM-FFI function is ``__tvm_ffi_kernel``."""
    function = compiled.function if isinstance(compiled, CuteCompiled) else compiled
    with tempfile.TemporaryDirectory(prefix="inkling-cute-export-") as tmp:
        path = Path(tmp) / OBJECT
        function.export_to_c(str(path), function_name=SYMBOL)
        data = path.read_bytes()
    if not data:
        raise RuntimeError("export_to_c wrote an empty object file")
    return {OBJECT: data}


def load_files(paths: dict[str, Path]):
    """The ``tvm_ffi.Function`` of a store entry written from :func:`export_files` (``paths``:
    file name -> path, as ``KernelStore.get`` returns them). Needs no GPU; the first call on a
    device loads the cubin there."""
    if OBJECT not in paths:
        raise ValueError(f"paths must hold {OBJECT!r} (an entry written from export_files), got {sorted(paths)}")
    import cutlass.cute as cute

    _preload_runtime_libraries()
    module = cute.runtime.load_module(str(paths[OBJECT]), enable_tvm_ffi=True)
    return getattr(module, SYMBOL)  # the function keeps the module's engine alive


@functools.lru_cache(maxsize=1)
def _preload_runtime_libraries() -> None:
    """Make the DSL runtime's symbols global before an object file is linked against them (as
    flash-attn-4's cache does: ``load_module`` opens them locally)."""
    import cutlass.cute as cute

    for path in cute.runtime.find_runtime_libraries(enable_tvm_ffi=True):
        if Path(path).exists():
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def obtain(store: Any, entry: str, build: Callable[[], CuteCompiled], *, describe: str = ""):
    """The loaded function of ``entry`` in ``store`` (a ``kernel_cache.KernelStore`` of
    :func:`~inkling_ops.kernel_cache.cute_fingerprint`), and how it was obtained: ``"loaded"``
    from the store, or ``"compiled"`` (``build()``, exported, written as ``entry`` with
    ``describe`` in its manifest, and loaded back from there). An entry that is in the store but
    does not load is reported with ``warnings.warn``, discarded and rebuilt; one that vanished
    while it loaded is looked up again (:meth:`~inkling_ops.kernel_cache.KernelStore.obtain`)."""

    def build_files() -> dict[str, bytes]:
        compiled = build()
        store_arch = store.facts.get("arch")
        if isinstance(compiled, CuteCompiled) and store_arch is not None and compiled.arch != store_arch:
            raise ValueError(f"build() compiled for {compiled.arch!r}, but the store holds {store_arch!r} kernels")
        return export_files(compiled)

    return store.obtain(entry, load_files, build_files, describe=describe)


def torch_tensor_exchange() -> str:
    """How tvm_ffi reads a torch tensor argument, and torch's current stream, at each call:
    ``"c"`` when torch exposes the DLPack C exchange API (``torch.Tensor.__dlpack_c_exchange_api__``:
    torch 2.10 and newer, or the ``torch-c-dlpack-ext`` package), else ``"python"`` (tvm_ffi's
    fallback through ``torch.utils.dlpack``, microseconds per tensor slower)."""
    import torch
    import tvm_ffi  # noqa: F401  (installs torch-c-dlpack-ext's API on torch.Tensor when needed)

    return "c" if hasattr(torch.Tensor, "__dlpack_c_exchange_api__") else "python"
