"""Triton combine kernel for split-KV rel_attn: merge per-split partial outputs into ``out``.

Split ``s`` of row (t, h) left a normalized partial output ``O_s`` and a base-2 log-sum-exp
``L_s`` (-inf when the split saw no key). The merged row is
``sum_s 2^(L_s - M) O_s / sum_s 2^(L_s - M)`` with ``M = max_s L_s``; a row no split saw is 0.
Rows at or past ``cu_seqlens_q[-1]`` are left untouched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_launch import CachedLauncher


@triton.jit(do_not_specialize=["num_reqs"])
def rel_attn_combine_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, cu_ptr, num_reqs,
    stride_ps, stride_pt, stride_ph,
    stride_ot, stride_oh,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    """Grid: (T, cdiv(NUM_HEADS, BLOCK_H)). Shapes: part_out (S, T, Hq, D), part_lse (S, T, Hq) fp32."""
    t = tl.program_id(0)
    if t >= tl.load(cu_ptr + num_reqs):
        return
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    h_ok = offs_h < NUM_HEADS
    row = t.to(tl.int64) * stride_pt + offs_h * stride_ph

    lse_max = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    for s in tl.range(0, NUM_SPLITS):
        lse_max = tl.maximum(lse_max, tl.load(part_lse_ptr + s * stride_ps + row, mask=h_ok, other=float("-inf")))
    base = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    total = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], dtype=tl.float32)
    for s in tl.range(0, NUM_SPLITS):
        w = tl.exp2(tl.load(part_lse_ptr + s * stride_ps + row, mask=h_ok, other=float("-inf")) - base)
        o = tl.load(part_out_ptr + (s * stride_ps + row)[:, None] * HEAD_DIM + offs_d[None, :], mask=h_ok[:, None], other=0.0)
        total += w
        acc += w[:, None] * o
    res = acc / tl.where(total > 0.0, total, 1.0)[:, None]
    tl.store(
        out_ptr + t.to(tl.int64) * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :],
        res.to(out_ptr.dtype.element_ty),
        mask=h_ok[:, None],
    )


def launch_rel_attn_combine(
    part_out: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor, cu_seqlens_q: torch.Tensor
) -> None:
    """Merge ``part_out`` (S, T, Hq, D) / ``part_lse`` (S, T, Hq) into ``out`` (T, Hq, D).

    Equivalent PyTorch: ``w = softmax(part_lse * ln 2, dim=0); out[:n] = (w[..., None] * part_out).sum(0)[:n]``
    with ``n = cu_seqlens_q[-1]``.
    """
    num_splits, num_tokens, num_heads, head_dim = part_out.shape
    block_h = min(triton.next_power_of_2(num_heads), 16)
    grid = (num_tokens, triton.cdiv(num_heads, block_h))
    args = (
        part_out, part_lse, out, cu_seqlens_q, cu_seqlens_q.shape[0] - 1,
        part_lse.stride(0), part_lse.stride(1), part_lse.stride(2),
        out.stride(0), out.stride(1),
        num_heads, head_dim, num_splits, block_h,  # constexprs
    )  # fmt: skip
    _launch(grid, args, num_warps=4, num_stages=3)


_launch = CachedLauncher(rel_attn_combine_kernel)
