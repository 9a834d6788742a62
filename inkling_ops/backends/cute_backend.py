"""The CuTe DSL backend: our Hopper (sm_90a) forward kernel (inkling_ops/kernels/cute_fwd_sm90.py).

Runs only when asked for by name (``backend="cute"``) until it is measured faster than Triton
on a case class: ``default_device_types`` is empty. It never splits the KV range.

Compiled kernels are keyed by the call's :class:`~inkling_ops.compile_keys.CompileKey`; keys
that differ only in values the kernel takes at run time (page size, window, the max_seqlen_q
bucket, the extent E)
share one compiled function, keyed by its :class:`~inkling_ops.kernels.cute_fwd_sm90.CuteFwdConfig`.
Compiling needs no GPU and no tensors (fake tensors, ``--gpu-arch`` from the key), so
:meth:`CuteBackend.compile` works on a CPU machine. The compiled function is a TVM-FFI
function called with the torch tensors; it launches on torch's current stream and reads every
length from device memory, so a call never syncs with the host and can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from .. import strict
from ..compile_keys import CompileKey, DeviceFacts
from ..problem import RelAttnArgs, RelAttnProblem
from .base import Backend

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
SUPPORTED_HEAD_DIMS = (128,)
MAX_Q_PER_KV = 64
#: the bias is staged in 16-byte chunks (8 elements of a 16-bit type), whole chunks inside [0, E)
REL_EXTENT_MULTIPLE = 8
#: the kernel's window argument for a layer without one (every causal key is within it)
NO_WINDOW = 1 << 30


def _kernel_module():
    from ..kernels import cute_fwd_sm90

    return cute_fwd_sm90


def fwd_config(key: CompileKey):
    """The kernel configuration of ``key``: pure."""
    return _kernel_module().CuteFwdConfig(
        dtype=key.dtype, head_dim=key.head_dim, q_per_kv=key.q_per_kv
    )  # fmt: skip


def compile_config(config, arch: str, extra_options: str = ""):
    """Compile the kernel of ``config`` for ``arch`` (e.g. ``"sm_90a"``); no GPU needed. The
    one place this backend compiles, so that a persistent store can take it over.
    ``extra_options``: more DSL compile flags (e.g. ``--keep-ptx --dump-dir DIR``)."""
    options = f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip()
    return _kernel_module().compile_fwd(config, options=options)


def _fits(t: torch.Tensor, *, leading: int) -> bool:
    """Last dim contiguous, the other strides multiples of 8 elements, data 16-byte aligned."""
    strides = t.stride()
    return strides[-1] == 1 and all(s % 8 == 0 for s in strides[:leading]) and t.data_ptr() % 16 == 0


class CuteBackend(Backend):
    name = "cute"
    device_types = ("cuda",)
    default_device_types = ()
    split_policy = None

    def __init__(self) -> None:
        #: CompileKey -> compiled function (the hot path's one lookup)
        self._by_key: dict[CompileKey, object] = {}
        #: (CuteFwdConfig, arch) -> compiled function
        self._by_config: dict[tuple, object] = {}
        self.compile_stats = dict(memory=0, compiled=0)

    def is_available(self) -> str | None:
        try:
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
            import tvm_ffi  # noqa: F401
        except ImportError as exc:
            return f"the CuTe DSL is not importable ({exc}); pip install 'inkling_ops[cute]'"
        return None

    def why_not(self, problem: RelAttnProblem, facts: DeviceFacts) -> str | None:
        if facts.arch not in ("sm_90", "sm_90a"):
            return f"its kernel is for Hopper (sm_90a); the device is {facts.arch}"
        if problem.dtype not in SUPPORTED_DTYPES:
            return f"dtype {problem.dtype} is not bfloat16 or float16"
        if problem.kv_dtype != problem.dtype:
            return f"the KV cache dtype {problem.kv_dtype} differs from q's {problem.dtype}"
        if problem.head_dim not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {problem.head_dim} is not one of {SUPPORTED_HEAD_DIMS}"
        if problem.q_per_kv > MAX_Q_PER_KV:
            return f"{problem.q_per_kv} query heads per KV head; at most {MAX_Q_PER_KV}"
        if problem.rel_extent % REL_EXTENT_MULTIPLE != 0:
            return f"rel_extent {problem.rel_extent} is not a multiple of {REL_EXTENT_MULTIPLE}"
        if problem.num_splits > 1:
            return f"num_splits {problem.num_splits}: it does not split the KV range (num_splits 0 or 1)"
        if not problem.causal:
            return "it computes causal attention only"
        return None

    def launch_plan(self, key: CompileKey, problem: RelAttnProblem) -> tuple[object, int]:
        """The kernel configuration of ``key``; no workspace."""
        return fwd_config(key), 0

    def compile(self, key: CompileKey) -> list:
        """The compiled function of ``key`` (from memory, or compiled for ``key.arch``)."""
        return [self._function(key)]

    def _function(self, key: CompileKey, describe=None):
        fn = self._by_key.get(key)
        if fn is not None:
            self.compile_stats["memory"] += 1
            return fn
        config = fwd_config(key)
        fn = self._by_config.get((config, key.arch))
        if fn is None:
            if describe is not None:
                strict.check_compile(self.name, key, describe)
            fn = self._by_config[config, key.arch] = compile_config(config, key.arch)
            self.compile_stats["compiled"] += 1
        self._by_key[key] = fn
        return fn

    def run(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor) -> None:
        """Launch the kernel of ``plan.key`` on the call's tensors, writing ``out``."""
        if problem.num_tokens == 0 or problem.num_reqs == 0 or problem.max_seqlen_q <= 0 or problem.num_heads == 0:
            return  # nothing to compute (and a grid of no blocks cannot launch)
        fn = self._by_key.get(plan.key)
        if fn is None:
            describe = lambda: (  # noqa: E731
                f"{problem.num_tokens} tokens, {problem.num_reqs} requests, max_seqlen_q {problem.max_seqlen_q}"
            )
            fn = self._function(plan.key, describe)
        q, k, v, table, seqlens, cu, rel = args
        if not _fits(q, leading=2):
            q = q.contiguous()
        if not _fits(rel, leading=2):
            rel = rel.contiguous()
        for name, t in (("key_cache", k), ("value_cache", v), ("out", out)):
            if not _fits(t, leading=t.dim() - 1):
                raise ValueError(
                    f"inkling::rel_attn: backend 'cute' needs {name} 16-byte aligned with strides that are "
                    f"multiples of 8 elements (last dim contiguous); got strides {tuple(t.stride())}"
                )
        if table.stride(-1) != 1:
            table = table.contiguous()
        window = problem.window_left if problem.window_left >= 0 else NO_WINDOW
        fn(q, k, v, out, table, seqlens, cu, rel, problem.softmax_scale, window, problem.max_seqlen_q)
