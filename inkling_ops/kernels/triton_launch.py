"""Compiled variants of the Triton kernels: what each is specialised on, compiling one without
tensors, and launching it.

A :class:`KernelSpec` names everything ``triton.compile`` sees: the kernel, one Triton type per
parameter (``"constexpr"`` for compile-time ones, with their values), which parameters carry
the ``tt.divisibility = 16`` hint, the compile options and the target. It reproduces what
Triton's JIT would specialise for an aligned call (pointers 16-byte aligned, the listed strides
multiples of 16, unit strides as the constant 1) and leaves every other int unspecialised, so a
variant never depends on a run-time value the caller does not key on. It compiles on any
machine (``triton.compile`` needs no GPU for a CUDA target) and its files are enough to rebuild
Triton's ``CompiledKernel`` later (:func:`kernel_files`, :func:`load_kernel`).

Under ``TRITON_INTERPRET=1`` the kernels are Triton's interpreted functions: they cannot be
compiled in that process, and launches go through ``kernel[grid](...)``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from dataclasses import dataclass

import torch

from .arch import arch_capability

#: Triton decides at ``@triton.jit`` time (module import) whether kernels run in its interpreter;
#: read the same setting once here.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

#: torch dtype names -> Triton pointer element types
_TRITON_TYPES = {
    "bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int32": "i32",
    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5",
}  # fmt: skip


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1). ``triton.next_power_of_2`` computes the
    same, but as a Triton constexpr function it costs several microseconds per call from host code."""
    return 1 << max(0, n - 1).bit_length()


def triton_type(dtype: str) -> str:
    """``"bfloat16"`` -> ``"*bf16"``: the Triton type of a pointer to ``dtype`` elements."""
    try:
        return "*" + _TRITON_TYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype is {dtype!r}; the Triton kernels take one of {sorted(_TRITON_TYPES)}") from None


def cuda_target(arch: str) -> int:
    """``"sm_90a"`` -> 90: the compute capability Triton's ``GPUTarget("cuda", ...)`` takes."""
    major, minor = arch_capability(arch)
    return 10 * major + minor


#: environment variables that change the code Triton makes for NVIDIA GPUs (its knobs of that
#: kind); the ptxas binary enters by its version text instead, so its path does not split stores
CODE_ENVIRONMENT = (
    "PTXAS_OPTIONS", "DISABLE_PTXAS_OPT", "DISABLE_LLVM_OPT", "TRITON_LIBDEVICE_PATH", "TRITON_DEFAULT_FP_FUSION",
    "TRITON_FORCE_DISABLE_FP_FUSION", "TRITON_F32_DEFAULT", "TRITON_OVERRIDE_ARCH", "TRITON_KERNEL_OVERRIDE",
    "TRITON_DEBUG", "TRITON_MOCK_PTX_VERSION",
)  # fmt: skip


def compiler_facts(arch: str) -> dict[str, str]:
    """What shapes a compiled kernel for ``arch`` besides Triton's version (facts for the kernel
    store's fingerprint): the version text of the ptxas Triton assembles ``arch`` with, as its
    CUDA backend's hash gives it (whichever binary that is: ``TRITON_PTXAS_PATH``,
    ``TRITON_PTXAS_BLACKWELL_PATH`` or the bundled one), and the environment variables that
    change the code (:data:`CODE_ENVIRONMENT`, and those of Triton's own cache key). Variables
    that only move caches, dumps or libraries used at run time do not enter, so a store warmed
    on a build machine still serves a GPU host that sets them. A ptxas that cannot be run is
    recorded as such (a store may still be read on a machine that never compiles)."""
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    try:
        assembler = make_backend(GPUTarget("cuda", cuda_target(arch), 32)).hash()
    except Exception as exc:  # no ptxas, or one that fails to report its version
        assembler = f"unavailable ({type(exc).__name__})"
    env = dict(get_cache_invalidating_env_vars())
    env.update((name, os.environ[name]) for name in CODE_ENVIRONMENT if name in os.environ)
    return {
        "ptxas": hashlib.sha256(assembler.encode()).hexdigest()[:16],
        "environment": ";".join(f"{k}={v}" for k, v in sorted(env.items())),
    }


@dataclass(frozen=True)
class KernelSpec:
    """One compiled variant of one kernel, as ``triton.compile`` is asked for it (hashable)."""

    kernel: str  # "rel_attn_fwd_kernel" or "rel_attn_combine_kernel"
    signature: tuple[str, ...]  # one Triton type per parameter, "constexpr" for compile-time ones
    constexprs: tuple[tuple[str, object], ...]  # (name, value) of every "constexpr" parameter
    divisible: tuple[str, ...]  # parameters marked tt.divisibility 16
    num_warps: int
    num_stages: int
    maxnreg: int | None
    arch: int  # compute capability, e.g. 90
    warp_size: int = 32

    def digest(self) -> str:
        """A stable hex name of the variant (the persistent store's entry name)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()[:32]

    def source(self):
        """Triton's ``ASTSource`` of the variant."""
        from triton.compiler import ASTSource

        fn = jit_function(self.kernel)
        names = fn.arg_names
        signature = dict(zip(names, self.signature))
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in self.divisible}
        return ASTSource(fn=fn, signature=signature, constexprs=dict(self.constexprs), attrs=attrs)

    def options(self) -> dict:
        options = dict(num_warps=self.num_warps, num_stages=self.num_stages)
        return options if self.maxnreg is None else dict(options, maxnreg=self.maxnreg)


def jit_function(name: str):
    """The ``triton.jit`` function ``name`` of this package's kernel modules."""
    from . import triton_combine, triton_fwd

    fn = getattr(triton_fwd, name, None) or getattr(triton_combine, name, None)
    if fn is None:
        raise ValueError(f"kernel is {name!r}; expected 'rel_attn_fwd_kernel' or 'rel_attn_combine_kernel'")
    if INTERPRETED or not hasattr(fn, "arg_names"):
        raise RuntimeError(
            "compiling a Triton kernel needs TRITON_INTERPRET unset when the kernel modules are imported "
            "(under the interpreter the kernels are not compilable JIT functions)"
        )
    return fn


@functools.lru_cache(maxsize=None)
def parameter_names(fn) -> tuple[str, ...]:
    """The kernel's parameter names in signature order (the interpreter's wrapper has them too)."""
    return tuple(inspect.signature(fn.fn).parameters)


def make_spec(
    fn,
    constexprs: dict,
    *,
    pointers: dict[str, str],
    aligned: bool,
    hinted: frozenset[str],
    unit: frozenset[str],
    floats: frozenset[str],
    num_warps: int,
    num_stages: int,
    maxnreg: int | None,
    arch: int,
) -> KernelSpec:
    """The spec of ``fn`` with ``constexprs``. Every other parameter: in ``unit``, the constant 1
    (an int Triton would see as 1 and fold); a ``*_ptr`` one, a pointer of type ``pointers[name]``,
    hinted 16-byte aligned when ``aligned``; in ``floats``, fp32; else i32, hinted a multiple of
    16 when ``aligned`` and in ``hinted`` (the rest are not specialised)."""
    signature, values, divisible = [], dict(constexprs), []
    for name in parameter_names(fn):
        if name in constexprs:
            signature.append("constexpr")
        elif name in unit:
            signature.append("constexpr")
            values[name] = 1
        elif name.endswith("_ptr"):
            signature.append(pointers[name])
            if aligned:
                divisible.append(name)
        elif name in floats:
            signature.append("fp32")
        else:
            signature.append("i32")
            if aligned and name in hinted:
                divisible.append(name)
    order = parameter_names(fn)
    return KernelSpec(
        kernel=fn.fn.__name__,
        signature=tuple(signature),
        constexprs=tuple(sorted(values.items(), key=lambda item: order.index(item[0]))),
        divisible=tuple(divisible), num_warps=num_warps, num_stages=num_stages, maxnreg=maxnreg, arch=arch,
    )  # fmt: skip


def compile_spec(spec: KernelSpec):
    """``triton.compile`` of ``spec`` for its CUDA target (no GPU needed); Triton's ``CompiledKernel``
    with every stage's text (``asm["ttgir"]``, ``asm["ptx"]``, ``asm["cubin"]``)."""
    import triton
    from triton.backends.compiler import GPUTarget

    return triton.compile(spec.source(), target=GPUTarget("cuda", spec.arch, spec.warp_size), options=spec.options())


def kernel_files(compiled) -> dict[str, bytes]:
    """The files that rebuild ``compiled`` (:func:`load_kernel`): Triton's metadata JSON and the cubin."""
    names = {f"{compiled.name}.json", f"{compiled.name}.cubin"}
    files = {}
    for name, path in compiled.metadata_group.items():
        if name in names:
            with open(path, "rb") as f:
                files[name] = f.read()
    if set(files) != names:
        raise RuntimeError(f"Triton's compile of {compiled.name} left {sorted(compiled.metadata_group)}; expected {sorted(names)}")
    return files


def load_kernel(spec: KernelSpec, paths: dict[str, str]):
    """Triton's ``CompiledKernel`` of ``spec`` from the files of :func:`kernel_files` (name -> path),
    not yet loaded on a device (that happens at its first launch)."""
    import json

    from triton.compiler import CompiledKernel

    meta_path = next(p for n, p in paths.items() if n.endswith(".json"))
    with open(meta_path) as f:
        digest = json.load(f)["hash"]
    return CompiledKernel(spec.source(), {n: str(p) for n, p in paths.items()}, digest)


#: the attributes of a ``CompiledKernel`` that hold its loaded module (None until its first launch)
_DEVICE_HANDLES = ("module", "function", "_run", "_module_pid")


def device_copy(compiled):
    """A ``CompiledKernel`` of the same binary as ``compiled`` (shared, not re-read from disk),
    not loaded on any device. Triton loads a ``CompiledKernel``'s module on the device current
    at its first launch and keeps that one handle, so each further device launches its own copy."""
    import copy

    fresh = copy.copy(compiled)
    for name in _DEVICE_HANDLES:
        if name in fresh.__dict__:
            setattr(fresh, name, None)
    if getattr(fresh, "module", None) is not None:  # pragma: no cover - a Triton that keeps it elsewhere
        raise RuntimeError("triton_launch.device_copy: this Triton's CompiledKernel keeps its module handle elsewhere")
    return fresh


def _launch_hook_set() -> bool:
    """Whether a launch hook (a profiler's) is installed: Triton 3.6 keeps None when there is
    none, Triton 3.9 an empty ``HookChain``."""
    hook = _runtime_knobs().launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


@functools.lru_cache(maxsize=1)
def _runtime_knobs():
    """``triton.knobs.runtime`` (imported once: an import statement per launch costs host time)."""
    from triton import knobs

    return knobs.runtime


class Launcher:
    """A compiled kernel launched directly: ``launcher(grid, args)`` with ``args`` every parameter in
    signature order (constexpr values included; the launcher skips them), on the current stream
    of the current CUDA device. Loads the kernel on that device at its first launch. With a Triton
    launch hook set (profilers), goes through ``CompiledKernel[grid]``, which calls it.

    ``constexprs``: the variant's compile-time constants when the caller derived them already (the
    forward kernel's ``FwdConstexprs`` of a compile key), so the launch need not recompute them."""

    __slots__ = ("compiled", "constexprs", "_run", "_function", "_packed")

    def __init__(self, compiled, constexprs=None):
        self.compiled = compiled
        self.constexprs = constexprs
        self._run = None

    def __call__(self, grid: tuple, args: tuple) -> None:
        g0, g1, g2 = grid
        if _launch_hook_set():
            self.compiled[grid](*args)
            return
        if self._run is None:
            self._run = self.compiled.run  # loads the module on the current device
            self._function, self._packed = self.compiled.function, self.compiled.packed_metadata
        stream = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
        self._run(g0, g1, g2, stream, self._function, self._packed, None, None, None, *args)


def _raw_launch(compiled):
    """``(launch, kind)``: the C launch function under Triton's ``CompiledKernel.run`` and the
    argument convention of the Triton version that built it, or ``(None, None)`` where the
    variant needs per-launch scratch memory or the convention is not one we know (the caller
    then launches through ``CompiledKernel.run``). Known: Triton 3.6 (``launch(grid, stream,
    function, cooperative, pdl, global_scratch, profile_scratch, metadata, launch_metadata,
    enter_hook, exit_hook, *args)``) and 3.9 (``launch(grid, stream, function, cooperative, pdl,
    metadata, launch_metadata, enter_hook, exit_hook, global_scratch, profile_scratch,
    annotations, signature, args)``)."""
    import triton

    runner = compiled.run
    launch = getattr(runner, "launch", None)
    if launch is None or getattr(runner, "gsan_enabled", False):
        return None, None
    if getattr(runner, "global_scratch_size", 1) or getattr(runner, "profile_scratch_size", 1):
        return None, None
    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    if version == (3, 6) and not hasattr(runner, "arg_annotations"):
        return launch, "3.6"
    if version == (3, 9) and hasattr(runner, "arg_annotations") and hasattr(runner, "kernel_signature"):
        return launch, "3.9"
    return None, None


_KNOBS = None  # triton.knobs.runtime, set at the first bind (BoundLaunch reads its launch hook)


class BoundLaunch:
    """One compiled kernel bound to a grid and to its arguments after the leading pointers, for a
    call that repeats: ``bound(stream, pointers)`` launches it with ``pointers`` (device addresses
    as ints, or tensors) followed by the bound arguments, through Triton's C launcher directly
    where the Triton version's convention is known (:func:`_raw_launch`), else through
    :class:`Launcher`. A launch hook set for profilers is honoured (the launch then goes through
    ``CompiledKernel[grid]``). Loads the kernel on the current device at its first launch."""

    __slots__ = ("launcher", "grid", "tail", "_launch", "_before", "_after")

    def __init__(self, launcher: Launcher, grid: tuple, tail: tuple) -> None:
        self.launcher, self.grid, self.tail = launcher, tuple(grid), tuple(tail)
        self._launch = None

    def _bind(self) -> None:
        compiled = self.launcher.compiled
        runner = compiled.run  # loads the module on the current device
        launch, kind = _raw_launch(compiled)
        function, packed = compiled.function, compiled.packed_metadata
        coop, pdl = getattr(runner, "launch_cooperative_grid", False), getattr(runner, "launch_pdl", False)
        # the arguments between the stream and the kernel's own, and after them, per convention
        if kind == "3.6":
            self._before, self._after = (function, coop, pdl, None, None, packed, None, None, None), None
        elif kind == "3.9":
            self._before = (function, coop, pdl, packed, None, None, None, None, None, runner.arg_annotations,
                            runner.kernel_signature)  # fmt: skip
            self._after = True  # the kernel's arguments travel as one tuple
        self._launch = launch if launch is not None else False
        global _KNOBS
        _KNOBS = _runtime_knobs()

    def __call__(self, stream: int, pointers: tuple) -> None:
        launch = self._launch
        if launch is None:
            self._bind()
            launch = self._launch
        hook = _KNOBS.launch_enter_hook  # None (3.6) or a HookChain, empty unless a profiler added one (3.9)
        if launch is False or (hook is not None and getattr(hook, "calls", True)):
            self.launcher(self.grid, pointers + self.tail)
        elif self._after is None:
            launch(*self.grid, stream, *self._before, *pointers, *self.tail)
        else:
            launch(*self.grid, stream, *self._before, pointers + self.tail)
