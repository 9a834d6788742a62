"""The CuTe DSL backend: our Hopper (sm_90a) forward kernel (inkling_ops/kernels/cute_fwd_sm90.py).

Chosen by default only on the case classes of :data:`DEFAULT_CASES` (:func:`prefers_cute`, a
pure rule written from the Hopper measurements in meta/TUNING.md, "CuTe backend": prefill, global
and sliding-window, at pages 16, 64 and 128); elsewhere it runs only when asked for by name,
``backend="cute"``. Prefill-class calls of several requests run on the kernel's compact grid
(:func:`compact_grid`, a field of the compile key). It never splits the KV range.

Compiled kernels are keyed by the call's :class:`~inkling_ops.compile_keys.CompileKey`; keys
that differ only in values the kernel takes at run time (page size, window, the max_seqlen_q
bucket, the extent E) share one compiled function, keyed by its
:class:`~inkling_ops.kernels.cute_fwd_sm90.CuteFwdConfig`, and one entry of the persistent store
(:mod:`inkling_ops.kernel_cache`, a ``cute_fingerprint`` store: :func:`store_entry`). A key's
function comes from memory, else the store, else a compile for ``key.arch`` (fake tensors, no
GPU: :meth:`CuteBackend.compile` works on a CPU machine), which is exported to the store and
loaded back; the run path calls :func:`inkling_ops.strict.check_compile` first. The function is
a TVM-FFI function called with the torch tensors; it launches on torch's current stream and
reads every length from device memory, so a call never syncs with the host and can be captured
in a CUDA graph.
"""

from __future__ import annotations

import hashlib

import torch

from .. import kernel_cache, strict
from ..compile_keys import STANDARD_LAYOUT, CompileKey, DeviceFacts, KVLayout
from ..problem import RelAttnArgs, RelAttnProblem
from .base import CUDA_GRID_YZ_MAX, Backend, index_tensors_packed, with_packed_index_tensors

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
SUPPORTED_HEAD_DIMS = (64, 128)
MAX_Q_PER_KV = 64
#: the bias is staged in 16-byte chunks (8 elements of a 16-bit type), whole chunks inside [0, E)
REL_EXTENT_MULTIPLE = 8
#: the kernel's window argument for a layer without one (every causal key is within it)
NO_WINDOW = 1 << 30


def kernel_window(window_left: int) -> int:
    """The kernel's window argument (an int32) for ``window_left``: :data:`NO_WINDOW` for no
    window, and for windows at least that wide, which see every causal key as it does."""
    return NO_WINDOW if window_left < 0 else min(window_left, NO_WINDOW)


#: the arches the kernel is compiled for
HOPPER_ARCHES = ("sm_90", "sm_90a")

#: A call is in the "decode" class when its max_seqlen_q is at most this (single-token and
#: speculative decode; Triton splits those, this backend does not), else in "prefill": a plan sees
#: no KV lengths, so a first prefill, a chunked-prefill extend and a mixed batch (one prefill chunk
#: and many decodes) are one class, told apart by nothing the plan knows.
DECODE_MAX_SEQLEN_Q = 16

#: The case classes ``(phase, page_size, attention)`` on which the dispatcher prefers this backend
#: to Triton on Hopper: phase "prefill" or "decode" (:data:`DECODE_MAX_SEQLEN_Q`), a page size
#: (None: any), attention "global" or "sliding". A class goes in when one Hopper run (H200, or
#: H100: the same sm_90a build) says it is faster than Triton on every case of it measured, on
#: both clocks (meta/TUNING.md, "CuTe backend", "The default-choice rule", has the table; each
#: class in it is measured at head_dim 128 and 64):
#: global prefill at pages 16 and 128 since 46a147e;
#: sliding prefill at page 128 since 109c5e9, and at page 16 since the compact grid
#: (:func:`compact_grid`: its serving-shaped batch measured 0.98-1.00x Triton on the dense grid);
#: global and sliding prefill at page 64 since 46f6f43's run (an H100).
#: Decode (the kernel never splits the KV range) stays on Triton, as do page sizes not listed.
DEFAULT_CASES: frozenset[tuple[str, int | None, str]] = frozenset(
    {
        ("prefill", 16, "global"), ("prefill", 64, "global"), ("prefill", 128, "global"),
        ("prefill", 16, "sliding"), ("prefill", 64, "sliding"), ("prefill", 128, "sliding"),
    }
)  # fmt: skip


def case_class(problem: RelAttnProblem) -> tuple[str, int, str]:
    """``(phase, page_size, attention)`` of ``problem``, the terms of :data:`DEFAULT_CASES`: pure."""
    phase = "decode" if problem.max_seqlen_q <= DECODE_MAX_SEQLEN_Q else "prefill"
    return phase, problem.page_size, "sliding" if problem.window_left >= 0 else "global"


def prefers_cute(problem: RelAttnProblem, facts: DeviceFacts, cases=None) -> bool:
    """Whether the dispatcher's default choice for ``problem`` on a device with ``facts`` is this
    backend rather than Triton: a Hopper device and a case class in ``cases`` (default
    :data:`DEFAULT_CASES`, read at each call). Pure; whether the backend can run the call at all
    is :meth:`CuteBackend.why_not`'s to say."""
    if facts.arch not in HOPPER_ARCHES:
        return False
    phase, page, attention = case_class(problem)
    table = DEFAULT_CASES if cases is None else cases
    return (phase, page, attention) in table or (phase, None, attention) in table


def _kernel_module():
    from ..kernels import cute_fwd_sm90

    return cute_fwd_sm90


def compact_grid(problem: RelAttnProblem) -> bool:
    """Whether a call of ``problem`` runs on the kernel's compact grid (``CuteFwdConfig.compact_grid``):
    a call of two or more requests in the prefill class (:data:`DECODE_MAX_SEQLEN_Q`), global or
    sliding. Pure, and a function of what the compile key buckets (``num_reqs >= 2`` and the
    max_seqlen_q bucket), so a serving configuration's enumeration reaches both grids.

    Why (meta/TUNING.md, "CuTe backend", "compact_grid"): on a serving batch (a prefill chunk and
    decodes) the dense grid's blocks are mostly empty. The compact grid removes them: a third of
    the call on a sliding layer, 8% on a global one. Where a batch has no empty blocks (several
    equal chunks) it costs 0-3%. The compact grid's build gives its producer more registers
    (``cute_fwd_sm90.schedule``); without them it was 8-13% slower on global layers.
    """
    return problem.num_reqs >= 2 and problem.max_seqlen_q > DECODE_MAX_SEQLEN_Q


def fwd_config(key: CompileKey):
    """The kernel configuration of ``key``: pure."""
    return _kernel_module().CuteFwdConfig(
        dtype=key.dtype, head_dim=key.head_dim, q_per_kv=key.q_per_kv, compact_grid=key.compact_grid
    )  # fmt: skip


def store_entry(config) -> str:
    """The persistent store's entry name of ``config``'s compiled function (the store directory
    already names the arch, the kernel sources and the DSL version): pure."""
    return "rel_attn_fwd_sm90-" + hashlib.sha256(repr(config).encode()).hexdigest()[:16]


def compile_config(config, arch: str, *, options: str = "", ptx: bool = False):
    """Compile the kernel of ``config`` for ``arch`` (e.g. ``"sm_90a"``); no GPU needed. The
    one place this backend compiles. Returns a ``cute_runtime.CuteCompiled`` (with the PTX text
    when ``ptx`` or the user's ``CUTE_DSL_KEEP`` keeps it). ``options``: more DSL compile flags."""
    from ..kernels import cute_runtime

    module = _kernel_module()
    return cute_runtime.compile_with(
        lambda flags: module.compile_fwd(config, options=flags), arch=arch, options=options, ptx=ptx, name=config
    )


def _fits(t: torch.Tensor, *, leading: int) -> bool:
    """Last dim contiguous, the other strides multiples of 8 elements, data 16-byte aligned."""
    strides = t.stride()
    return strides[-1] == 1 and all(s % 8 == 0 for s in strides[:leading]) and t.data_ptr() % 16 == 0


class CuteBackend(Backend):
    name = "cute"
    device_types = ("cuda",)
    #: by default only where :func:`prefers_cute` says so (:meth:`why_not_default`)
    default_device_types = ("cuda",)
    split_policy = None

    def __init__(self) -> None:
        #: CompileKey -> loaded function (the hot path's one lookup)
        self._by_key: dict[CompileKey, object] = {}
        #: (CuteFwdConfig, arch) -> loaded function
        self._by_config: dict[tuple, object] = {}
        self._stores: dict[tuple, kernel_cache.KernelStore] = {}
        #: how :meth:`compile` and the run path obtained functions: "memory" (a key whose
        #: configuration was obtained before), "loaded" (persistent store), "compiled"
        self.compile_stats = dict(memory=0, loaded=0, compiled=0)

    def is_available(self) -> str | None:
        try:
            import cutlass  # noqa: F401
            import cutlass.cute  # noqa: F401
            import tvm_ffi  # noqa: F401
        except ImportError as exc:
            return f"the CuTe DSL is not importable ({exc}); pip install 'inkling_ops[cute]'"
        return None

    def why_not_default(self, problem: RelAttnProblem, facts: DeviceFacts, layout: KVLayout = STANDARD_LAYOUT) -> str | None:
        if not layout.aligned:  # run() would copy q / rel_logits or refuse out, K, V: Triton has variants for it
            return "the call's tensors are not all 16-byte aligned with strides in multiples of 16 elements"
        if prefers_cute(problem, facts):
            return None
        return f"case class {case_class(problem)} is not one it is preferred on (cute_backend.DEFAULT_CASES)"

    def why_not(self, problem: RelAttnProblem, facts: DeviceFacts) -> str | None:
        if facts.arch not in HOPPER_ARCHES:
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
        if not compact_grid(problem) and problem.num_reqs > CUDA_GRID_YZ_MAX:  # the dense grid's z
            return f"{problem.num_reqs} requests on its dense grid (one grid dimension); CUDA allows {CUDA_GRID_YZ_MAX}"
        return None

    def compact_grid(self, problem: RelAttnProblem) -> bool:
        return compact_grid(problem)

    def launch_plan(self, key: CompileKey, problem: RelAttnProblem) -> tuple[object, int]:
        """The kernel configuration of ``key``; no workspace."""
        return fwd_config(key), 0

    def store(self, arch: str) -> kernel_cache.KernelStore:
        """The persistent store of ``arch`` CuTe kernels under the current cache root. Its
        fingerprint holds, besides :func:`~inkling_ops.kernel_cache.cute_fingerprint`'s facts, the
        DSL's code-changing variables that are set (:data:`~inkling_ops.kernels.cute_runtime.CODE_ENVIRONMENT`)."""
        root = kernel_cache.cache_dir()
        store = self._stores.get((root, arch))
        if store is None:
            from ..kernels.cute_runtime import code_environment

            toolchain = dict(kernel_cache.toolchain_versions(kernel_cache.CUTE_TOOLCHAIN))
            environment = code_environment()
            if environment:
                toolchain["dsl_environment"] = environment
            facts = kernel_cache.cute_fingerprint(arch, toolchain=toolchain)
            store = self._stores[root, arch] = kernel_cache.KernelStore(arch, root=root, facts=facts)
        return store

    def compile(self, key: CompileKey) -> list:
        """The loaded function of ``key``: from memory, the persistent store, or compiled for
        ``key.arch`` (no GPU needed), exported to the store and loaded from there."""
        return [self._function(key)]

    def _function(self, key: CompileKey, describe=None, *, on_run_path: bool = False):
        fn = self._by_key.get(key)
        if fn is not None:
            self.compile_stats["memory"] += 1
            return fn
        config = fwd_config(key)
        fn = self._by_config.get((config, key.arch))
        if fn is not None:
            self.compile_stats["memory"] += 1
        else:
            from ..kernels import cute_runtime

            def build():
                if on_run_path:
                    strict.check_compile(self.name, key, describe, stored=lambda: self.stored_warm_keys(key.arch))
                return compile_config(config, key.arch)

            fn, how = cute_runtime.obtain(self.store(key.arch), store_entry(config), build, describe=repr(config))
            self.compile_stats[how] += 1
            self._by_config[config, key.arch] = fn
        self._by_key[key] = fn
        return fn

    def _run_function(self, key: CompileKey, problem: RelAttnProblem):
        fn = self._by_key.get(key)
        if fn is None:
            describe = lambda: (  # noqa: E731
                f"{problem.num_tokens} tokens, {problem.num_reqs} requests, max_seqlen_q {problem.max_seqlen_q}"
            )
            fn = self._function(key, describe, on_run_path=True)
        return fn

    def prepare(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor):
        """The call's loaded function and scalars bound once: the returned ``prepared(args,
        pointers, out)`` calls it with the tensors and nothing else. The call cache repeats it
        only on tensors with the same shapes, strides and dtypes whose pointers are all 16-byte
        aligned when these were, so the layout checks of :meth:`run` hold for every repeat. None
        (the call goes through :meth:`run`) when :meth:`run` would copy ``q``, ``rel_logits`` or
        the block table, or refuse the call, or there is nothing to launch."""
        if not args.q.is_cuda:
            return None
        return self._prepare(plan, problem, args, out)

    def _prepare(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor):
        """:meth:`prepare` on tensors of any device (the tests bind CPU tensors to a stand-in)."""
        if problem.max_seqlen_q <= 0 or problem.num_heads == 0:
            return None
        q, k, v, table, seqlens, cu, rel = args
        if not (_fits(q, leading=2) and _fits(rel, leading=2) and index_tensors_packed(args)):
            return None
        if not all(_fits(t, leading=t.dim() - 1) for t in (k, v, out)):
            return None
        fn = self._run_function(plan.key, problem)
        scale, max_q = problem.softmax_scale, problem.grid_seqlen_q
        window = kernel_window(problem.window_left)

        def prepared(args: RelAttnArgs, pointers: tuple, out: torch.Tensor) -> None:
            q, k, v, table, seqlens, cu, rel = args
            fn(q, k, v, out, table, seqlens, cu, rel, scale, window, max_q)

        return prepared

    def run(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor) -> None:
        """Launch the kernel of ``plan.key`` on the call's tensors, writing ``out``."""
        if problem.num_tokens == 0 or problem.num_reqs == 0 or problem.max_seqlen_q <= 0 or problem.num_heads == 0:
            return  # nothing to compute (and a grid of no blocks cannot launch)
        q, k, v, table, seqlens, cu, rel = with_packed_index_tensors(args)  # the kernel reads them with unit stride
        for name, t in (("key_cache", k), ("value_cache", v), ("out", out)):  # before any compile or copy
            if not _fits(t, leading=t.dim() - 1):
                raise ValueError(
                    f"inkling::rel_attn: backend 'cute' needs {name} 16-byte aligned with strides that are "
                    f"multiples of 8 elements (last dim contiguous); got strides {tuple(t.stride())}"
                )
        fn = self._run_function(plan.key, problem)
        if not _fits(q, leading=2):
            q = q.clone(memory_format=torch.contiguous_format)  # a copy (a contiguous q may be misaligned)
        if not _fits(rel, leading=2):
            rel = rel.clone(memory_format=torch.contiguous_format)
        window = kernel_window(problem.window_left)
        fn(q, k, v, out, table, seqlens, cu, rel, problem.softmax_scale, window, problem.grid_seqlen_q)
