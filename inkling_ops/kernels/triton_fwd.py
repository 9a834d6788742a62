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
  its normalized partial output and base-2 log-sum-exp to a workspace. With ``MERGE_SPLITS`` the
  last split program of each row block to finish merges them into ``out`` itself (an arrival
  count per row block, :func:`_merge_splits`); otherwise :mod:`inkling_ops.kernels.triton_combine`
  reduces them in a second launch.

Metadata is clamped as :mod:`inkling_ops.metadata` describes, so no access leaves its tensor
whatever cu_seqlens_q, cache_seqlens and block_table hold. Nothing here syncs with the host.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_configs import FwdConfig, FwdConstexprs, fwd_constexprs
from .triton_launch import INTERPRETED, KernelSpec, Launcher, compile_spec, make_spec

LOG2E = 1.4426950408889634

# Every helper below takes the same groups, in the same order:
#
# - ``rows``: the program's query rows, ``(q, q_pos, qk_scale)``: the (BLOCK_M, HEAD_DIM) query
#   tile, each row's absolute position (-1 on padding rows), and softmax_scale * log2(e).
# - ``offs``: ``(offs_n, offs_d)``, ``tl.arange(0, BLOCK_N)`` and ``tl.arange(0, HEAD_DIM)``, made once
#   at the top of the kernel (made inside the helpers, the index computations land elsewhere in
#   the compiled code).
# - ``kv``: where the request's keys are, ``(k_ptr, v_ptr, stride_kb, stride_kp, stride_vb,
#   stride_vp, bt_row, max_blocks_per_seq, num_blocks, kv_len)``: K and V at this program's KV
#   head, their block and slot strides, the request's block-table row, the bounds block ids are
#   clamped to, and the request's key count.
# - ``rel``: the bias layout, ``(rel_row_ptr, stride_re)``: each row's bias row and the stride
#   over the distance d.
# - ``FACTS``: the kernel's compile-time facts, one constexpr tuple indexed with the positions
#   below (an element indexed with a constant stays a constexpr in Triton 3.6 and 3.9; unpacking
#   the tuple does not keep that in 3.9).
_PAGE = tl.constexpr(0)
_BLOCK_N = tl.constexpr(1)
_HEAD_DIM = tl.constexpr(2)
_REL_EXTENT = tl.constexpr(3)
_WINDOW_LEFT = tl.constexpr(4)
_DOT_PRECISION = tl.constexpr(5)
_KV_SAME_STRIDES = tl.constexpr(6)
_KV_ROW_I32 = tl.constexpr(7)
_KV_SLOT_SHIFT = tl.constexpr(8)
_ASM_GATHER = tl.constexpr(9)
_BIAS_AHEAD = tl.constexpr(10)
_KV_PREFETCH = tl.constexpr(11)
_TILE_STEP = tl.constexpr(12)  # split-KV with SPLIT_STRIDED: NUM_SPLITS (every S-th tile), else 1
_KV_EVICTION = tl.constexpr(13)  # tl.load's eviction_policy for K/V: "evict_first" with KV_EVICT_FIRST, else ""


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
def _tile_blocks(offs, kv, j0, FACTS):
    """Clamped KV block ids of keys [j0, j0 + BLOCK_N): a scalar when every tile lies in one page
    (PAGE a multiple of BLOCK_N), else one per key. Safe for any j0 (the entry index is clamped
    too), so the caller can fetch the next tile's ids one iteration ahead. No mask: keys past
    kv_len are masked where K/V load."""
    PAGE: tl.constexpr = FACTS[_PAGE]
    BLOCK_N: tl.constexpr = FACTS[_BLOCK_N]
    offs_n, _ = offs
    _, _, _, _, _, _, bt_row, max_blocks_per_seq, num_blocks, _ = kv
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
    (sm_90 SASS). A plain ``ld.global`` stays where Triton put it, a tile ahead of its use
    (meta/TUNING.md, "Kernel cleanup (issue 15)", has the measurements).
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
def _tile_bias(rows, offs, rel, j0, FACTS):
    """The bias of keys [j0, j0 + BLOCK_N), (BLOCK_M, BLOCK_N): ``rel[t, h, d]`` with
    ``d = q_pos - j`` where ``0 <= d < E``, else 0. Padding rows (``q_pos`` -1) read nothing.

    Every access is masked by the band, so any j0 is safe (prefetching past the last tile too).
    Per element: one subtraction, one unsigned compare, one address with a per-column offset.
    """
    REL_EXTENT: tl.constexpr = FACTS[_REL_EXTENT]
    _, q_pos, _ = rows
    offs_n, _ = offs
    rel_row_ptr, stride_re = rel
    dq = q_pos - j0  # each row's distance to key j0
    d = dq[:, None] - offs_n[None, :]
    mask = d.to(tl.uint32, bitcast=True) < REL_EXTENT
    ptrs = (rel_row_ptr + dq * stride_re)[:, None] - (offs_n * stride_re)[None, :]
    return _gather(ptrs, mask, FACTS[_ASM_GATHER])


@triton.jit
def _attend_tile(
    acc, m_i, l_i, rows, offs, kv, rel, j0, blk, bias, FACTS, FULL: tl.constexpr, BIAS_GIVEN: tl.constexpr,
    KV_MODE: tl.constexpr = 0, k_in=0, v_in=0, tile_ok=True,
):  # fmt: skip
    """Fold keys [j0, j0 + BLOCK_N) into the running softmax state ``(acc, m_i, l_i)`` of the
    program's rows (online softmax in base 2).

    ``blk``: the tile's block ids from :func:`_tile_blocks`, fetched one iteration earlier so the
    K/V addresses do not hang on a load of the same iteration (Triton then pipelines K/V deeper).
    FULL=False: every key is visible to every row and no bias applies (no masks; ``bias`` unused).
    FULL=True: apply the causal / window / length masks and the bias where 0 <= d < REL_EXTENT:
    ``bias`` when BIAS_GIVEN (loaded earlier by the caller), else gathered here first, so its
    latency overlaps the K/V wait and the QK^T product. A valid row sees no key at or past
    kv_len and a padding row (``q_pos`` -1) none, so the scores need no length mask.

    KV_MODE splits the work for the register-prefetch loop (``KV_PREFETCH``):

    - 0: load this tile's K/V and fold it in (the loops Triton pipelines).
    - 1: only load, and return ``(k, v)``: nothing is read when the scalar ``tile_ok`` is false,
      nor (FULL) for keys at or past kv_len; those are 0.
    - 2: fold in ``k_in``/``v_in``, loaded by an earlier mode-1 call.

    One body serves all three on purpose. Split into a K/V address helper, a K/V tile load
    helper and a fold helper, the kernels compile to the same PTX instructions, but each inlined
    helper adds debug-scope labels to the PTX, and ptxas schedules the code around them
    differently: other sm_90 SASS (the same instruction counts) for the band pass and the
    decode variants under Triton 3.9 and for the global decode under 3.6; an earlier such split
    measured 1.1% slower on the band pass (meta/TUNING.md, "Kernel cleanup (issue 15)").
    """
    PAGE: tl.constexpr = FACTS[_PAGE]
    BLOCK_N: tl.constexpr = FACTS[_BLOCK_N]
    DOT_PRECISION: tl.constexpr = FACTS[_DOT_PRECISION]
    WINDOW_LEFT: tl.constexpr = FACTS[_WINDOW_LEFT]
    KV_SLOT_SHIFT: tl.constexpr = FACTS[_KV_SLOT_SHIFT]
    KV_EVICTION: tl.constexpr = FACTS[_KV_EVICTION]
    q, q_pos, qk_scale = rows
    k_ptr, v_ptr, stride_kb, stride_kp, stride_vb, stride_vp, _, _, _, kv_len = kv
    offs_n, offs_d = offs
    keys = j0 + offs_n
    # ``blk`` holds one id per key unless every tile lies in one page (see _tile_blocks).
    if FACTS[_KV_ROW_I32]:
        # K and V alike, every key row of the cache numbered in int32 (see launch_rel_attn_fwd):
        # one 32-bit multiply-add and one widening multiply (or shift) per key. When pages divide
        # the tile, j0 is a multiple of PAGE, so a key's slot is its offset in the tile modulo
        # PAGE. Also where one page holds the tile: 64-bit offsets there cost the page-128 band
        # pass about 10% more sm_90 instructions, and spills.
        if PAGE % BLOCK_N == 0:
            kv_rows = blk * (stride_kb // stride_kp) + (j0 % PAGE + offs_n)
        elif BLOCK_N % PAGE == 0:
            kv_rows = blk * (stride_kb // stride_kp) + offs_n % PAGE
        else:
            kv_rows = blk * (stride_kb // stride_kp) + keys % PAGE
        if KV_SLOT_SHIFT >= 0:
            # The slot stride is 2**KV_SLOT_SHIFT elements (one key row: Hkv * D, a power of
            # two for the usual head counts): a shift, which also lets the compiler fold the
            # per-element column offsets in (fewer instructions in the page-16 plain loop).
            k_off = kv_rows.to(tl.uint32).to(tl.int64) << KV_SLOT_SHIFT
        else:
            # Both factors are non-negative 32-bit values: zero-extended, their product is one
            # widening multiply (a sign-extended one costs ~7 instructions per key).
            k_off = kv_rows.to(tl.uint32).to(tl.int64) * stride_kp.to(tl.uint32).to(tl.int64)
        v_off = k_off
    else:
        # Caches with more key rows than int32 holds: 64-bit offsets.
        blk = blk.to(tl.int64)
        if PAGE % BLOCK_N == 0:
            slots = ((j0 % PAGE) + offs_n).to(tl.int64)
        else:
            slots = (keys % PAGE).to(tl.int64)
        k_off = blk * stride_kb + slots * stride_kp
        if FACTS[_KV_SAME_STRIDES] and PAGE % BLOCK_N != 0:
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
                bias = _tile_bias(rows, offs, rel, j0, FACTS)
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
def _tile_loop(acc, m_i, l_i, rows, offs, kv, rel, t_lo, t_hi, lo_tile, t_phase, FACTS, FULL: tl.constexpr):
    """Tiles [t_lo, t_hi) of one kind: plain (FULL=False), or masked and biased (FULL=True).
    With TILE_STEP > 1 only the tiles ``t = t_phase (mod TILE_STEP)`` of the range (strided
    split-KV: split ``t_phase`` of ``TILE_STEP``).

    Each iteration fetches the next tile's block ids. The loops take the launch's num_stages: an
    explicit per-loop num_stages made Triton 3.6 pipeline the block-id load too and leave K/V
    unpipelined (TTGIR, 2026-11-30). The bias gather is a scalar load Triton does not pipeline.
    By default each tile issues it first (inside :func:`_attend_tile`). With BIAS_AHEAD (biased
    tiles only) the next tile's bias is loaded one iteration early into loop-carried registers:
    more registers, latency hidden by a whole tile. (The gather is a plain ``ld.global``, which
    ptxas keeps at the top of the iteration; see :func:`_gather`.)

    KV_PREFETCH (for launches with num_stages=1, which Triton does not pipeline): the next tile's
    K and V are loaded into registers while this one is computed, and its block ids two tiles
    ahead; biased tiles then always take their bias one tile ahead. Loads of a tile past the
    range are masked off, so they cost no memory traffic.
    """
    BLOCK_N: tl.constexpr = FACTS[_BLOCK_N]
    TILE_STEP: tl.constexpr = FACTS[_TILE_STEP]
    BIAS_AHEAD: tl.constexpr = FACTS[_BIAS_AHEAD] and FULL
    if TILE_STEP > 1:
        t_lo = t_lo + (t_phase + TILE_STEP - t_lo % TILE_STEP) % TILE_STEP  # first tile of this phase
    STEP_KEYS: tl.constexpr = TILE_STEP * BLOCK_N
    blk = _tile_blocks(offs, kv, lo_tile + t_lo * BLOCK_N, FACTS)
    if BIAS_AHEAD or (FACTS[_KV_PREFETCH] and FULL):
        bias = _tile_bias(rows, offs, rel, lo_tile + t_lo * BLOCK_N, FACTS)
    else:
        bias = 0.0  # gathered inside _attend_tile
    if FACTS[_KV_PREFETCH]:
        j_first = lo_tile + t_lo * BLOCK_N
        k, v = _attend_tile(acc, m_i, l_i, rows, offs, kv, rel, j_first, blk, bias, FACTS, FULL, True, KV_MODE=1, tile_ok=t_lo < t_hi)
        blk = _tile_blocks(offs, kv, j_first + STEP_KEYS, FACTS)
        for t in tl.range(t_lo, t_hi, TILE_STEP):
            j0 = lo_tile + t * BLOCK_N
            blk_after = _tile_blocks(offs, kv, j0 + 2 * STEP_KEYS, FACTS)
            k_next, v_next = _attend_tile(
                acc, m_i, l_i, rows, offs, kv, rel, j0 + STEP_KEYS, blk, bias, FACTS, FULL, True, KV_MODE=1,
                tile_ok=t + TILE_STEP < t_hi,
            )  # fmt: skip
            if FULL:
                # band-masked: the tile after the range may be anywhere
                bias_next = _tile_bias(rows, offs, rel, j0 + STEP_KEYS, FACTS)
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, rows, offs, kv, rel, j0, blk, bias, FACTS, FULL, True, KV_MODE=2, k_in=k, v_in=v)
            k = k_next
            v = v_next
            blk = blk_after
            if FULL:
                bias = bias_next
    else:
        for t in tl.range(t_lo, t_hi, TILE_STEP):
            blk_next = _tile_blocks(offs, kv, lo_tile + (t + TILE_STEP) * BLOCK_N, FACTS)
            if BIAS_AHEAD:
                bias_next = _tile_bias(rows, offs, rel, lo_tile + (t + TILE_STEP) * BLOCK_N, FACTS)
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, rows, offs, kv, rel, lo_tile + t * BLOCK_N, blk, bias, FACTS, FULL, BIAS_AHEAD)
            blk = blk_next
            if BIAS_AHEAD:
                bias = bias_next
    return acc, m_i, l_i


@triton.jit
def _merge_splits(
    part_out_ptr, part_lse_ptr, out_ptr, arrivals, row_off, out_off, row_valid, offs_d, stride_ps,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
):  # fmt: skip
    """After this program stored its split's partial rows: count its arrival, and if it is the
    last of the ``NUM_SPLITS`` programs of these rows, merge every split's partial into ``out``
    and set the count back to zero for the next launch.

    ``row_off`` (BLOCK_M,): each row's offset in part_lse (S, T, Hq) without the split term (the
    partial outputs are HEAD_DIM times it); ``out_off`` (BLOCK_M,): each row's offset in out.

    The merged row is ``sum_s 2^(L_s - M) O_s / sum_s 2^(L_s - M)`` with ``M = max_s L_s``; a row
    no split saw is 0 (the combine kernel's formula). Ordering: every thread's stores precede the
    barrier; the count is one acq_rel atomic at GPU scope (Triton issues a scalar atomic from one
    thread and hands its result to the others through shared memory, after a barrier), so the last
    program's reads, which bypass L1 (``.cg``), see every split's stores.

    Equivalent PyTorch: ``w = softmax(part_lse * ln 2, dim=0); out[rows] = (w[..., None] * part_out).sum(0)[rows]``.
    """
    tl.debug_barrier()
    ticket = tl.atomic_add(arrivals, 1, sem="acq_rel", scope="gpu")
    if ticket == NUM_SPLITS - 1:
        tl.store(arrivals, 0)
        offs_s = tl.arange(0, NUM_SPLITS)  # NUM_SPLITS is a power of two with MERGE_SPLITS
        lse_all = tl.load(
            part_lse_ptr + offs_s[:, None] * stride_ps + row_off[None, :], mask=row_valid[None, :],
            other=float("-inf"), cache_modifier=".cg",
        )  # fmt: skip
        lse_max = tl.max(lse_all, 0)
        base = tl.where(lse_max == float("-inf"), 0.0, lse_max)
        total = tl.sum(tl.exp2(lse_all - base[None, :]), 0)
        acc = tl.zeros([row_off.shape[0], HEAD_DIM], dtype=tl.float32)
        for s in tl.static_range(NUM_SPLITS):  # unrolled: the loads do not wait on each other
            p_row = s * stride_ps + row_off
            w = tl.exp2(tl.load(part_lse_ptr + p_row, mask=row_valid, other=float("-inf"), cache_modifier=".cg") - base)
            o = tl.load(
                part_out_ptr + p_row[:, None] * HEAD_DIM + offs_d[None, :], mask=row_valid[:, None], other=0.0,
                cache_modifier=".cg",
            )  # fmt: skip
            acc += w[:, None] * o
        res = acc / tl.where(total > 0.0, total, 1.0)[:, None]
        tl.store(out_ptr + out_off[:, None] + offs_d[None, :], res.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])


@triton.jit(do_not_specialize=["num_tokens", "num_blocks"])
def rel_attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, rel_ptr, bt_ptr, seqlens_ptr, cu_ptr, out_ptr, part_out_ptr, part_lse_ptr, arrivals_ptr,
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
    SPLIT_STRIDED: tl.constexpr, KV_PREFETCH: tl.constexpr, SINGLE_MASKED_LOOP: tl.constexpr,
    KV_EVICT_FIRST: tl.constexpr, MERGE_SPLITS: tl.constexpr,
):  # fmt: skip
    """Grid: (row blocks of the longest request, num_splits, num_reqs * NUM_KV_HEADS).

    Shapes: q, out (T, Hq, D); k, v (num_blocks, PAGE, Hkv, D) (any strides, last dim contiguous);
    rel (T, Hq, REL_EXTENT); bt (num_reqs, max_blocks_per_seq); part_out (NUM_SPLITS, T, Hq, D) and
    part_lse (NUM_SPLITS, T, Hq) fp32, used only with SPLIT_KV; arrivals (row blocks x num_reqs *
    NUM_KV_HEADS) int32, zero before the launch and left zero after it, used only with MERGE_SPLITS.

    PASS 0 runs every tile. Prefill can instead run two launches with their own tile shapes:
    PASS 1 runs only the plain tiles and leaves each row's normalized partial output in ``out``
    and its base-2 log-sum-exp in ``part_lse`` (T, Hq); PASS 2 (whose BLOCK_N divides P1_BLOCK_N
    and whose BLOCK_Q divides P1_BLOCK_Q, pass 1's tiling) starts from that state and runs every
    other tile: the window edge, the bias band and the diagonal.

    BIAS_AHEAD, ASM_GATHER, SPLIT_STRIDED, KV_PREFETCH, SINGLE_MASKED_LOOP and KV_EVICT_FIRST are
    the ``FwdConfig`` fields of the same names; MERGE_SPLITS (split-KV, a power-of-two NUM_SPLITS)
    has the last split of each row block merge the partials into ``out`` (:func:`_merge_splits`).
    ``triton_configs.fwd_constexprs`` gives every constexpr of a launch.
    """
    BLOCK_Q: tl.constexpr = BLOCK_M // G_PAD
    if SPLIT_STRIDED:
        TILE_STEP: tl.constexpr = NUM_SPLITS  # split s of S takes every S-th tile from tile s
    else:
        TILE_STEP: tl.constexpr = 1
    if KV_EVICT_FIRST:
        KV_EVICTION: tl.constexpr = "evict_first"
    else:
        KV_EVICTION: tl.constexpr = ""
    FACTS: tl.constexpr = (
        PAGE, BLOCK_N, HEAD_DIM, REL_EXTENT, WINDOW_LEFT, DOT_PRECISION, KV_SAME_STRIDES, KV_ROW_I32, KV_SLOT_SHIFT,
        ASM_GATHER, BIAS_AHEAD, KV_PREFETCH, TILE_STEP, KV_EVICTION,
    )  # positions _PAGE ... _KV_EVICTION
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
    rows = (q, q_pos, qk_scale)
    offs = (offs_n, offs_d)
    kv = (k_head_ptr, v_head_ptr, stride_kb, stride_kp, stride_vb, stride_vp, bt_row, max_blocks_per_seq, num_blocks, kv_len)
    rel = (rel_row_ptr, stride_re)

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
    # then [ta0, ta1) and [tb0, tb1) are one contiguous range. With SINGLE_MASKED_LOOP it runs as one
    # loop, so the kernel has no plain loop and one masked loop (and one pipeline prologue)
    # instead of two (FwdConfig.single_masked_loop).
    BAND_ONLY: tl.constexpr = SINGLE_MASKED_LOOP and WINDOW_LEFT >= 0 and WINDOW_LEFT < REL_EXTENT
    if PASS == 0 and BAND_ONLY:
        ta1 = tb1
    if PASS != 1:
        acc, m_i, l_i = _tile_loop(acc, m_i, l_i, rows, offs, kv, rel, ta0, ta1, lo_tile, pid_split, FACTS, True)
    if PASS != 2 and not (PASS == 0 and BAND_ONLY):
        acc, m_i, l_i = _tile_loop(acc, m_i, l_i, rows, offs, kv, rel, tp0, tp1, lo_tile, pid_split, FACTS, False)
    if PASS == 2 or (PASS == 0 and not BAND_ONLY):
        acc, m_i, l_i = _tile_loop(acc, m_i, l_i, rows, offs, kv, rel, tb0, tb1, lo_tile, pid_split, FACTS, True)

    o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # rows that saw no key: acc is 0, result 0
    if SPLIT_KV or PASS == 1:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
    if SPLIT_KV:
        p_off = pid_split * stride_ps + t_row * stride_pt + head.to(tl.int64) * stride_ph
        tl.store(part_lse_ptr + p_off, lse, mask=row_valid)
        tl.store(part_out_ptr + p_off[:, None] * HEAD_DIM + offs_d[None, :], o, mask=row_valid[:, None])
        if MERGE_SPLITS:
            # one arrival count per row block; the program ids, not the metadata, index it
            arrivals = arrivals_ptr + pid_bh * tl.num_programs(0) + tl.program_id(0)
            _merge_splits(
                part_out_ptr, part_lse_ptr, out_ptr, arrivals, t_row * stride_pt + head.to(tl.int64) * stride_ph,
                t_row * stride_ot + head.to(tl.int64) * stride_oh, row_valid, offs_d, stride_ps, HEAD_DIM, NUM_SPLITS,
            )  # fmt: skip
    else:
        if PASS == 1:
            tl.store(part_lse_ptr + t_row * stride_pt + head.to(tl.int64) * stride_ph, lse, mask=row_valid)
        tl.store(
            out_ptr + t_row[:, None] * stride_ot + head[:, None].to(tl.int64) * stride_oh + offs_d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=row_valid[:, None],
        )


#: Integer parameters Triton's JIT would mark divisible by 16 on an aligned call and that are
#: multiples of 16 elements in every aligned layout (products of head_dim and head counts):
#: hinted in an aligned variant. Every other int (token and block counts, max_blocks_per_seq, the
#: block table's and the workspace's strides, the bias strides) is not specialised.
FWD_HINTED = frozenset(
    ("stride_qt", "stride_qh", "stride_kb", "stride_kp", "stride_kh", "stride_vb", "stride_vp", "stride_vh", "stride_ot", "stride_oh")
)
#: Strides that are always 1 (rel_logits and the workspace are contiguous in their last dim):
#: compiled as the constant 1, as Triton's JIT folds an int argument equal to 1.
FWD_UNIT = frozenset(("stride_re", "stride_ph"))


def fwd_spec(
    constexprs: FwdConstexprs, config: FwdConfig, *, dtype: str, kv_dtype: str, aligned: bool, arch: int
) -> KernelSpec:
    """The compiled variant of the forward kernel for one launch's constexprs (``fwd_constexprs``)
    and ``config``'s compile options: ``dtype`` of q / out / rel_logits, ``kv_dtype`` of the cache,
    ``aligned`` (see ``compile_keys.layout_of``), ``arch`` the compute capability (90)."""
    from .triton_launch import triton_type

    split = constexprs.SPLIT_KV
    act, kv = triton_type(dtype), triton_type(kv_dtype)
    pointers = dict(
        q_ptr=act, k_ptr=kv, v_ptr=kv, rel_ptr=act, bt_ptr="*i32", seqlens_ptr="*i32", cu_ptr="*i32", out_ptr=act,
        part_out_ptr="*fp32" if split else act,  # unsplit launches pass ``out`` there (unused)
        part_lse_ptr="*fp32" if split or constexprs.PASS else act,
        arrivals_ptr="*i32",  # unused without MERGE_SPLITS (any pointer is passed)
    )  # fmt: skip
    return make_spec(
        rel_attn_fwd_kernel, constexprs._asdict(), pointers=pointers, aligned=aligned, hinted=FWD_HINTED,
        unit=FWD_UNIT, floats=frozenset(("qk_scale",)), num_warps=config.num_warps, num_stages=config.num_stages,
        maxnreg=config.max_registers, arch=arch,
    )  # fmt: skip


_launchers: dict = {}


def launcher_for(spec: KernelSpec) -> Launcher:
    """The launcher of ``spec`` on the current device, compiled on first use (for launches given an
    explicit configuration, such as the tuner's; the backend resolves its own through its key)."""
    device = torch.cuda.current_device()
    launcher = _launchers.get((spec, device))
    if launcher is None:
        launcher = _launchers[spec, device] = Launcher(compile_spec(spec))
    return launcher


def _can_run_ptx(rel_logits: torch.Tensor) -> bool:
    """Whether the bias gather may be inline PTX: compiled for a CUDA device (not Triton's
    interpreter) and a 16-bit ``rel_logits``."""
    return not INTERPRETED and rel_logits.is_cuda and rel_logits.element_size() == 2


def _key_rows_fit_int32(key_cache: torch.Tensor, strides: tuple[int, ...] | None = None) -> bool:
    """Whether every key row of the cache has an int32 index ``block * rows_per_block + slot``
    with ``rows_per_block = stride(0) // stride(1)`` (the kernel's ``KV_ROW_I32``): the block
    stride is a whole number of slot strides, and the indices stay below 2**31. ``strides``:
    ``key_cache.stride()``, when the caller has it already."""
    block_stride, slot_stride = (strides or key_cache.stride())[:2]
    if slot_stride <= 0 or block_stride % slot_stride:
        return False
    return key_cache.shape[0] * (block_stride // slot_stride) < 2**31


def launch_rel_attn_fwd(
    args,
    out: torch.Tensor,
    *,
    softmax_scale: float,
    window_left: int,
    max_seqlen_q: int,
    num_splits: int,
    config: FwdConfig,
    part_out: torch.Tensor | None = None,
    part_lse: torch.Tensor | None = None,
    arrivals: torch.Tensor | None = None,
    fwd_pass: int = 0,
    pass1_config: FwdConfig | None = None,
    launcher: Launcher | None = None,
):
    """Launch the forward kernel on the call's tensors ``args`` (``q``, ``key_cache``,
    ``value_cache``, ``block_table``, ``cache_seqlens``, ``cu_seqlens_q``, ``rel_logits``, read by
    attribute: the dispatcher's ``RelAttnArgs``), writing ``out`` (T, Hq, D). Returns the
    ``Launcher`` it used (None under the interpreter).

    ``launcher``: the compiled variant to launch (the backend's, resolved through its compile key);
    None: the variant of these tensors (``fwd_spec``), compiled on first use; under Triton's
    interpreter, ``rel_attn_fwd_kernel[grid]``.

    - ``fwd_pass=0``: every tile. With ``num_splits > 1`` it writes ``part_out`` (S, T, Hq, D) and
      ``part_lse`` (S, T, Hq) (fp32, caller-allocated); when the launch merges its splits
      (``triton_configs.merges_splits``) it also writes ``out``, counting arrivals in
      ``arrivals`` (int32, at least ``grid[0] * grid[2]`` of them, zero, and left zero).
    - ``fwd_pass=1``: plain tiles only; partial outputs into ``out``, log-sum-exps into
      ``part_lse`` (T, Hq) fp32.
    - ``fwd_pass=2``: the remaining tiles, resuming from pass 1, which ran with ``pass1_config``.

    The compile-time constants come from :func:`~inkling_ops.kernels.triton_configs.fwd_constexprs`.

    Equivalent PyTorch: ``inkling_ops.reference.rel_attn_reference`` (for num_splits == 1, and
    for pass 1 followed by pass 2).
    """
    q, key_cache, value_cache, rel_logits = args.q, args.key_cache, args.value_cache, args.rel_logits
    block_table, cache_seqlens, cu_seqlens_q = args.block_table, args.cache_seqlens, args.cu_seqlens_q
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_blocks, page, num_kv_heads, _ = key_cache.shape
    # one stride() call per tensor (each costs host time)
    k_strides, v_strides, r_strides = key_cache.stride(), value_cache.stride(), rel_logits.stride()
    constexprs = launcher.constexprs if launcher is not None else None  # the key's, when it has them
    if constexprs is None:
        same_strides = k_strides[:2] == v_strides[:2]
        row_i32 = same_strides and _key_rows_fit_int32(key_cache, k_strides)
        constexprs = fwd_constexprs(
            config, group=num_heads // num_kv_heads, head_dim=head_dim, num_kv_heads=num_kv_heads, page_size=page,
            rel_extent=rel_logits.shape[2], window_left=window_left, num_splits=num_splits, fwd_pass=fwd_pass,
            pass1_config=pass1_config, fp32=q.dtype == torch.float32, ptx_gather=_can_run_ptx(rel_logits),
            kv_same_strides=same_strides, kv_row_i32=row_i32, kv_slot_stride=k_strides[1],
        )  # fmt: skip
    if num_splits > 1:
        p_out, p_lse = part_out, part_lse
        if constexprs.MERGE_SPLITS and arrivals is None:
            raise ValueError(f"a launch of {num_splits} splits merges them in the kernel; arrivals (zeroed int32) is required")
    elif fwd_pass in (1, 2):
        p_out, p_lse = out, part_lse  # p_out unused
    else:
        p_out = p_lse = out  # unused
    grid = fwd_grid(constexprs, max_seqlen_q=max_seqlen_q, num_splits=num_splits, num_reqs=cache_seqlens.shape[0])
    if constexprs.MERGE_SPLITS and num_splits > 1 and arrivals.numel() < grid[0] * grid[2]:
        # the kernel indexes the counts by its program ids: fewer would be written out of bounds
        raise ValueError(
            f"arrivals holds {arrivals.numel()} counts; a launch of grid {grid} needs at least {grid[0] * grid[2]}"
        )
    kernel_args = (
        q, key_cache, value_cache, rel_logits, block_table, cache_seqlens, cu_seqlens_q, out, p_out, p_lse,
        arrivals if arrivals is not None else cu_seqlens_q,  # an int32 stand-in where unused
        *fwd_args_tail(args, out, softmax_scale=softmax_scale, partial_strides=partial_strides(
            num_splits, fwd_pass, q.shape[0], num_heads), constexprs=constexprs, strides=(k_strides, v_strides, r_strides)),
    )  # fmt: skip
    if INTERPRETED:
        rel_attn_fwd_kernel[grid](*kernel_args, num_warps=config.num_warps, num_stages=config.num_stages)
        return None
    if launcher is None:
        bits = q.data_ptr() | key_cache.data_ptr() | value_cache.data_ptr() | rel_logits.data_ptr()
        bits |= block_table.data_ptr() | cache_seqlens.data_ptr() | cu_seqlens_q.data_ptr() | out.data_ptr()
        bits |= p_out.data_ptr() | p_lse.data_ptr()  # (arrivals: int32, read one at a time)
        bits |= q.stride(0) | q.stride(1) | out.stride(0) | out.stride(1)
        bits |= k_strides[0] | k_strides[1] | k_strides[2] | v_strides[0] | v_strides[1] | v_strides[2]
        spec = fwd_spec(
            constexprs, config, dtype=str(q.dtype).removeprefix("torch."), kv_dtype=str(key_cache.dtype).removeprefix("torch."),
            aligned=not bits & 15, arch=_capability(q.device),
        )  # fmt: skip
        launcher = launcher_for(spec)
    launcher(grid, kernel_args)
    return launcher


def fwd_grid(constexprs: FwdConstexprs, *, max_seqlen_q: int, num_splits: int, num_reqs: int) -> tuple[int, int, int]:
    """The forward launch's grid: (query blocks of the longest request, splits, requests x KV heads)."""
    block_q = constexprs.BLOCK_M // constexprs.G_PAD
    return ((max_seqlen_q + block_q - 1) // block_q, num_splits, num_reqs * constexprs.NUM_KV_HEADS)


def partial_strides(num_splits: int, fwd_pass: int, num_tokens: int, num_heads: int) -> tuple[int, int, int]:
    """Strides of the fp32 log-sum-exp workspace the forward writes (its ``stride_ps, stride_pt,
    stride_ph``), as allocated by the caller: (S, T, Hq) contiguous for a split launch, (T, Hq)
    contiguous for the two-pass prefill, unused otherwise (stride_ph is compiled as the constant 1)."""
    if num_splits > 1:
        return (num_tokens * num_heads, num_heads, 1)
    if fwd_pass in (1, 2):
        return (0, num_heads, 1)
    return (0, 0, 1)


def fwd_args_tail(
    args, out: torch.Tensor, *, softmax_scale: float, partial_strides: tuple, constexprs: FwdConstexprs, strides=None
) -> tuple:
    """The forward kernel's arguments after its eleven pointers (``q`` ... ``arrivals_ptr``), in
    signature order: the scalars, the strides, then the compile-time constants. They depend only
    on the call's shapes and strides, so a caller that launches the same call again may keep them.
    ``strides``: ``(key_cache.stride(), value_cache.stride(), rel_logits.stride())`` if known."""
    q, key_cache, value_cache, rel_logits, block_table = args.q, args.key_cache, args.value_cache, args.rel_logits, args.block_table
    k_strides, v_strides, r_strides = strides or (key_cache.stride(), value_cache.stride(), rel_logits.stride())
    return (
        softmax_scale * LOG2E, q.shape[0], key_cache.shape[0], block_table.shape[1],
        *q.stride()[:2], *k_strides[:3], *v_strides[:3], *r_strides[:3], *out.stride()[:2], block_table.stride(0),
        *partial_strides,
        *constexprs,  # in signature order
    )  # fmt: skip


def _capability(device: torch.device) -> int:
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor
