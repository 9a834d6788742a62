"""The reference implementation of rel_attn in plain PyTorch: the oracle every backend is checked against.

It follows contract section 1 literally, accumulates in float32, works for any page size,
rel_extent, window, GQA ratio and strided K/V views, and bounds its memory by chunking
queries and keys (online softmax across key chunks), so a 32K-token prefill never builds a
(tokens x kv_len x heads) buffer. It reads the metadata on the host (one sync on CUDA),
so it is an oracle and a fallback, not a serving path.
"""

from __future__ import annotations

import torch

from .metadata import request_spans

#: Default bound on the elements of one (heads x query-chunk x key-chunk) score block.
DEFAULT_CHUNK_ELEMENTS = 1 << 22
#: Longest key chunk; longer spans are processed with an online softmax.
MAX_KEY_CHUNK = 4096


def plan_chunks(q_len: int, key_span: int, num_heads: int, budget: int = DEFAULT_CHUNK_ELEMENTS) -> tuple[int, int]:
    """Choose (query_chunk, key_chunk) so that ``num_heads * query_chunk * key_chunk <= budget``.

    ``key_span`` is the most keys one query chunk may need. The product may exceed ``budget``
    only when a single query row of a single key does (budget < num_heads).
    """
    key_chunk = max(1, min(key_span, MAX_KEY_CHUNK, budget // num_heads))
    query_chunk = max(1, min(q_len, budget // (num_heads * key_chunk)))
    return query_chunk, key_chunk


def rel_attn_reference(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    rel_logits: torch.Tensor,
    out: torch.Tensor,
    *,
    softmax_scale: float,
    window_left: int = -1,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> None:
    """Write rel_attn's result into ``out`` (same shape and dtype as q).

    Shapes: q, out (T, Hq, D); key_cache, value_cache (num_blocks, page, Hkv, D), possibly
    strided views; rel_logits (T, Hq, E); block_table (B, max_blocks) int32; cache_seqlens (B,)
    int32; cu_seqlens_q (B + 1,) int32. Rows of ``out`` outside every request are untouched;
    query rows that see no key (only possible with invalid metadata) get zeros.

    Equivalent PyTorch, per request b with K_b/V_b its gathered keys and values (G = Hq // Hkv)::

        s = softmax_scale * einsum("qhd,khd->hqk", q_b, K_b.repeat_interleave(G, 1))
        s += where((0 <= d) & (d < E), rel_logits_b.gather(-1, d.clamp(0, E - 1)), 0)
        s = s.masked_fill(~visible(d), -inf)        # d = q_abs - j; visible: 0 <= d (<= window_left)
        out_b = einsum("hqk,khd->qhd", softmax(s, -1), V_b.repeat_interleave(G, 1))
    """
    num_tokens, num_heads, head_dim = q.shape
    num_blocks, page_size, num_kv_heads, _ = key_cache.shape
    rel_extent = rel_logits.shape[2]
    group = num_heads // num_kv_heads
    dev = q.device
    capacity = block_table.shape[1] * page_size
    spans = request_spans(cu_seqlens_q.tolist(), cache_seqlens.tolist(), num_tokens, capacity)
    pages = block_table.clamp(0, num_blocks - 1).long()

    for b, span in enumerate(spans):
        if span.q_len == 0:
            continue
        q_b = q[span.start : span.start + span.q_len].float().view(span.q_len, num_kv_heads, group, head_dim)
        rel_b = rel_logits[span.start : span.start + span.q_len]
        out_b = out[span.start : span.start + span.q_len]
        first_abs = span.kv_len - span.q_len  # absolute position of query row 0 (may be < 0 if invalid)
        key_span = span.kv_len if window_left < 0 else min(span.kv_len, window_left + span.q_len)
        q_chunk, k_chunk = plan_chunks(span.q_len, max(key_span, 1), num_heads, chunk_elements)

        for i0 in range(0, span.q_len, q_chunk):
            i1 = min(span.q_len, i0 + q_chunk)
            q_abs = torch.arange(first_abs + i0, first_abs + i1, device=dev)
            hi = min(span.kv_len, first_abs + i1)  # last visible key is q_abs_max
            lo = 0 if window_left < 0 else max(0, first_abs + i0 - window_left)
            rows = i1 - i0
            acc = torch.zeros(num_kv_heads, group, rows, head_dim, dtype=torch.float32, device=dev)
            row_max = torch.full((num_kv_heads, group, rows), float("-inf"), device=dev)
            row_sum = torch.zeros(num_kv_heads, group, rows, device=dev)
            qc = q_b[i0:i1].permute(1, 2, 0, 3)  # (Hkv, G, rows, D)
            for j0 in range(lo, hi, k_chunk):
                j1 = min(hi, j0 + k_chunk)
                pos = torch.arange(j0, j1, device=dev)
                blk = pages[b, pos // page_size]
                slot = pos % page_size
                k = key_cache[blk, slot].float().permute(1, 2, 0)  # (Hkv, D, keys)
                v = value_cache[blk, slot].float().permute(1, 0, 2)  # (Hkv, keys, D)
                s = torch.matmul(qc, k.unsqueeze(1)) * softmax_scale  # (Hkv, G, rows, keys)
                dist = q_abs[:, None] - pos[None, :]  # (rows, keys)
                visible = dist >= 0
                if window_left >= 0:
                    visible &= dist <= window_left
                # Host arithmetic: does this key chunk meet the band 0 <= d < E of any row?
                if j1 > first_abs + i0 - rel_extent + 1 and j0 < first_abs + i1:
                    in_band = visible & (dist < rel_extent)
                    idx = dist.clamp(0, rel_extent - 1)
                    bias = rel_b[i0:i1].float().gather(2, idx[:, None, :].expand(rows, num_heads, j1 - j0))
                    bias = bias.masked_fill(~in_band[:, None, :], 0.0)
                    s = s + bias.view(rows, num_kv_heads, group, j1 - j0).permute(1, 2, 0, 3)
                s = s.masked_fill(~visible, float("-inf"))
                new_max = torch.maximum(row_max, s.amax(-1))
                safe_max = torch.where(new_max == float("-inf"), 0.0, new_max)
                p = torch.exp(s - safe_max[..., None])
                alpha = torch.exp(row_max - safe_max)
                row_sum = row_sum * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + torch.matmul(p, v.unsqueeze(1))
                row_max = new_max
            res = torch.where(row_sum[..., None] > 0, acc / row_sum.clamp_min(1e-30)[..., None], 0.0)
            out_b[i0:i1] = res.permute(2, 0, 1, 3).reshape(rows, num_heads, head_dim).to(out.dtype)
