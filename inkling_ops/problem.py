"""What the host knows about one rel_attn call, from shapes and scalar arguments alone.

A :class:`RelAttnProblem` is built by :func:`inkling_ops.validation.check_call` after the
arguments pass validation. It holds no tensors and reads no device values, so everything
derived from it (backend choice, compile keys, split counts) is host-only and safe to
compute inside a CUDA graph capture.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class RelAttnArgs(NamedTuple):
    """The seven tensors of one rel_attn call, as one bundle from the op down to the kernel launch.

    Shapes (T tokens, B requests, Hq / Hkv heads, head_dim D, rel_extent E): q (T, Hq, D);
    key_cache, value_cache (num_blocks, page_size, Hkv, D), possibly strided views; block_table
    (B, max_blocks_per_seq) int32; cache_seqlens (B,) int32; cu_seqlens_q (B + 1,) int32;
    rel_logits (T, Hq, E). The order is the op schema's; ``out`` travels beside the bundle.
    """

    q: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    cache_seqlens: torch.Tensor
    cu_seqlens_q: torch.Tensor
    rel_logits: torch.Tensor


class RelAttnProblem(NamedTuple):
    """Static facts of one call (a NamedTuple: immutable, hashable, cheap to build per call).

    Shapes: q (num_tokens, num_heads, head_dim); key_cache / value_cache
    (num_blocks, page_size, num_kv_heads, head_dim); rel_logits (num_tokens, num_heads,
    rel_extent); block_table (num_reqs, max_blocks_per_seq).
    """

    num_tokens: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rel_extent: int
    num_reqs: int
    page_size: int
    num_blocks: int
    max_blocks_per_seq: int
    max_seqlen_q: int
    softmax_scale: float
    window_left: int  # -1: no window; otherwise keys with distance d <= window_left are visible
    causal: bool
    num_splits: int  # requested split count; 0 lets the heuristic choose
    dtype: torch.dtype
    kv_dtype: torch.dtype
    device_type: str

    @property
    def q_per_kv(self) -> int:
        """Query heads per KV head (the GQA group size)."""
        return self.num_heads // self.num_kv_heads

    @property
    def grid_seqlen_q(self) -> int:
        """The query-length bound the kernels' grids are sized by: ``max_seqlen_q``, but at most
        the token count, which no request's rows exceed. The same grid for any bound that holds,
        and no grid past CUDA's limits (or an int32 overflow) for a loose one (2**29 and up)."""
        return min(self.max_seqlen_q, self.num_tokens)

    @property
    def kv_capacity(self) -> int:
        """Static upper bound on any request's KV length: what its block-table row can address."""
        return self.max_blocks_per_seq * self.page_size
