"""Registration of ``torch.ops.inkling.rel_attn`` and ``torch.ops.inkling.rel_attn_out``.

The only module that touches ``torch.library``. The ops are declared with ``Library.define``
and given plain per-dispatch-key implementations (CPU and CUDA, both through the backend
dispatcher) plus fake implementations for tracing. We chose this over the ``custom_op``
decorator for host overhead: see ``meta/host_overhead.md`` for the measurement.

No Autograd kernel is registered: the op is inference-only, and its implementations raise
a clear error when an input requires grad while grad mode is on.
"""

from __future__ import annotations

import torch
from torch.library import Library

from . import call_cache
from .validation import check_call, check_inference_only

_ARGS = (
    "Tensor q, Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor cache_seqlens, "
    "Tensor cu_seqlens_q, Tensor rel_logits, *, SymInt max_seqlen_q, float softmax_scale, "
    "int[2] window_size=[-1, -1], bool causal=True, int num_splits=0, str? backend=None"
)
#: The two schemas, as registered (pinned by tests/test_golden.py).
SCHEMAS = {
    "rel_attn": f"rel_attn({_ARGS}) -> Tensor",
    "rel_attn_out": f"rel_attn_out({_ARGS}, Tensor(a!) out) -> ()",
}

_lib = Library("inkling", "DEF")
for _schema in SCHEMAS.values():
    _lib.define(_schema)


def _validate(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    max_seqlen_q, softmax_scale, window_size, causal, num_splits, out,
):  # fmt: skip
    """Section-5 argument checks, then the inference-only check; returns the call's static problem."""
    problem = check_call(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, out,
    )  # fmt: skip
    check_inference_only(q, key_cache, value_cache, rel_logits, out)
    return problem


def _rel_attn_out(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    *, max_seqlen_q, softmax_scale, window_size=(-1, -1), causal=True, num_splits=0, backend=None, out,
):  # fmt: skip
    # validation, plan and launch of a repeated call come from one lookup (call_cache)
    call_cache.run_out(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, backend, out,
    )  # fmt: skip


def _rel_attn(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    *, max_seqlen_q, softmax_scale, window_size=(-1, -1), causal=True, num_splits=0, backend=None,
):  # fmt: skip
    # Rows no request covers come back as zeros (the out variant leaves them untouched). The
    # schema guarantees q is a tensor; a bad shape is reported by the checks after this.
    out = torch.zeros_like(q, memory_format=torch.contiguous_format)
    call_cache.run_out(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, backend, out,
    )  # fmt: skip
    return out


def _rel_attn_fake(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    *, max_seqlen_q, softmax_scale, window_size=(-1, -1), causal=True, num_splits=0, backend=None,
):  # fmt: skip
    _validate(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, None,
    )  # fmt: skip
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _rel_attn_out_fake(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    *, max_seqlen_q, softmax_scale, window_size=(-1, -1), causal=True, num_splits=0, backend=None, out,
):  # fmt: skip
    _validate(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, out,
    )  # fmt: skip


for _key in ("CPU", "CUDA"):
    _lib.impl("rel_attn", _rel_attn, _key)
    _lib.impl("rel_attn_out", _rel_attn_out, _key)
torch.library.register_fake("inkling::rel_attn", _rel_attn_fake, lib=_lib)
torch.library.register_fake("inkling::rel_attn_out", _rel_attn_out_fake, lib=_lib)
