"""Drop-in names for vLLM's Inkling model (contract section 4), so a serving stack switches by import.

    from inkling_ops.compat import bucket_max_seqlen_q, inkling_fa4_num_splits, inkling_fa4_rel_attention
"""

from __future__ import annotations

import torch

from .api import rel_attn
from .heuristics import bucket_max_seqlen_q

__all__ = ["bucket_max_seqlen_q", "inkling_fa4_num_splits", "inkling_fa4_rel_attention"]


def inkling_fa4_num_splits(
    *,
    is_local: bool,
    batch_size: int,
    max_query_len: int,
    num_heads: int,
    num_kv_heads: int,
    max_kv_len: int,
) -> int:
    """vLLM's split-KV cap for the Blackwell (sheared-bias) kernel, with the same arithmetic.

    Kept so code that computes and passes it keeps working; :func:`inkling_fa4_rel_attention`
    accepts the value but lets inkling_ops' own heuristic choose (the Blackwell tuning does not
    describe our kernels). Local (sliding) layers never split; otherwise the count aims at a
    target number of CTAs of up to 256 query rows each, capped by a per-case maximum and by one
    split per 128 keys.
    """
    if is_local:
        return 1
    q_rows = max_query_len * (num_heads // num_kv_heads)
    q_tiles = -(-q_rows // 256)
    base_ctas = batch_size * num_kv_heads * q_tiles
    single = q_tiles == 1 and batch_size == 1
    target_ctas = 256 if single else (128 if q_tiles == 1 else 64)
    max_splits = 128
    if single:
        if num_kv_heads == 8:
            max_splits = 16
        elif num_kv_heads == 4 or max_kv_len <= 8192:
            max_splits = 32
        elif max_kv_len <= 65536:
            max_splits = 64
    return max(1, min(target_ctas // base_ctas, max_splits, -(-max_kv_len // 128)))


def inkling_fa4_rel_attention(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    *,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    softmax_scale: float,
    causal: bool,
    window_size: tuple[int, int],
    rel_extent: int,
    rel_logits: torch.Tensor,
    num_splits: int = 32,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """vLLM's entry point, served by ``torch.ops.inkling.rel_attn``.

    ``rel_extent`` must equal ``rel_logits.shape[-1]``; ``causal`` must be True; ``num_splits``
    is accepted and ignored (see :func:`inkling_fa4_num_splits`).
    """
    if causal is not True:
        raise ValueError(f"inkling_fa4_rel_attention: argument 'causal' is {causal!r}; expected True")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise TypeError(f"inkling_fa4_rel_attention: argument 'num_splits' must be an int >= 0, got {num_splits!r}")
    if isinstance(rel_extent, bool) or not isinstance(rel_extent, int):
        raise TypeError(f"inkling_fa4_rel_attention: argument 'rel_extent' must be an int, got {rel_extent!r}")
    if isinstance(rel_logits, torch.Tensor) and rel_logits.dim() == 3 and rel_logits.shape[-1] != rel_extent:
        raise ValueError(
            f"inkling_fa4_rel_attention: argument 'rel_extent' is {rel_extent}; expected "
            f"rel_logits.shape[-1] ({rel_logits.shape[-1]})"
        )
    del num_splits
    return rel_attn(
        q,
        key_cache,
        value_cache,
        block_table=block_table,
        cache_seqlens=cache_seqlens,
        cu_seqlens_q=cu_seqlens_q,
        rel_logits=rel_logits,
        max_seqlen_q=max_seqlen_q,
        softmax_scale=softmax_scale,
        window_size=window_size,
        out=out,
    )
