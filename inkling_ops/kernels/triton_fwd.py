"""Triton forward kernel of rel_attn: paged varlen causal attention with the Inkling relative bias.

One kernel serves prefill/extend and split-KV decode (``SPLIT_KV``):

- A program owns ``BLOCK_M`` rows = ``BLOCK_M // G_PAD`` query tokens x ``G_PAD`` query heads of
  one KV head of one request, so every query head of a KV head shares each K/V tile (GQA).
- The program's key range is cut into ``BLOCK_N``-key tiles of three kinds: tiles at the low
  edge of a sliding window (masked), tiles entirely further than ``REL_EXTENT`` from every row
  and fully visible (the plain loop: no bias load, no mask), and tiles meeting the band
  ``0 <= d < E`` or the diagonal (bias loaded, masked). Tiles wholly outside the window or past
  the diagonal are never visited.
- Online softmax in base 2: ``s = qk * (softmax_scale * log2 e)`` in plain tiles and
  ``s = fma(bias, log2 e, qk * (softmax_scale * log2 e))`` in band tiles.
- With ``SPLIT_KV`` the tiles of a program are shared among ``num_splits`` programs; each writes
  its normalized partial output and base-2 log-sum-exp to a workspace that
  :mod:`inkling_ops.kernels.triton_combine` reduces.

Metadata is clamped as :mod:`inkling_ops.metadata` describes, so no access leaves its tensor
whatever cu_seqlens_q, cache_seqlens and block_table hold. Nothing here syncs with the host.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .triton_configs import FwdConfig
from .triton_launch import CachedLauncher, next_pow2

LOG2E = 1.4426950408889634


@triton.jit
def _tile_ranges(qa_lo, qa_hi, kv_len, BLOCK_N: tl.constexpr, REL_EXTENT: tl.constexpr, WINDOW_LEFT: tl.constexpr):
    """Tiling of the keys seen by rows at absolute positions [qa_lo, qa_hi]: ``(lo_tile, n_tiles,
    n_edge, n_plain)``. Keys [lo, hi) are cut into BLOCK_N tiles from ``lo_tile``. Tiles
    [0, n_edge) hold the low edge of the window (some row's window starts inside them); tiles
    [n_edge, n_plain) are plain (every key visible to every row, at distance >= REL_EXTENT >= 1);
    the rest meet the bias band or the diagonal."""
    hi = tl.minimum(kv_len, qa_hi + 1)
    if WINDOW_LEFT >= 0:
        lo = tl.maximum(qa_lo - WINDOW_LEFT, 0)
    else:
        lo = 0
    lo_tile = (lo // BLOCK_N) * BLOCK_N
    n_tiles = tl.maximum(tl.cdiv(hi - lo_tile, BLOCK_N), 0)
    if WINDOW_LEFT >= 0:
        n_edge = tl.minimum(tl.maximum(tl.cdiv(qa_hi - WINDOW_LEFT - lo_tile, BLOCK_N), 0), n_tiles)
    else:
        n_edge = 0
    n_plain = tl.minimum(tl.maximum((qa_lo - REL_EXTENT + 1 - lo_tile) // BLOCK_N, n_edge), n_tiles)
    return lo_tile, n_tiles, n_edge, n_plain


@triton.jit
def _tile_blocks(bt_row, j0, max_blocks_per_seq, num_blocks, offs_n, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Clamped KV block ids of keys [j0, j0 + BLOCK_N): a scalar when every tile lies in one page
    (PAGE a multiple of BLOCK_N), else one per key. Safe for any j0 (the entry index is clamped
    too), so the caller can fetch the next tile's ids one iteration ahead. No mask: keys past
    kv_len are masked where K/V load."""
    if PAGE % BLOCK_N == 0:
        blk = tl.load(bt_row + tl.minimum(j0 // PAGE, max_blocks_per_seq - 1))
    elif BLOCK_N % PAGE == 0:
        # j0 is a multiple of BLOCK_N, so of PAGE: a scalar page plus a constant per key.
        blk = tl.load(bt_row + tl.minimum(j0 // PAGE + offs_n // PAGE, max_blocks_per_seq - 1))
    else:  # pages that neither divide nor are a multiple of the tile
        blk = tl.load(bt_row + tl.minimum((j0 + offs_n) // PAGE, max_blocks_per_seq - 1))
    return tl.minimum(tl.maximum(blk, 0), num_blocks - 1)


@triton.jit
def _gather(ptrs, mask, ASM_GATHER: tl.constexpr):
    """``tl.load(ptrs, mask, other=0)`` of a 16-bit tensor, element by element.

    With ASM_GATHER the load is inline PTX (a predicated ``ld.global.b16``). Triton treats it
    as a pure elementwise op, so it takes the layout of its user, the QK^T accumulator: the bias
    lands in the MMA layout directly, where a ``tl.load`` is given a blocked layout and converted
    through shared memory every tile. The interpreter cannot run PTX, so it uses ``tl.load``.

    Not ``ld.global.nc``: ptxas moves non-coherent loads across the loop's barriers, and in some
    kernels sank the next tile's gathers to the end of the iteration, just before their use
    (sm_90 SASS). A plain ``ld.global`` stays where Triton put it, a tile ahead of its use:
    same values, the sliding prefill 8% faster, the sliding decode's one-masked-loop variant
    faster than its two-loop one (meta/logs/ab_pinned_gather_c64efee.log).
    """
    if ASM_GATHER:
        bits = tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b16 $0, 0; @p ld.global.b16 $0, [$1]; }",
            "=h,l,r",
            [ptrs, mask.to(tl.int32)],
            dtype=tl.int16,
            is_pure=True,
            pack=1,
        )
        return bits.to(ptrs.dtype.element_ty, bitcast=True)
    else:
        return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def _tile_bias(
    rel_row_ptr, stride_re, q_pos, j0, offs_n,
    REL_EXTENT: tl.constexpr, ASM_GATHER: tl.constexpr,
):  # fmt: skip
    """The bias of keys [j0, j0 + BLOCK_N): ``rel[t, h, d]`` with ``d = q_pos - j`` where
    ``0 <= d < E``, else 0. ``q_pos`` is -1 on padding rows, so they read nothing.

    Every access is masked by the band, so any j0 is safe (prefetching past the last tile too).
    Per element: one subtraction, one unsigned compare, one address with a per-column offset.
    """
    dq = q_pos - j0  # each row's distance to key j0
    d = dq[:, None] - offs_n[None, :]
    mask = d.to(tl.uint32, bitcast=True) < REL_EXTENT
    ptrs = (rel_row_ptr + dq * stride_re)[:, None] - (offs_n * stride_re)[None, :]
    return _gather(ptrs, mask, ASM_GATHER)


@triton.jit
def _attend_tile(
    acc, m_i, l_i, q, blk, bias,
    k_ptr, v_ptr, j0, kv_len,
    stride_kb, stride_kp, stride_vb, stride_vp,
    rel_row_ptr, stride_re, q_pos, qk_scale,
    offs_n, offs_d,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, REL_EXTENT: tl.constexpr, WINDOW_LEFT: tl.constexpr,
    FULL: tl.constexpr, DOT_PRECISION: tl.constexpr, BIAS_GIVEN: tl.constexpr, ASM_GATHER: tl.constexpr,
    KV_SAME_STRIDES: tl.constexpr, KV_ROW_I32: tl.constexpr, KV_SLOT_SHIFT: tl.constexpr,
    KV_MODE: tl.constexpr = 0, k_in=0, v_in=0, tile_ok=True, KV_EVICTION: tl.constexpr = "",
):  # fmt: skip
    """Fold keys [j0, j0 + BLOCK_N) into the running (acc, m_i, l_i) of the program's rows.

    ``blk``: the tile's block ids from :func:`_tile_blocks`, fetched one iteration earlier so the
    K/V addresses do not hang on a load of the same iteration (Triton then pipelines K/V deeper).
    FULL=False: every key is visible to every row and no bias applies (no masks; ``bias`` unused).
    FULL=True: apply the causal / window / length masks and the bias where 0 <= d < REL_EXTENT:
    ``bias`` when BIAS_GIVEN (loaded earlier by the caller), else gathered here first, so its
    latency overlaps the K/V wait and the QK^T product.
    ``q_pos``: each row's absolute position, -1 on padding rows (no key is visible to them, and
    a valid row sees no key at or past kv_len, so the scores need no length mask).
    ``k_ptr``/``v_ptr`` already point at this program's KV head.

    KV_MODE splits the work for the register-prefetch loop (``FwdConfig.kv_prefetch``):

    - 0: load this tile's K/V and fold it in (the pipelined loops).
    - 1: only load, and return ``(k, v)``: nothing is read when the scalar ``tile_ok`` is false,
      nor (FULL) for keys at or past kv_len; those are 0.
    - 2: fold in ``k_in``/``v_in``, loaded by an earlier mode-1 call.

    One body serves all three on purpose: built from separate address / score / softmax helpers,
    the page-128 band pass compiled to the same PTX except for its debug tables, yet ptxas
    scheduled it differently and it measured 1.1% slower (8K global: 420.0 against 415.4 us,
    ``meta/logs/ab_band_390be60_vs_c334786.log``).
    """
    keys = j0 + offs_n
    # ``blk`` holds one id per key unless every tile lies in one page (see _tile_blocks).
    if KV_ROW_I32:
        # K and V alike, every key row of the cache numbered in int32 (see launch_rel_attn_fwd):
        # one 32-bit multiply-add and one widening multiply (or shift) per key. When pages divide
        # the tile, j0 is a multiple of PAGE, so a key's slot is its offset in the tile modulo
        # PAGE. Also where one page holds the tile: the 64-bit offsets there cost the page-128
        # band pass 4392 sm_90 instructions and 56 bytes of spills, against 3968 and none.
        if PAGE % BLOCK_N == 0:
            rows = blk * (stride_kb // stride_kp) + (j0 % PAGE + offs_n)
        elif BLOCK_N % PAGE == 0:
            rows = blk * (stride_kb // stride_kp) + offs_n % PAGE
        else:
            rows = blk * (stride_kb // stride_kp) + keys % PAGE
        if KV_SLOT_SHIFT >= 0:
            # The slot stride is 2**KV_SLOT_SHIFT elements (one key row: Hkv * D, a power of
            # two for the usual head counts): a shift, which also lets the compiler fold the
            # per-element column offsets in (the page-16 plain loop: 460 -> 402 instructions).
            k_off = rows.to(tl.uint32).to(tl.int64) << KV_SLOT_SHIFT
        else:
            # Both factors are non-negative 32-bit values: zero-extended, their product is one
            # widening multiply (a sign-extended one costs ~7 instructions per key).
            k_off = rows.to(tl.uint32).to(tl.int64) * stride_kp.to(tl.uint32).to(tl.int64)
        v_off = k_off
    else:
        # Caches with more key rows than int32 holds: 64-bit offsets.
        blk = blk.to(tl.int64)
        if PAGE % BLOCK_N == 0:
            slots = ((j0 % PAGE) + offs_n).to(tl.int64)
        else:
            slots = (keys % PAGE).to(tl.int64)
        k_off = blk * stride_kb + slots * stride_kp
        if KV_SAME_STRIDES and PAGE % BLOCK_N != 0:
            # K and V pages laid out alike (the usual case): one per-key address computation.
            # (With one page per tile the addresses are cheap, and sharing them made ptxas spill.)
            v_off = k_off
        else:
            v_off = blk * stride_vb + slots * stride_vp
    if KV_MODE == 1:
        # one compare per key against a limit that is 0 when the tile is off
        if FULL:
            ok = keys < tl.where(tile_ok, kv_len, 0)
        else:
            ok = offs_n < tl.where(tile_ok, BLOCK_N, 0)
        k = tl.load(k_ptr + k_off[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0, eviction_policy=KV_EVICTION)
        v = tl.load(v_ptr + v_off[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0, eviction_policy=KV_EVICTION)
        return k, v
    else:
        k = k_in
        v = v_in
        if FULL:
            d = (q_pos - j0)[:, None] - offs_n[None, :]
            if not BIAS_GIVEN:
                bias = _tile_bias(rel_row_ptr, stride_re, q_pos, j0, offs_n, REL_EXTENT, ASM_GATHER)
            if KV_MODE == 0:
                key_ok = keys < kv_len
                k = tl.load(k_ptr + k_off[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0, eviction_policy=KV_EVICTION)
                v = tl.load(v_ptr + v_off[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0, eviction_policy=KV_EVICTION)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
            s = bias.to(tl.float32) * 1.4426950408889634 + s * qk_scale
            if WINDOW_LEFT >= 0:  # 0 <= d <= WINDOW_LEFT
                visible = d.to(tl.uint32, bitcast=True) <= WINDOW_LEFT
            else:
                visible = d >= 0
            s = tl.where(visible, s, float("-inf"))
        else:
            if KV_MODE == 0:
                k = tl.load(k_ptr + k_off[:, None] + offs_d[None, :], eviction_policy=KV_EVICTION)
                v = tl.load(v_ptr + v_off[:, None] + offs_d[None, :], eviction_policy=KV_EVICTION)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale

        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows that have seen no key yet
        p = tl.exp2(s - m_base[:, None])
        alpha = tl.exp2(m_i - m_base)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        return acc, m_new, l_i


@triton.jit
def _tile_loop(
    acc, m_i, l_i, q, t_lo, t_hi, lo_tile,
    bt_row, kv_len, max_blocks_per_seq, num_blocks,
    k_ptr, v_ptr, stride_kb, stride_kp, stride_vb, stride_vp,
    rel_row_ptr, stride_re, q_pos, qk_scale,
    offs_n, offs_d,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, REL_EXTENT: tl.constexpr, WINDOW_LEFT: tl.constexpr,
    DOT_PRECISION: tl.constexpr, FULL: tl.constexpr, BIAS_AHEAD: tl.constexpr, ASM_GATHER: tl.constexpr,
    KV_SAME_STRIDES: tl.constexpr, KV_ROW_I32: tl.constexpr, KV_SLOT_SHIFT: tl.constexpr,
    t_phase=0, TILE_STEP: tl.constexpr = 1, KV_PREFETCH: tl.constexpr = False, KV_EVICTION: tl.constexpr = "",
):  # fmt: skip
    """Tiles [t_lo, t_hi) of one kind (see :func:`_attend_tile`): plain (FULL=False), or masked
    and biased (FULL=True).
    With TILE_STEP > 1 only the tiles ``t = t_phase (mod TILE_STEP)`` of the range (strided
    split-KV: split ``t_phase`` of ``TILE_STEP``).

    Each iteration fetches the next tile's block ids. The loops take the launch's num_stages: an
    explicit per-loop num_stages made Triton 3.6 pipeline the block-id load too and leave K/V
    unpipelined (TTGIR, 2026-11-30). The bias gather is a scalar load Triton does not pipeline.
    By default each tile issues it first (inside :func:`_attend_tile`). With BIAS_AHEAD (biased
    tiles only) the next tile's bias is loaded one iteration early into loop-carried registers:
    more registers, latency hidden by a whole tile. (The gather is a plain ``ld.global``, which ptxas
    keeps at the top of the iteration; see :func:`_gather`.)

    KV_PREFETCH (for launches with num_stages=1, which Triton does not pipeline): the next tile's
    K and V are loaded into registers while this one is computed, and its block ids two tiles
    ahead; biased tiles then always take their bias one tile ahead. Loads of a tile past the
    range are masked off, so they cost no memory traffic.
    """
    if TILE_STEP > 1:
        t_lo = t_lo + (t_phase + TILE_STEP - t_lo % TILE_STEP) % TILE_STEP  # first tile of this phase
    STEP_KEYS: tl.constexpr = TILE_STEP * BLOCK_N
    blk = _tile_blocks(bt_row, lo_tile + t_lo * BLOCK_N, max_blocks_per_seq, num_blocks, offs_n, PAGE, BLOCK_N)
    if BIAS_AHEAD or (KV_PREFETCH and FULL):
        bias = _tile_bias(rel_row_ptr, stride_re, q_pos, lo_tile + t_lo * BLOCK_N, offs_n, REL_EXTENT, ASM_GATHER)
    else:
        bias = 0.0  # gathered inside _attend_tile
    if KV_PREFETCH:
        j_first = lo_tile + t_lo * BLOCK_N
        k, v = _attend_tile(
            acc, m_i, l_i, q, blk, bias, k_ptr, v_ptr, j_first, kv_len,
            stride_kb, stride_kp, stride_vb, stride_vp, rel_row_ptr, stride_re, q_pos, qk_scale,
            offs_n, offs_d, PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, FULL, DOT_PRECISION, True, ASM_GATHER,
            KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT, KV_MODE=1, tile_ok=t_lo < t_hi, KV_EVICTION=KV_EVICTION,
        )  # fmt: skip
        blk = _tile_blocks(bt_row, j_first + STEP_KEYS, max_blocks_per_seq, num_blocks, offs_n, PAGE, BLOCK_N)
        for t in tl.range(t_lo, t_hi, TILE_STEP):
            j0 = lo_tile + t * BLOCK_N
            blk_after = _tile_blocks(
                bt_row, j0 + 2 * STEP_KEYS, max_blocks_per_seq, num_blocks, offs_n, PAGE, BLOCK_N
            )
            k_next, v_next = _attend_tile(
                acc, m_i, l_i, q, blk, bias, k_ptr, v_ptr, j0 + STEP_KEYS, kv_len,
                stride_kb, stride_kp, stride_vb, stride_vp, rel_row_ptr, stride_re, q_pos, qk_scale,
                offs_n, offs_d, PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, FULL, DOT_PRECISION, True, ASM_GATHER,
                KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT, KV_MODE=1, tile_ok=t + TILE_STEP < t_hi,
                KV_EVICTION=KV_EVICTION,
            )  # fmt: skip
            if FULL:
                # band-masked even in interior tiles: the tile after the range may be anywhere
                bias_next = _tile_bias(rel_row_ptr, stride_re, q_pos, j0 + STEP_KEYS, offs_n, REL_EXTENT, ASM_GATHER)
            acc, m_i, l_i = _attend_tile(
                acc, m_i, l_i, q, blk, bias, k_ptr, v_ptr, j0, kv_len,
                stride_kb, stride_kp, stride_vb, stride_vp, rel_row_ptr, stride_re, q_pos, qk_scale,
                offs_n, offs_d, PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, FULL, DOT_PRECISION, True, ASM_GATHER,
                KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT, KV_MODE=2, k_in=k, v_in=v,
                KV_EVICTION=KV_EVICTION,
            )  # fmt: skip
            k = k_next
            v = v_next
            blk = blk_after
            if FULL:
                bias = bias_next
    else:
        for t in tl.range(t_lo, t_hi, TILE_STEP):
            blk_next = _tile_blocks(
                bt_row, lo_tile + (t + TILE_STEP) * BLOCK_N, max_blocks_per_seq, num_blocks, offs_n, PAGE, BLOCK_N
            )
            if BIAS_AHEAD:
                bias_next = _tile_bias(
                    rel_row_ptr, stride_re, q_pos, lo_tile + (t + TILE_STEP) * BLOCK_N, offs_n, REL_EXTENT, ASM_GATHER
                )
            acc, m_i, l_i = _attend_tile(
                acc, m_i, l_i, q, blk, bias, k_ptr, v_ptr, lo_tile + t * BLOCK_N, kv_len,
                stride_kb, stride_kp, stride_vb, stride_vp, rel_row_ptr, stride_re, q_pos, qk_scale,
                offs_n, offs_d, PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, FULL, DOT_PRECISION, BIAS_AHEAD, ASM_GATHER,
                KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT, KV_EVICTION=KV_EVICTION,
            )  # fmt: skip
            blk = blk_next
            if BIAS_AHEAD:
                bias = bias_next
    return acc, m_i, l_i


@triton.jit(do_not_specialize=["num_tokens", "num_blocks"])
def rel_attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, rel_ptr, bt_ptr, seqlens_ptr, cu_ptr, out_ptr, part_out_ptr, part_lse_ptr,
    qk_scale, num_tokens, num_blocks, max_blocks_per_seq,
    stride_qt, stride_qh,
    stride_kb, stride_kp, stride_kh,
    stride_vb, stride_vp, stride_vh,
    stride_rt, stride_rh, stride_re,
    stride_ot, stride_oh,
    stride_bt,
    stride_ps, stride_pt, stride_ph,
    G: tl.constexpr, G_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, NUM_KV_HEADS: tl.constexpr,
    PAGE: tl.constexpr, REL_EXTENT: tl.constexpr, WINDOW_LEFT: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLIT_KV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
    PASS: tl.constexpr, P1_BLOCK_Q: tl.constexpr, P1_BLOCK_N: tl.constexpr, BIAS_AHEAD: tl.constexpr,
    ASM_GATHER: tl.constexpr, KV_SAME_STRIDES: tl.constexpr, KV_ROW_I32: tl.constexpr, KV_SLOT_SHIFT: tl.constexpr,
    TILE_STEP: tl.constexpr, KV_PREFETCH: tl.constexpr, ONE_MASKED_LOOP: tl.constexpr,
    KV_EVICTION: tl.constexpr,
):  # fmt: skip
    """Grid: (row blocks of the longest request, num_splits, num_reqs * NUM_KV_HEADS).

    Shapes: q, out (T, Hq, D); k, v (num_blocks, PAGE, Hkv, D) (any strides, last dim contiguous);
    rel (T, Hq, REL_EXTENT); bt (num_reqs, max_blocks_per_seq); part_out (NUM_SPLITS, T, Hq, D) and
    part_lse (NUM_SPLITS, T, Hq) fp32, used only with SPLIT_KV.

    PASS 0 runs every tile. Prefill can instead run two launches with their own tile shapes:
    PASS 1 runs only the plain tiles and leaves each row's normalized partial output in ``out``
    and its base-2 log-sum-exp in ``part_lse`` (T, Hq); PASS 2 (whose BLOCK_N divides P1_BLOCK_N
    and whose BLOCK_Q divides P1_BLOCK_Q, pass 1's tiling) starts from that state and runs every
    other tile: the window edge, the bias band and the diagonal.
    """
    BLOCK_Q: tl.constexpr = BLOCK_M // G_PAD
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # longest rows first (causal load balance)
    pid_split = tl.program_id(1)
    pid_bh = tl.program_id(2)
    req = pid_bh // NUM_KV_HEADS
    kv_head = pid_bh % NUM_KV_HEADS

    # Clamped metadata (inkling_ops.metadata): every index below stays in bounds.
    q_start = tl.minimum(tl.maximum(tl.load(cu_ptr + req), 0), num_tokens)
    q_len = tl.minimum(tl.maximum(tl.load(cu_ptr + req + 1), q_start), num_tokens) - q_start
    kv_len = tl.minimum(tl.maximum(tl.load(seqlens_ptr + req), 0), max_blocks_per_seq * PAGE)
    if pid_m * BLOCK_Q >= q_len:
        return

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    tok = pid_m * BLOCK_Q + offs_m // G_PAD  # request-local token of each row
    grp = offs_m % G_PAD
    row_valid = (tok < q_len) & (grp < G)
    q_pos = tl.where(row_valid, kv_len - q_len + tok, -1)  # absolute position; -1: padding row
    head = kv_head * G + grp
    t_row = (q_start + tok).to(tl.int64)

    q = tl.load(
        q_ptr + t_row[:, None] * stride_qt + head[:, None].to(tl.int64) * stride_qh + offs_d[None, :],
        mask=row_valid[:, None],
        other=0.0,
    )
    rel_row_ptr = rel_ptr + t_row * stride_rt + head.to(tl.int64) * stride_rh
    k_head_ptr = k_ptr + kv_head.to(tl.int64) * stride_kh
    v_head_ptr = v_ptr + kv_head.to(tl.int64) * stride_vh
    bt_row = bt_ptr + req.to(tl.int64) * stride_bt

    # This program's rows and the tiling of their keys.
    last_tok = tl.minimum(q_len, (pid_m + 1) * BLOCK_Q) - 1
    qa_lo = kv_len - q_len + pid_m * BLOCK_Q
    qa_hi = kv_len - q_len + last_tok
    lo_tile, n_tiles, n_edge, n_plain = _tile_ranges(qa_lo, qa_hi, kv_len, BLOCK_N, REL_EXTENT, WINDOW_LEFT)

    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    # Tile ranges [ta0, ta1) masked + biased, [tp0, tp1) plain, [tb0, tb1) masked + biased.
    if PASS == 0:
        if SPLIT_KV and TILE_STEP == 1:
            per_split = tl.cdiv(n_tiles, NUM_SPLITS)
            ta0 = pid_split * per_split
            tb1 = tl.minimum(ta0 + per_split, n_tiles)
        else:  # one program, or strided splits (TILE_STEP == NUM_SPLITS: every NUM_SPLITS-th tile)
            ta0 = 0
            tb1 = n_tiles
        ta1 = tl.maximum(ta0, tl.minimum(tb1, n_edge))
        tp0 = ta1
        tp1 = tl.maximum(tp0, tl.minimum(tb1, n_plain))
        tb0 = tp1
    elif PASS == 1:
        tp0 = n_edge
        tp1 = n_plain
        if tp1 <= tp0:
            return  # no plain tile: pass 2 does every tile of these rows
    else:
        # Pass 1's plain key range [p_lo, p_hi) for these rows (one pass-1 program holds them all).
        p1_qa_lo = kv_len - q_len + (pid_m * BLOCK_Q // P1_BLOCK_Q) * P1_BLOCK_Q
        p1_qa_hi = kv_len - q_len + tl.minimum(q_len, (pid_m * BLOCK_Q // P1_BLOCK_Q + 1) * P1_BLOCK_Q) - 1
        p1_lo_tile, _, p1_n_edge, p1_n_plain = _tile_ranges(
            p1_qa_lo, p1_qa_hi, kv_len, P1_BLOCK_N, REL_EXTENT, WINDOW_LEFT
        )
        has_plain = p1_n_plain > p1_n_edge
        p_lo = p1_lo_tile + p1_n_edge * P1_BLOCK_N
        p_hi = p1_lo_tile + p1_n_plain * P1_BLOCK_N
        ta0 = 0
        ta1 = tl.where(has_plain, tl.minimum(tl.maximum((p_lo - lo_tile) // BLOCK_N, 0), n_tiles), n_tiles)
        tb0 = tl.where(has_plain, tl.minimum(tl.maximum((p_hi - lo_tile) // BLOCK_N, ta1), n_tiles), n_tiles)
        tb1 = n_tiles
        # Resume from pass 1's state: (m, l, acc) = (lse, 1, o) is the same softmax state.
        w_off = t_row * stride_pt + head.to(tl.int64) * stride_ph
        prev_ok = row_valid & ((tok * 0 + p1_n_plain) > p1_n_edge)  # per-row form of has_plain
        lse = tl.load(part_lse_ptr + w_off, mask=prev_ok, other=float("-inf"))
        o_prev = tl.load(
            out_ptr + t_row[:, None] * stride_ot + head[:, None].to(tl.int64) * stride_oh + offs_d[None, :],
            mask=(prev_ok & (lse > float("-inf")))[:, None],
            other=0.0,
        )
        m_i = lse
        l_i = tl.where(lse > float("-inf"), 1.0, 0.0)
        acc = o_prev.to(tl.float32)

    # A window inside E leaves no plain tile (a visible key is within WINDOW_LEFT < E of its row):
    # then [ta0, ta1) and [tb0, tb1) are one contiguous range. With ONE_MASKED_LOOP it runs as one
    # loop, so the kernel has no plain loop and one masked loop (and one pipeline prologue)
    # instead of two (FwdConfig.single_masked_loop).
    BAND_ONLY: tl.constexpr = ONE_MASKED_LOOP and WINDOW_LEFT >= 0 and WINDOW_LEFT < REL_EXTENT
    if PASS == 0 and BAND_ONLY:
        ta1 = tb1
    if PASS != 1:
        acc, m_i, l_i = _tile_loop(
            acc, m_i, l_i, q, ta0, ta1, lo_tile, bt_row, kv_len, max_blocks_per_seq, num_blocks,
            k_head_ptr, v_head_ptr, stride_kb, stride_kp, stride_vb, stride_vp,
            rel_row_ptr, stride_re, q_pos, qk_scale, offs_n, offs_d,
            PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, DOT_PRECISION, True, BIAS_AHEAD, ASM_GATHER, KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT,
            t_phase=pid_split, TILE_STEP=TILE_STEP, KV_PREFETCH=KV_PREFETCH, KV_EVICTION=KV_EVICTION,
        )  # fmt: skip
    if PASS != 2 and not (PASS == 0 and BAND_ONLY):
        acc, m_i, l_i = _tile_loop(
            acc, m_i, l_i, q, tp0, tp1, lo_tile, bt_row, kv_len, max_blocks_per_seq, num_blocks,
            k_head_ptr, v_head_ptr, stride_kb, stride_kp, stride_vb, stride_vp,
            rel_row_ptr, stride_re, q_pos, qk_scale, offs_n, offs_d,
            PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, DOT_PRECISION, False, False, ASM_GATHER, KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT,
            t_phase=pid_split, TILE_STEP=TILE_STEP, KV_PREFETCH=KV_PREFETCH, KV_EVICTION=KV_EVICTION,
        )  # fmt: skip
    if PASS == 2 or (PASS == 0 and not BAND_ONLY):
        acc, m_i, l_i = _tile_loop(
            acc, m_i, l_i, q, tb0, tb1, lo_tile, bt_row, kv_len, max_blocks_per_seq, num_blocks,
            k_head_ptr, v_head_ptr, stride_kb, stride_kp, stride_vb, stride_vp,
            rel_row_ptr, stride_re, q_pos, qk_scale, offs_n, offs_d,
            PAGE, BLOCK_N, REL_EXTENT, WINDOW_LEFT, DOT_PRECISION, True, BIAS_AHEAD, ASM_GATHER, KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT,
            t_phase=pid_split, TILE_STEP=TILE_STEP, KV_PREFETCH=KV_PREFETCH, KV_EVICTION=KV_EVICTION,
        )  # fmt: skip

    o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # rows that saw no key: acc is 0, result 0
    if SPLIT_KV or PASS == 1:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
    if SPLIT_KV:
        p_off = pid_split * stride_ps + t_row * stride_pt + head.to(tl.int64) * stride_ph
        tl.store(part_lse_ptr + p_off, lse, mask=row_valid)
        tl.store(part_out_ptr + p_off[:, None] * HEAD_DIM + offs_d[None, :], o, mask=row_valid[:, None])
    else:
        if PASS == 1:
            tl.store(part_lse_ptr + t_row * stride_pt + head.to(tl.int64) * stride_ph, lse, mask=row_valid)
        tl.store(
            out_ptr + t_row[:, None] * stride_ot + head[:, None].to(tl.int64) * stride_oh + offs_d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=row_valid[:, None],
        )


#: Triton decides at ``@triton.jit`` time (module import) whether kernels run in its interpreter;
#: read the same setting once here instead of on every call.
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _can_run_ptx(rel_logits: torch.Tensor) -> bool:
    """Whether the bias gather may be inline PTX: compiled for a CUDA device (not Triton's
    interpreter) and a 16-bit ``rel_logits``."""
    return not _INTERPRETED and rel_logits.is_cuda and rel_logits.element_size() == 2


def _key_rows_fit_int32(key_cache: torch.Tensor, strides: tuple[int, ...] | None = None) -> bool:
    """Whether every key row of the cache has an int32 index ``block * rows_per_block + slot``
    with ``rows_per_block = stride(0) // stride(1)`` (the kernel's ``KV_ROW_I32``): the block
    stride is a whole number of slot strides, and the indices stay below 2**31. ``strides``:
    ``key_cache.stride()``, when the caller has it already."""
    block_stride, slot_stride = (strides or key_cache.stride())[:2]
    if slot_stride <= 0 or block_stride % slot_stride:
        return False
    return key_cache.shape[0] * (block_stride // slot_stride) < 2**31


def _slot_shift(slot_stride: int) -> int:
    """``log2(slot_stride)`` when it is a power of two (the kernel's ``KV_SLOT_SHIFT``), else -1.

    Equivalent Python: ``slot_stride.bit_length() - 1 if slot_stride & (slot_stride - 1) == 0 else -1``.
    """
    if slot_stride <= 0 or slot_stride & (slot_stride - 1):
        return -1
    return slot_stride.bit_length() - 1


def launch_rel_attn_fwd(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    rel_logits: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    out: torch.Tensor,
    *,
    softmax_scale: float,
    window_left: int,
    max_seqlen_q: int,
    num_splits: int,
    config: FwdConfig,
    part_out: torch.Tensor | None = None,
    part_lse: torch.Tensor | None = None,
    fwd_pass: int = 0,
    pass1_config: FwdConfig | None = None,
):
    """Launch the forward kernel. Returns Triton's handle of the compiled kernel (None under the
    interpreter).

    - ``fwd_pass=0``: every tile. With ``num_splits > 1`` it writes ``part_out`` (S, T, Hq, D) and
      ``part_lse`` (S, T, Hq) (fp32, caller-allocated) instead of ``out``.
    - ``fwd_pass=1``: plain tiles only; partial outputs into ``out``, log-sum-exps into
      ``part_lse`` (T, Hq) fp32.
    - ``fwd_pass=2``: the remaining tiles, resuming from pass 1, which ran with ``pass1_config``.

    Equivalent PyTorch: ``inkling_ops.reference.rel_attn_reference`` (for num_splits == 1, and
    for pass 1 followed by pass 2).
    """
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_blocks, page, num_kv_heads, _ = key_cache.shape
    group = num_heads // num_kv_heads
    g_pad = next_pow2(group)
    block_m = max(config.block_m, g_pad)
    block_q = block_m // g_pad
    num_reqs = cache_seqlens.shape[0]
    split = num_splits > 1
    if config.kv_prefetch and config.num_stages != 1:
        raise ValueError(
            f"config has kv_prefetch=True with num_stages={config.num_stages}; expected num_stages=1 (the loop "
            "prefetches K/V itself, and Triton's pipeliner must stay off)"
        )
    p1_block_q, p1_block_n = 1, 1
    if split:
        if fwd_pass != 0:
            raise ValueError(f"fwd_pass={fwd_pass} with num_splits={num_splits}: split-KV runs in one pass")
        p_out, p_lse = part_out, part_lse
        p_strides = p_lse.stride()
    elif fwd_pass in (1, 2):
        p_out, p_lse = out, part_lse  # p_out unused
        p_strides = (0, *p_lse.stride())
        if fwd_pass == 2:
            p1_block_q = max(pass1_config.block_m, g_pad) // g_pad
            p1_block_n = pass1_config.block_n
            if p1_block_q % (block_m // g_pad) or p1_block_n % config.block_n:
                raise ValueError(
                    f"config's tiles ({block_m // g_pad} tokens, {config.block_n} keys) must divide "
                    f"pass1_config's ({p1_block_q} tokens, {p1_block_n} keys) in a two-pass prefill"
                )
    else:
        p_out = p_lse = out  # unused
        p_strides = (0, 0, 0)
    # one stride() call per tensor (each costs ~1 us of host time)
    k_strides, v_strides, r_strides = key_cache.stride(), value_cache.stride(), rel_logits.stride()
    same_strides = k_strides[:2] == v_strides[:2]
    row_i32 = same_strides and _key_rows_fit_int32(key_cache, k_strides)
    grid = ((max_seqlen_q + block_q - 1) // block_q, num_splits, num_reqs * num_kv_heads)
    args = (
        q, key_cache, value_cache, rel_logits, block_table, cache_seqlens, cu_seqlens_q, out, p_out, p_lse,
        softmax_scale * LOG2E, q.shape[0], num_blocks, block_table.shape[1],
        *q.stride()[:2], *k_strides[:3], *v_strides[:3], *r_strides[:3], *out.stride()[:2], block_table.stride(0),
        *p_strides,
        # constexprs, in signature order
        group, g_pad, head_dim, num_kv_heads, page, rel_logits.shape[2], window_left, num_splits, split,
        block_m, config.block_n, "ieee" if q.dtype == torch.float32 else "tf32",
        fwd_pass, p1_block_q, p1_block_n, config.bias_ahead,
        config.asm_gather and _can_run_ptx(rel_logits),
        same_strides, row_i32, _slot_shift(k_strides[1]) if row_i32 else -1,
        num_splits if split and config.split_strided else 1, config.kv_prefetch, config.single_masked_loop,
        config.kv_eviction_policy,
    )  # fmt: skip
    return _launch(grid, args, num_warps=config.num_warps, num_stages=config.num_stages, maxnreg=config.max_registers)


_launch = CachedLauncher(rel_attn_fwd_kernel)
