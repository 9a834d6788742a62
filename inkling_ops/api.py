"""The public Python API: :func:`rel_attn`, a keyword-argument front end to the registered ops."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import call_cache, library  # noqa: F401  (library registers torch.ops.inkling.*)
from .validation import check_kinds


_Tensor = torch.Tensor
_compiling = torch.compiler.is_compiling
_function_mode_on = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_tracing = torch._C._get_tracing_state  # torch.jit.trace


def _default_scale(q: torch.Tensor) -> float:
    """1 / head_dim, Inkling's scale; 1.0 for a q that is not (T, Hq, D) with D > 0, which the
    validation then refuses by name (rather than an IndexError or ZeroDivisionError here)."""
    return 1.0 / q.shape[-1] if q.dim() == 3 and q.shape[-1] > 0 else 1.0


def _direct_call_allowed() -> bool:
    """Whether an eager call may skip the torch dispatcher and call the op's implementation
    (``library``'s CPU / CUDA function, which both go through :mod:`inkling_ops.call_cache`):
    only outside ``torch.compile`` / ``torch.export`` / ``torch.jit.trace`` tracing, with no
    torch-function or dispatch mode active (fake tensors, functionalization, debug modes all see
    the op) and the profiler off (so the op shows in profiles under its name). The arguments are
    plain tensors and q is on the CPU or a CUDA device (checked by the caller: meta tensors go
    through the dispatcher to the op's fake implementation). What is skipped is the dispatcher's
    own per-call cost; the result is the same computation."""
    return not (_compiling() or _function_mode_on() or _dispatch_modes() or _tracing() or _profiler_on())


def _profiler_on() -> bool:
    return torch.autograd.profiler._is_profiler_enabled


def rel_attn(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    *,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    rel_logits: torch.Tensor,
    max_seqlen_q: int,
    softmax_scale: float | None = None,
    window_size: Sequence[int] = (-1, -1),
    num_splits: int = 0,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Paged, variable-length causal attention with Inkling's relative bias.

    Shapes (T tokens over B requests, Hq query heads, Hkv KV heads, head_dim D, rel_extent E):

    - q: (T, Hq, D); key_cache, value_cache: (num_blocks, block_size, Hkv, D), may be strided views
    - block_table: (B, max_blocks_per_seq) int32; cache_seqlens: (B,) int32, KV length of each
      request including its new tokens; cu_seqlens_q: (B + 1,) int32, starts at 0
    - rel_logits: (T, Hq, E); the bias for backward distance d = q_abs - j is rel_logits[t, h, d]
      when 0 <= d < E, else 0
    - max_seqlen_q: an upper bound on any request's query length
    - softmax_scale: defaults to 1 / D (Inkling's q and k are RMS-normed)
    - window_size: (-1, -1) for global attention, (left, 0) to see keys with d <= left
    - num_splits: split-KV count; 0 lets the heuristic choose
    - out: optional (T, Hq, D) output written in place; rows past cu_seqlens_q[-1] are untouched
    - backend: None for the default choice, or a name from ``inkling_ops.backend_names()``

    Returns out (or a new tensor, zero where no request has a row).

    Equivalent PyTorch (one request, G = Hq // Hkv, d = q_abs[:, None] - arange(kv_len)):
    ``softmax(scale * q @ K.T + bias(d) + mask(d)) @ V`` with K, V repeated G times over heads.
    """
    if softmax_scale is None and type(q) is _Tensor:
        softmax_scale = _default_scale(q)
    if (
        type(q) is _Tensor and (q.is_cuda or q.is_cpu) and type(key_cache) is _Tensor and type(value_cache) is _Tensor
        and type(block_table) is _Tensor and type(cache_seqlens) is _Tensor and type(cu_seqlens_q) is _Tensor
        and type(rel_logits) is _Tensor and (out is None or type(out) is _Tensor)
        and type(max_seqlen_q) is int and type(softmax_scale) is float and type(num_splits) is int
        and (backend is None or type(backend) is str) and _direct_call_allowed()
    ):  # fmt: skip
        # the op's own implementation, called without the dispatcher (see _direct_call_allowed)
        if out is None:
            out = torch.zeros_like(q, memory_format=torch.contiguous_format)
        call_cache.run_out(
            q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
            max_seqlen_q, softmax_scale, window_size, True, num_splits, backend, out,
        )  # fmt: skip
        return out
    args = (q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits)
    if any(isinstance(a, torch.fx.Proxy) for a in (*args, out)):
        # torch.fx.symbolic_trace: the op records itself, and its checks run when the graph does;
        # the default scale would need q's head_dim, which a Proxy does not know
        if softmax_scale is None:
            raise TypeError(
                "inkling::rel_attn: argument 'softmax_scale' is None; under torch.fx symbolic tracing it must "
                "be given (q is a Proxy, whose head_dim is not known)"
            )
    else:
        check_kinds(args, out, max_seqlen_q, softmax_scale, window_size, num_splits, backend)
    if softmax_scale is None:
        softmax_scale = _default_scale(q)
    options = dict(
        max_seqlen_q=max_seqlen_q,
        softmax_scale=softmax_scale,
        window_size=list(window_size) if isinstance(window_size, tuple) else window_size,
        num_splits=num_splits,
        backend=backend,
    )
    if out is None:
        return torch.ops.inkling.rel_attn.default(*args, **options)
    torch.ops.inkling.rel_attn_out.default(*args, **options, out=out)
    return out
