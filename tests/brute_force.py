"""A float64 brute-force oracle for rel_attn, written straight from contract section 1.

Deliberately naive and independent of ``inkling_ops.reference``: it walks requests and query
rows one at a time, gathers each key by indexing the block table for that single position,
lists the visible keys of the row explicitly, and adds the bias key by key with a
Python-level test of ``0 <= d < E``.
It only ever touches key positions ``j < kv_len_b``, so garbage planted elsewhere in the
caches cannot leak in. Metadata must be valid (it is the oracle, not a clamping backend).
"""

from __future__ import annotations

import torch


def rel_attn_brute_force(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    rel_logits: torch.Tensor,
    *,
    softmax_scale: float,
    window_size: tuple[int, int] | list[int] = (-1, -1),
    max_seqlen_q: int | None = None,
) -> torch.Tensor:
    """Return rel_attn's output as a float64 tensor shaped like ``q``.

    Rows of ``q`` that belong to no request are zero. ``max_seqlen_q`` is accepted (and
    ignored) so a case's ``kwargs()`` can be splatted in.
    """
    del max_seqlen_q
    left = int(window_size[0])
    num_tokens, num_heads, head_dim = q.shape
    page_size = key_cache.shape[1]
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    extent = rel_logits.shape[-1]
    cu = [int(x) for x in cu_seqlens_q.tolist()]
    seqlens = [int(x) for x in cache_seqlens.tolist()]
    table = block_table.tolist()
    q64, rel64 = q.double(), rel_logits.double()
    out = torch.zeros(num_tokens, num_heads, head_dim, dtype=torch.float64)

    for b, kv_len in enumerate(seqlens):
        q_len = cu[b + 1] - cu[b]
        if q_len == 0:
            continue
        # Gather this request's keys/values position by position through its block-table row.
        keys = torch.stack([key_cache[table[b][j // page_size], j % page_size] for j in range(kv_len)]).double()
        vals = torch.stack([value_cache[table[b][j // page_size], j % page_size] for j in range(kv_len)]).double()
        head_to_kv = [h // group for h in range(num_heads)]  # query head h reads KV head h // G
        for i in range(q_len):
            t = cu[b] + i
            q_abs = kv_len - q_len + i
            visible = [j for j in range(kv_len) if 0 <= q_abs - j and (left < 0 or q_abs - j <= left)]
            if not visible:
                continue
            k_rows = keys[visible][:, head_to_kv]  # (n, Hq, D)
            v_rows = vals[visible][:, head_to_kv]
            scores = softmax_scale * torch.einsum("hd,nhd->hn", q64[t], k_rows)  # (Hq, n)
            for n, j in enumerate(visible):
                d = q_abs - j
                if d < extent:  # distances >= E: zero bias, still visible
                    scores[:, n] += rel64[t, :, d]
            probs = torch.softmax(scores, dim=-1)
            out[t] = torch.einsum("hn,nhd->hd", probs, v_rows)
    return out
