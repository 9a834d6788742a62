"""Triton merge of the CuTe kernel's split single-tile requests (``decode_splits``, an experiment).

With ``decode_splits = S`` the CuTe forward kernel gives each request whose packed rows
(``q_len * q_per_kv``) fit one M tile S blocks, each walking one part of the key tiles, and each
writes its normalised partial O (fp32) and its rows' base-2 log-sum-exp into the workspace,
indexed ``[split, request, kv_head, row]`` with ``row = token * q_per_kv + head % q_per_kv``.
This kernel writes those requests' rows of ``out``: ``sum_s 2^(L_s - M) O_s / sum_s 2^(L_s - M)``,
``M = max_s L_s``, 0 for a row no split saw a key of. Rows of the other requests are not touched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def merge_splits_kernel(
    o_part_ptr, lse_part_ptr, out_ptr, cu_ptr, num_tokens,
    stride_ps, stride_pb, stride_ph,
    stride_ot, stride_oh,
    G: tl.constexpr, TILE_M: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    """Grid: (B, kv_heads). Shapes: o_part (S, B, kv_heads, TILE_M, D), lse_part (S, B, kv_heads,
    TILE_M) fp32, contiguous in the last two dims; out (T, kv_heads * G, D)."""
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    q_start = tl.minimum(tl.maximum(tl.load(cu_ptr + req), 0), num_tokens)
    q_end = tl.minimum(tl.maximum(tl.load(cu_ptr + req + 1), q_start), num_tokens)
    rows = (q_end - q_start) * G
    rows = tl.where(rows <= TILE_M, rows, 0)  # a request of several M tiles was not split
    part = req.to(tl.int64) * stride_pb + kv_head * stride_ph
    offs_d = tl.arange(0, HEAD_DIM)
    for r0 in tl.range(0, TILE_M, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        ok = r < rows
        lse_max = tl.full([BLOCK_R], float("-inf"), tl.float32)
        for s in tl.static_range(NUM_SPLITS):
            lse = tl.load(lse_part_ptr + s * stride_ps + part + r, mask=ok, other=float("-inf"))
            lse_max = tl.maximum(lse_max, lse)
        base = tl.where(lse_max == float("-inf"), 0.0, lse_max)
        total = tl.zeros([BLOCK_R], tl.float32)
        acc = tl.zeros([BLOCK_R, HEAD_DIM], tl.float32)
        for s in tl.static_range(NUM_SPLITS):
            lse = tl.load(lse_part_ptr + s * stride_ps + part + r, mask=ok, other=float("-inf"))
            w = tl.exp2(lse - base)
            o = tl.load(o_part_ptr + (s * stride_ps + part + r)[:, None] * HEAD_DIM + offs_d[None, :], mask=ok[:, None], other=0.0)
            acc += w[:, None] * o
            total += w
        res = acc / tl.where(total > 0.0, total, 1.0)[:, None]
        tok = q_start + r // G
        head = kv_head * G + r % G
        dst = out_ptr + tok.to(tl.int64)[:, None] * stride_ot + (head * stride_oh)[:, None] + offs_d[None, :]
        tl.store(dst, res.to(out_ptr.dtype.element_ty), mask=ok[:, None])


def merge_splits(o_part: torch.Tensor, lse_part: torch.Tensor, out: torch.Tensor, cu_seqlens_q: torch.Tensor) -> None:
    """Write the split requests' rows of ``out`` (T, Hq, D) from the workspace ``o_part``
    (S, B, kv_heads, tile_m, D) and ``lse_part`` (S, B, kv_heads, tile_m), both fp32 and contiguous.

    Equivalent PyTorch, for each request ``b`` with ``0 < q_len * G <= tile_m`` and KV head ``h``:
    ``w = softmax(lse_part[:, b, h, :n] * ln 2, dim=0)``, ``n = q_len * G``;
    ``out[q_start:q_end, h*G:(h+1)*G] = (w[..., None] * o_part[:, b, h, :n]).sum(0).view(q_len, G, D)``.
    """
    splits, num_reqs, kv_heads, tile_m, head_dim = o_part.shape
    if lse_part.shape != o_part.shape[:4]:
        raise ValueError(f"lse_part has shape {tuple(lse_part.shape)}; expected {tuple(o_part.shape[:4])}")
    if not (o_part.is_contiguous() and lse_part.is_contiguous()):
        raise ValueError("o_part and lse_part must be contiguous")
    if out.shape[1] % kv_heads or out.stride(-1) != 1:
        raise ValueError(f"out has shape {tuple(out.shape)} and strides {out.stride()}; expected heads a multiple "
                         f"of {kv_heads} and a contiguous last dim")  # fmt: skip
    if num_reqs == 0:
        return
    stride_ps, stride_pb, stride_ph = lse_part.stride()[:3]
    merge_splits_kernel[(num_reqs, kv_heads)](
        o_part, lse_part, out, cu_seqlens_q, out.shape[0], stride_ps, stride_pb, stride_ph, out.stride(0), out.stride(1),
        G=out.shape[1] // kv_heads, TILE_M=tile_m, HEAD_DIM=head_dim, NUM_SPLITS=splits, BLOCK_R=16,
    )  # fmt: skip
