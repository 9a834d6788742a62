"""Triton combine kernel for split-KV rel_attn: merge per-split partial outputs into ``out``.

Split ``s`` of row (t, h) left a normalized partial output ``O_s`` and a base-2 log-sum-exp
``L_s`` (-inf when the split saw no key). The merged row is
``sum_s 2^(L_s - M) O_s / sum_s 2^(L_s - M)`` with ``M = max_s L_s``; a row no split saw is 0.
Rows at or past ``cu_seqlens_q[-1]`` (and, for bad metadata, before ``cu_seqlens_q[0]``) are left
untouched.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_launch import INTERPRETED, KernelSpec, Launcher, compile_spec, make_spec, next_pow2, triton_type


@triton.jit(do_not_specialize=["num_reqs"])
def rel_attn_combine_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, cu_ptr, num_reqs,
    stride_ps, stride_pt, stride_ph,
    stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Grid: (T, Hq, HEAD_DIM // BLOCK_D). Shapes: part_out (S, T, Hq, D), part_lse (S, T, Hq) fp32.

    Every split's log-sum-exp of the row is loaded at once; the partial outputs are then read
    ``BLOCK_S`` splits at a time, so a program issues a few wide loads instead of a chain of
    ``NUM_SPLITS`` dependent ones.

    Rows before ``cu_seqlens_q[0]`` (which is 0 unless the metadata is bad) or at or past
    ``cu_seqlens_q[-1]`` are read (the workspace has every row of ``out``) but not stored: no
    split wrote their partial results, so they hold a workspace's stale values. Nothing waits on
    those bounds, so the partial results and the bound are read at once
    (an early return on it put one more dependent memory round trip before every load).
    """
    t = tl.program_id(0)
    first_row = tl.load(cu_ptr)  # only the store waits on these two
    num_rows = tl.load(cu_ptr + num_reqs)
    h = tl.program_id(1)
    offs_d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    row = t.to(tl.int64) * stride_pt + h * stride_ph

    offs_all = tl.arange(0, SPLITS_PAD)
    lse_all = tl.load(part_lse_ptr + offs_all * stride_ps + row, mask=offs_all < NUM_SPLITS, other=float("-inf"))
    lse_max = tl.max(lse_all, 0)
    base = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    total = tl.sum(tl.exp2(lse_all - base), 0)

    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    offs_s = tl.arange(0, BLOCK_S)
    for s0 in tl.range(0, NUM_SPLITS, BLOCK_S):
        s_ok = (s0 + offs_s) < NUM_SPLITS
        p_row = (s0 + offs_s) * stride_ps + row
        w = tl.exp2(tl.load(part_lse_ptr + p_row, mask=s_ok, other=float("-inf")) - base)
        o = tl.load(part_out_ptr + p_row[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None], other=0.0)
        acc += tl.sum(w[:, None] * o, 0)
    res = acc / tl.where(total > 0.0, total, 1.0)
    # a row before the first request or past the last: no store (with cu_seqlens_q[0] > 0, which
    # the forward clamps into a first request starting there, the rows before it saw no split)
    row_ok = offs_d < tl.where((t >= first_row) & (t < num_rows), HEAD_DIM, 0)
    tl.store(out_ptr + t.to(tl.int64) * stride_ot + h * stride_oh + offs_d, res.to(out_ptr.dtype.element_ty), mask=row_ok)


def combine_blocks(num_splits: int, head_dim: int) -> tuple[int, int, int]:
    """(SPLITS_PAD, BLOCK_S, BLOCK_D) of the combine kernel.

    A program reads at most 4096 partial values per load. Many splits mean few rows (long
    single-request decode), so the head dimension is cut finer (down to 16) to keep more
    programs, each with one wide load, instead of a few programs looping over split chunks
    (measurements in meta/TUNING.md).
    """
    splits_pad = next_pow2(num_splits)
    block_d = min(head_dim, max(16, 4096 // splits_pad))
    block_s = max(1, min(splits_pad, 4096 // block_d))
    return splits_pad, block_s, block_d


#: Integer parameters hinted divisible by 16 in an aligned variant (out's strides: multiples of
#: head_dim); num_reqs and the workspace's token and head strides are not specialised.
COMBINE_HINTED = frozenset(("stride_ot", "stride_oh"))
COMBINE_UNIT = frozenset(("stride_ph",))  # the workspace is contiguous in its last dim
COMBINE_NUM_WARPS, COMBINE_NUM_STAGES = 4, 2


def combine_spec(*, num_splits: int, head_dim: int, dtype: str, aligned: bool, arch: int) -> KernelSpec:
    """The compiled variant of the combine kernel: ``dtype`` of out, ``aligned`` as for the
    forward kernel, ``arch`` the compute capability (90)."""
    splits_pad, block_s, block_d = combine_blocks(num_splits, head_dim)
    constexprs = dict(HEAD_DIM=head_dim, NUM_SPLITS=num_splits, SPLITS_PAD=splits_pad, BLOCK_S=block_s, BLOCK_D=block_d)
    pointers = dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", out_ptr=triton_type(dtype), cu_ptr="*i32")
    return make_spec(
        rel_attn_combine_kernel, constexprs, pointers=pointers, aligned=aligned, hinted=COMBINE_HINTED,
        unit=COMBINE_UNIT, floats=frozenset(), num_warps=COMBINE_NUM_WARPS, num_stages=COMBINE_NUM_STAGES,
        maxnreg=None, arch=arch,
    )  # fmt: skip


_launchers: dict = {}


def combine_launch(
    num_splits: int, num_tokens: int, num_heads: int, head_dim: int, num_reqs: int, out_strides: tuple
) -> tuple[tuple[int, int, int], tuple]:
    """The combine's grid and its arguments after the four pointers (``part_out``, ``part_lse``,
    ``out``, ``cu_seqlens_q``), for the contiguous (S, T, Hq, D) / (S, T, Hq) fp32 workspace."""
    splits_pad, block_s, block_d = combine_blocks(num_splits, head_dim)
    grid = (num_tokens, num_heads, head_dim // block_d)
    tail = (
        num_reqs, num_tokens * num_heads, num_heads, 1, *out_strides[:2],
        head_dim, num_splits, splits_pad, block_s, block_d,  # constexprs
    )  # fmt: skip
    return grid, tail


def launch_rel_attn_combine(
    part_out: torch.Tensor,
    part_lse: torch.Tensor,
    out: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    launcher: Launcher | None = None,
) -> None:
    """Merge ``part_out`` (S, T, Hq, D) / ``part_lse`` (S, T, Hq) into ``out`` (T, Hq, D).

    Equivalent PyTorch: ``w = softmax(part_lse * ln 2, dim=0); out[:n] = (w[..., None] * part_out).sum(0)[:n]``
    with ``n = cu_seqlens_q[-1]``.

    ``launcher``: the compiled variant to launch (the backend's); None: the variant of these
    tensors, compiled on first use (``kernel[grid]`` under Triton's interpreter).
    """
    num_splits, num_tokens, num_heads, head_dim = part_out.shape
    grid, tail = combine_launch(num_splits, num_tokens, num_heads, head_dim, cu_seqlens_q.shape[0] - 1, out.stride())
    args = (part_out, part_lse, out, cu_seqlens_q, *tail)
    if INTERPRETED:
        rel_attn_combine_kernel[grid](*args, num_warps=COMBINE_NUM_WARPS, num_stages=COMBINE_NUM_STAGES)
        return
    if launcher is None:
        bits = part_out.data_ptr() | part_lse.data_ptr() | out.data_ptr() | cu_seqlens_q.data_ptr()
        bits |= out.stride(0) | out.stride(1)
        major, minor = torch.cuda.get_device_capability(out.device)
        spec = combine_spec(
            num_splits=num_splits, head_dim=head_dim, dtype=str(out.dtype).removeprefix("torch."),
            aligned=not bits & 15, arch=10 * major + minor,
        )  # fmt: skip
        device = torch.cuda.current_device()
        launcher = _launchers.get((spec, device))
        if launcher is None:
            launcher = _launchers[spec, device] = Launcher(compile_spec(spec))
    launcher(grid, args)
