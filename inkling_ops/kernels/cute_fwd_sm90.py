"""rel_attn forward for Hopper (sm_90a), written with the CuTe DSL (nvidia-cutlass-dsl).

One CTA computes one M tile of packed query rows of one request and one KV head: the
``q_per_kv`` query heads that read that KV head are packed into the tile (packed row
``r = token * q_per_kv + head_in_group``; with :data:`SCHEDULE` at ``q_per_kv`` 8 the two tokens of
each pair swapped when the request's offset is even, ``odd_rows_paired``), so K and V tiles are
loaded once for all of them.

The CTA is warp-specialised (384 threads). Warpgroup 0 is the producer (``setmaxnreg`` down to
24 registers): it gathers K and V through the block table with ``cp.async`` into two shared-memory
stages each, and stages the bias of band tiles, each load arriving on an mbarrier when it lands
(``PipelineCpAsync``: K, V two stages, bias one). Warpgroups 1 and 2 are the consumers
(``setmaxnreg`` up to 240), each owning 64 of the tile's 128 rows: ``S = Q K^T`` with ``wgmma``
from shared memory, ``O += P V`` with P straight from registers. Per key tile ``i`` a consumer
issues QK of tile ``i``, then PV of tile ``i - 1``, and runs the softmax of tile ``i`` while that
PV GEMM is in flight (FA3's intra-warpgroup overlap); the two consumers take turns issuing their
GEMMs (named barriers, ping-pong). The producer issues K of tile ``i + 1`` before V of tile ``i``.
This paragraph is the kernel at :class:`RelAttnFwdSm90`'s keyword defaults. :data:`SCHEDULE`, what
the backend builds, changes it with the options that class's docstring describes: at page 128 whole
K/V tiles by TMA and the bias buffer in per-warpgroup halves, each bias row staged by one bulk copy
(where the group divides 32, a TMA box of at least 8 rows: one token's heads, or those of ``8 / G``
tokens), a body without masks for band tiles whose every element is visible (zeros staged past
``E``), masks that test the distance only, softmax offsets that move only when passed by more than
8 (log2 units; a warp whose rows all kept theirs skips the O rescale), O out through shared memory,
and a 32 / 232 register split (:func:`schedule`: 40 / 232 on the compact grid).

Per CTA the key tiles that hold visible keys (causal, and ``d <= window`` for a sliding layer)
are computed up front and walked from the diagonal downwards; nothing else is loaded. The key
tiles split into *band* tiles (a diagonal, window-edge or bias tile: some element is masked or
has ``0 <= d < E``) and *plain* tiles (every element visible and ``d >= E``). Plain tiles run
the bias-free loop body, with ``softmax_scale * log2(e)`` folded into the exp2 multiply-add.
Band tiles that meet ``0 <= d < E`` are the first ``num_band`` of the walk; for each the producer
stages, in shared memory, the slice of ``rel_logits`` the tile's rows can reach (per row:
``tile_n + 8`` distances, aligned down to 16 bytes) as soon as the bias buffer is free; the
softmax then reads one shared-memory element per score.

K/V rows past the request's length copy its last row (finite, always masked), so a NaN in an
unused slot never meets a zero probability; the ``head_dim / 8`` producer lanes that copy the
column chunks of a tile's rows each look up one row's page and pass the row offsets around with
shuffles. Q is gathered by the consumers with ``cp.async``, once per CTA (its packed rows are not a box a
tensor copy can express for every group size).

Shapes (T tokens, B requests, Hq / Hkv heads, D = head_dim, E = rel_extent):
q, out (T, Hq, D); key_cache, value_cache (num_blocks, page_size, Hkv, D); block_table
(B, max_blocks) int32; cache_seqlens (B,) int32; cu_seqlens_q (B + 1,) int32; rel_logits (T, Hq, E).

Equivalent PyTorch: ``inkling_ops.reference.rel_attn_reference(q, key_cache, value_cache,
block_table, cache_seqlens, cu_seqlens_q, rel_logits, out, softmax_scale=..., window_left=...)``
(window -1 for none), which writes ``out``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as hopper
from cutlass import Float32, Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

LOG2_E = math.log2(math.e)
#: elements of one 16-byte copy (16-bit types)
CHUNK = 8
#: shared-memory stages of K and of V
STAGES = 2
#: the producer warpgroup (warps 0-3); the consumer warpgroups follow it
PRODUCER_THREADS = 128
#: named barriers (0 is the CTA barrier): the consumers' Q load, then one per consumer warpgroup
#: for the ping-pong schedule
BAR_Q = 1
BAR_SCHED = 2
#: shared memory a Hopper CTA may use (227 KB)
SMEM_LIMIT = 227 * 1024


#: The schedule options :func:`compile_fwd` (so the backend) builds with, over the keyword
#: defaults of :class:`RelAttnFwdSm90` (which are the schedule measured at 46a147e). What each
#: option does is in that class's docstring; the measurements behind the choice are in
#: meta/TUNING.md, "CuTe backend".
SCHEDULE = dict(
    fresh_scores=True, page_reuse=True, release_per_warp=True, tma_kv=True, band_split=True, late_rescale=True,
    smem_epilogue=True, fence_gathered_only=True, bias_per_wg="tile_pages", producer_regs=32, consumer_regs=232,
    bias_bulk=True, kv_len_mask=False, lean_mask=True, rescale_threshold=8.0, stmatrix_epilogue=True,
    bias_tma=True, bias_only_past_e=True, bias_box_rows=8, odd_rows_paired=True,
)

#: What the compact grid's build changes over :data:`SCHEDULE`: its producer warpgroup keeps the
#: scan's results (the block's request and M tile), which no special register can give back, for
#: the whole walk, and at 32 registers ptxas then issues each page-address shuffle right before
#: its use. 40 x 128 + 232 x 256 registers still fit the file (meta/TUNING.md, "compact_grid").
COMPACT_GRID_SCHEDULE = dict(producer_regs=40)


def schedule(config: "CuteFwdConfig") -> dict:
    """The schedule options the backend builds ``config`` with: :data:`SCHEDULE`, and over it
    :data:`COMPACT_GRID_SCHEDULE` on the compact grid; ``bias_tma`` only where ``q_per_kv``
    divides 32 (elsewhere ``bias_bulk`` stages the same values, and ``bias_box_rows`` goes with
    ``bias_tma``); ``odd_rows_paired`` only at ``q_per_kv`` 8. Pure."""
    options = {**SCHEDULE, **COMPACT_GRID_SCHEDULE} if config.compact_grid else dict(SCHEDULE)
    if options.get("bias_tma") and not tma_boxes_fit(config.q_per_kv):
        options["bias_tma"] = False
    return _without_moot(options, config)


def _without_moot(options: dict, config: "CuteFwdConfig", keep=()) -> dict:
    """``options`` less those with nothing to act on at ``config``: ``bias_box_rows`` without
    ``bias_tma`` (a shape of its boxes), ``odd_rows_paired`` below or above ``q_per_kv`` 8 (a row
    order for 8 alone); the keys in ``keep`` stay (asked for explicitly; the kernel refuses those
    that do not apply, by name). Pure."""
    moot = set()
    if not options.get("bias_tma"):
        moot.add("bias_box_rows")
    if config.q_per_kv != 8:
        moot.add("odd_rows_paired")
    return {k: v for k, v in options.items() if k not in moot or k in keep}


@dataclass(frozen=True)
class CuteFwdConfig:
    """The code-shaping facts of one compiled kernel (everything else is a runtime argument).

    ``compact_grid``: the grid has one block per real M tile, numbered across the requests (at
    most ``ceil(T * q_per_kv / tile_m) + B`` a KV head; each block finds its request by a scan of
    ``cu_seqlens_q``), instead of ``ceil(max_seqlen_q * q_per_kv / tile_m)`` blocks for every
    request, whose blocks past a short request exit at once (a serving batch of a 2K chunk and 63
    decodes is 8,192 such blocks a KV head, 191 of them with work). The backend's plan chooses it
    per call (``cute_backend.compact_grid``).
    """

    dtype: str  # "bfloat16" or "float16"
    head_dim: int
    q_per_kv: int
    tile_m: int = 128
    tile_n: int = 128
    compact_grid: bool = False

    @property
    def num_mma_threads(self) -> int:
        """The consumer warpgroups: one per 64 rows of the M tile."""
        return 128 * (self.tile_m // 64)

    @property
    def num_threads(self) -> int:
        """The producer warpgroup and the consumer warpgroups."""
        return PRODUCER_THREADS + self.num_mma_threads

    @property
    def bias_width(self) -> int:
        """Distances staged per row of a band tile by bulk copies: the tile's ``tile_n`` plus 16
        bytes of slop (``bias_tma`` rows may be wider: :func:`tma_bias_width`)."""
        return self.tile_n + CHUNK

    def smem_bytes(self, bias_width: int | None = None) -> int:
        """Q, the K/V stages and the bias buffer of ``bias_width`` distances a row (default
        :attr:`bias_width`; barriers and ``lean_mask``'s row of zeros not counted)."""
        elem = 2
        q = self.tile_m * self.head_dim * elem
        kv = 2 * STAGES * self.tile_n * self.head_dim * elem
        bias = self.tile_m * (bias_width or self.bias_width) * elem
        return q + kv + bias


def tma_boxes_fit(group: int) -> bool:
    """Whether ``bias_tma`` can stage ``group`` query heads a KV head: one token's box of ``group``
    rows must lie within one producer warp's 32 rows, so ``group`` divides 32. Pure."""
    return 32 % group == 0


def tma_bias_width(tile_n: int, group: int, elem_bytes: int = 2, box_rows: int = 0) -> int:
    """Distances a row of ``bias_tma``'s buffer holds: ``tile_n`` plus 16 bytes of slop (a box
    starts at a 16-byte-aligned distance: the TMA unit faults on any other innermost start), widened
    by 8 distances at a time until one box is a whole number of 128-byte lines, so every box lands
    128-byte aligned. A box is one token's ``group`` rows (136 at group 8 or 16, 144 at 4, 160 at 2,
    192 at 1), or with ``box_rows`` (a multiple of ``group``) that many rows of ``box_rows / group``
    consecutive tokens from the first one's start, whose later tokens reach up to one distance
    further each (136 at group 4 with 8 rows, 144 at 2 or 1). Pure."""
    rows = box_rows or group
    if rows % group:
        raise ValueError(f"box_rows is {box_rows}; expected 0 or a multiple of group ({group})")
    tokens = rows // group
    # the largest element read: (tile_n - 1) + 7 of the start's rounding + (tokens - 1)
    width = -(-(tile_n + CHUNK - 1 + tokens - 1) // CHUNK) * CHUNK
    while (rows * width * elem_bytes) % 128:
        width += CHUNK
    return width


def _cutlass_dtype(name: str):
    return {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}[name]


def _acc_mn_layout(acc_layout: cute.Layout) -> cute.Layout:
    """The (rows, cols) view of a wgmma accumulator layout ``((2, 2, N/8), MMA_M, MMA_N)``:
    mode 0[1] (rows r and r + 8) with MMA_M, mode 0[0] (two adjacent columns) with 0[2] and MMA_N."""
    flat = cute.make_layout(acc_layout.shape)
    shape = ((flat.shape[0][1], flat.shape[1]), (flat.shape[0][0], flat.shape[0][2], flat.shape[2]))
    stride = ((flat.stride[0][1], flat.stride[1]), (flat.stride[0][0], flat.stride[0][2], flat.stride[2]))
    return cute.composition(acc_layout, cute.make_layout(shape, stride=stride))


def _acc_as_operand_a(acc_layout: cute.Layout) -> cute.Layout:
    """The accumulator of ``S = Q K^T`` seen as the register A operand of ``O += P V``:
    ``((2, 2, N/8), M, 1)`` -> ``((2, 2, 2), M, N/16)``: each k16 slice of P takes two of the
    accumulator's 8-column groups."""
    split = cute.logical_divide(acc_layout, ((None, None, 2), None, None))
    shape = (
        (split.shape[0][0], split.shape[0][1], split.shape[0][2][0]),
        split.shape[1],
        (split.shape[0][2][1], split.shape[2]),
    )
    stride = (
        (split.stride[0][0], split.stride[0][1], split.stride[0][2][0]),
        split.stride[1],
        (split.stride[0][2][1], split.stride[2]),
    )
    return cute.make_layout(shape, stride=stride)


@cute.jit
def _shuffle_i64(value, lane, width: cutlass.Constexpr):
    """``value`` (64-bit) of lane ``lane`` of this thread's ``width``-lane segment of the warp."""
    cell = cute.make_rmem_tensor(cute.make_layout((1,), stride=(1,)), Int64)
    cell[0] = Int64(value)
    halves = cute.recast_tensor(cell, Int32)
    for i in cutlass.range_constexpr(2):
        halves[i] = cute.arch.shuffle_sync(halves[i], lane, mask_and_clamp=((32 - width) << 8) | 31)
    return cell[0]


def _bulk_copy_g2s(dst: Int32, src: Int64, size: Int32, mbar: Int32, *, loc=None, ip=None) -> None:
    """``cp.async.bulk`` of ``size`` bytes (a multiple of 16; both addresses 16-byte aligned) from
    global address ``src`` to shared address ``dst``, completing ``size`` transaction bytes on the
    mbarrier at shared address ``mbar`` when it lands (the TMA unit's 1-D copy: one instruction
    for a whole row, where ``cp.async`` needs one per 16 bytes)."""
    llvm.inline_asm(
        None,
        [Int32(dst).ir_value(loc=loc, ip=ip), Int64(src).ir_value(loc=loc, ip=ip),
         Int32(size).ir_value(loc=loc, ip=ip), Int32(mbar).ir_value(loc=loc, ip=ip)],
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
        "r,l,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )  # fmt: skip


def _state(stages: int, count, index, phase) -> pipeline.PipelineState:
    """The pipeline position of use number ``count``, from values the caller computes."""
    return pipeline.PipelineState(stages, Int32(count), Int32(index), Int32(phase))


class RelAttnFwdSm90:
    """The kernel of one :class:`CuteFwdConfig`; ``__call__`` is the host launch (``cute.jit``).

    Schedule options (keyword defaults: the kernel measured at 46a147e; :data:`SCHEDULE` is what
    the backend builds; meta/TUNING.md, "CuTe backend", has the measurements):

    - ``pingpong``: the two consumer warpgroups take turns issuing their GEMMs (named barriers),
      so one's softmax runs under the other's tensor-core work.
    - ``producer_regs`` / ``consumer_regs``: the ``setmaxnreg`` split of the register file
      (128 * p + 256 * c <= 65536).
    - ``release_per_warp``: one elected lane per consumer warp arrives on a stage's empty barrier
      instead of every thread (256 arrivals a stage; FA4 uses one a warp).
    - ``consumer_fence``: a ``fence.proxy.async`` after each K/V wait, ordering the producer's
      cp.async writes before the wgmma reads of them (FA4 has none; kept for the memory model).
    - ``fresh_scores``: each key tile's ``S`` goes to a new accumulator, so the previous tile's
      probabilities are dead once converted into P. With one accumulator reused, the zero-init
      QK GEMM still names it as an input, and the compiler kept the fp32 probabilities live
      across the loop and converted them twice.
    - ``page_reuse``: one block-table lookup a key tile, used by its K copy and, an iteration
      later, its V copy, instead of one lookup per copy.
    - ``tma_kv``: each K and V tile wholly below ``kv_len`` is one page,
      loaded with one TMA copy (``cp.async.bulk.tensor``, issued by producer warp 0) from page
      ``block_table[req, n]`` clamped into the cache, into the same swizzled stages the consumers
      read; the tile that holds ``kv_len`` is still gathered, its rows past ``kv_len`` copying row
      ``kv_len - 1``. Assumes ``page_size == tile_n``: the caller guarantees it (at another page
      size every tile is gathered, so the result stays right). The full barriers keep their 128 producer arrivals; for a TMA stage one
      elected thread sets the tile's transaction bytes and arrives for all 128
      (:meth:`_load_page` says why that is safe). Each tile is looked up when loaded
      (``page_reuse`` does not apply). The descriptors are built in ``__call__`` from K and V.
    - ``band_split``: band tiles whose every element is visible with ``0 <= d < E`` (below the
      diagonal, inside the window, the whole tile in the band) take a body without masks: one
      shared-memory load and one multiply-add a score, ``S * softmax_scale + bias``, in natural
      units (the softmax's exp2 multiply-add applies log2(e)). The other band tiles mask as before,
      in the same units.
    - ``late_rescale``: the running O is multiplied by the previous tile's correction after this
      tile's QK GEMM is issued, before the PV GEMM that accumulates into it (FA3's place: the
      multiplies run under the QK GEMM), instead of at the end of the previous iteration, between
      its PV wait and the next turn to issue.
    - ``smem_epilogue``: the normalised O goes through shared memory (each consumer warpgroup
      writes its rows into its own rows of the Q tile, whose last GEMM has completed), then out
      in 16-byte stores, one per chunk each thread loaded Q into, instead of 4-byte stores
      straight from the accumulator.
    - ``stmatrix_epilogue``: with ``smem_epilogue``, the normalised O is converted in registers
      and written into the Q tile with ``stmatrix`` (8 stores a thread, 8 8x8 matrices each)
      instead of 64 2-byte stores, each with its own swizzled address.
    - ``fence_gathered_only``: with ``consumer_fence``, fence only after waiting for a stage the
      producer gathered with ``cp.async`` (generic proxy); a stage loaded by TMA (``tma_kv``) is
      written by the async proxy that wgmma reads through, and needs none.
    - ``bias_per_wg``: the bias buffer in two halves with their own barriers, one a consumer
      warpgroup (its 64 rows): producer threads 0-63 refill the first warpgroup's half as soon as
      that warpgroup has read it, instead of waiting for both (the single buffer's refill then
      has a whole iteration of lead, not half of one). ``"tile_pages"``: only when the page size
      is ``tile_n`` (a runtime choice; at other page sizes one buffer, as without the option).
    - ``debug_all_plain``: every key tile runs as a plain tile (no mask, no bias): a wrong answer,
      only for timing the schedule's floor (``meta/tools/cute_ws_bench.py``).
    - ``debug_empty_walk`` (timing only, a wrong answer: O is zero): every CTA walks no key tile,
      so it runs only its own start and end (the Q gather, the barriers, the epilogue's stores)
      and no load of K, V or bias: against the window sweep's per-CTA cost
      (``meta/tools/window_fit.py``) it splits that into the CTA's own work and its pipeline's
      fill and drain.
    - ``debug_acc_bias`` (timing only, a wrong answer): the consumer-side floor of a bias the
      producer would convert into float32 in the accumulator's order. Before the QK GEMM of a
      band tile (``"unmasked"``: only the unmasked band tiles of ``band_split``; ``"band"``: every
      tile that stages a bias) each consumer thread waits for the tile's bias, loads its 64 scores'
      worth as 16 ``LDS.128`` of whatever the first 32 KB of the bias buffer hold, and the GEMM
      accumulates onto them; the softmax then adds no bias to those tiles (with ``"band"``,
      masked tiles only mask; with ``"unmasked"`` they wait for and add the staged bias as in the
      build). Nothing converts anything: it times what the consumers would pay, not the
      producer's share. ``"band_noload"``: the same wait and release before the GEMM, no loads,
      the GEMM from zero. The wait comes before the GEMM and the release right after it, earlier
      than the build's (after the GEMM, after the softmax): a shorter hand-off than the build's.
    - ``debug_no_masks`` (timing only, a wrong answer): masked tiles keep every score (the
      visibility select dropped); with ``debug_acc_bias="band_noload"`` and
      ``debug_skip_bias_copies`` it leaves, over ``debug_all_plain``, the probe's bias hand-off and
      the masked tiles' own body (a scale multiply a score).
    - ``bias_bulk``: each producer thread stages its row's bias slice with one bulk copy
      (``cp.async.bulk``, the TMA unit's 1-D copy) of the part of ``[d0, d0 + bias_width)`` inside
      ``[0, E)``, instead of one ``cp.async`` per 16 bytes (17 a row, each with its own address
      math); it arrives on the bias barrier with that many transaction bytes
      (``mbarrier.arrive.expect_tx``), so the phase completes when every row has landed.
    - ``bias_tma``: the bias rows of one token (its ``G`` query heads, consecutive rows of the tile)
      in one TMA box of a ``(E, Hq, T)`` view of rel_logits, ``bias_width`` distances from the
      same 16-byte-aligned ``d0`` (:func:`tma_bias_width`), issued warp by warp (``32 / G`` copies a
      producer warp instead of 32 bulk copies, one lane at a time). Distances outside ``[0, E)``
      arrive as zeros (the TMA unit's out-of-bounds fill), which is what ``lean_mask`` reads, so no
      thread writes zeros. Needs ``G`` to divide 32; over ``bias_bulk`` when both are set.
    - ``bias_box_rows`` (with ``bias_tma``; 0: one token's ``G`` rows a box): each TMA box stages
      ``max(bias_box_rows, G)`` rows, the ``G`` heads of that many over ``G`` consecutive tokens,
      all from the first token's ``d0`` (rows :func:`tma_bias_width` wide enough for the later
      tokens' one more distance each). Below 8 rows a box, the 8 rows one 16-bit bias load of a
      warp reads span two or more tokens whose same-head rows lie on the same shared-memory banks
      (a box of ``G`` rows is a whole number of 128-byte lines), and each load takes 1.9
      wavefronts at ``G`` 4, 3.8 at 2, 7.5 at 1 (1 at 8 and 16; ``meta/tools/bias_banks.py``);
      with 8-row boxes of 136 distances at ``G`` 4 it takes 1.5 (2 at ``G`` 2 and 1), and a
      producer warp issues 4 boxes instead of ``32 / G``.
    - ``odd_rows_paired`` (``G`` 8 only): in each 16 rows of the M tile the token whose ``q_abs``
      is odd takes the first 8 (the accumulator's rows ``r``, its other token rows ``r + 8``),
      swapping the two tokens of every pair when the request's ``offset`` is even
      (:meth:`_token`). A thread's two bias values of a column pair, distances ``d`` and
      ``d - 1``, are then one aligned 32-bit word in its first row (``d`` odd, the slice start
      even), read with one load instead of two: 48 shared loads a band tile a thread instead of
      64, a quarter fewer bias wavefronts. Q's gather, O's store, the rows' ``q_abs`` and the
      bias boxes all take the swapped order.
    - ``debug_skip_bias_copies`` (timing only, a wrong answer): the producer acquires and commits
      each band tile's bias buffer without copying anything into it, so the consumers do all their
      bias work on stale shared memory. Against the build and ``debug_all_plain`` it splits a band
      tile's extra cost into the staging's and the consumers' shares.
    - ``kv_len_mask``: masked tiles hide keys at or past ``kv_len`` as well as those outside
      ``0 <= d <= window``. Without it (``SCHEDULE``), only ``d`` decides: a request's rows have
      ``q_abs < kv_len``, so ``d >= 0`` already hides those keys from them; only the M tile's rows
      past the request (never stored) can see them, and those key rows are finite copies of row
      ``kv_len - 1``.
    - ``lean_mask`` (with ``bias_bulk``): masked tiles add the staged value without selecting it
      away at ``d >= E``. The producer writes zeros over the part of a row's slice at or past
      ``E`` (only rows whose slice crosses it), and a masked tile outside the band reads a row of
      zeros the CTA writes once at its start (one extra buffer row), instead of the bias buffer it
      does not wait for.

    - ``bias_only_past_e`` (with ``band_split`` and ``lean_mask``): a band tile whose every element
      is visible takes the body without masks even where some of its distances reach ``E`` (the
      tile where ``d`` crosses ``E``, one or two a CTA): the staged slice holds zeros there, which
      is the contract's bias past ``E``, so no select is needed. Without it those tiles take the
      masked body.

    - ``rescale_threshold`` (log2 units; 0: off): a row's softmax offset moves only when a tile's
      maximum passes it by more than this, so a probability is at most ``2**rescale_threshold``;
      a warp whose rows all kept their offset skips the running O's rescale (one multiply an
      element a tile). The result is the same softmax (the offset cancels in ``O / row_sum``).

    The grid (dense, or compact with ``config.compact_grid``) is a fact of the configuration, not
    a schedule option: the plan chooses it per call.
    """

    def __init__(self, config: CuteFwdConfig, *, pingpong: bool = True, producer_regs: int = 24,
                 consumer_regs: int = 240, release_per_warp: bool = False, consumer_fence: bool = True,
                 debug_all_plain: bool = False, debug_skip_bias_copies: bool = False, fence_gathered_only: bool = False,
                 bias_per_wg: bool = False, bias_bulk: bool = False, bias_tma: bool = False, kv_len_mask: bool = True,
                 lean_mask: bool = False, rescale_threshold: float = 0.0,
                 fresh_scores: bool = False, page_reuse: bool = False, tma_kv: bool = False,
                 band_split: bool = False, late_rescale: bool = False, smem_epilogue: bool = False,
                 stmatrix_epilogue: bool = False, bias_only_past_e: bool = False,
                 debug_acc_bias: str = "", debug_no_masks: bool = False, bias_box_rows: int = 0,
                 odd_rows_paired: bool = False, debug_empty_walk: bool = False):  # fmt: skip
        if config.head_dim % 64 != 0 or config.head_dim > 128:
            raise ValueError(f"head_dim is {config.head_dim}; this kernel supports 64 and 128")
        if config.tile_m != 128 or config.tile_n != 128:
            # 64-key tiles were correct but lost on every case timed (meta/TUNING.md, 2026-12-04)
            raise ValueError(f"tile {config.tile_m}x{config.tile_n} is not supported; expected 128x128")
        if 128 * producer_regs + config.num_mma_threads * consumer_regs > 65536:
            raise ValueError(f"register split {producer_regs}/{consumer_regs} does not fit the register file")
        self.config = config
        self.dtype = _cutlass_dtype(config.dtype)
        self.tile_m, self.tile_n, self.head_dim = config.tile_m, config.tile_n, config.head_dim
        self.group = config.q_per_kv
        self.num_mma_threads = config.num_mma_threads
        self.num_threads = config.num_threads
        self.bias_width = config.bias_width
        self.pingpong = pingpong
        self.release_per_warp = release_per_warp
        self.consumer_fence = consumer_fence
        self.debug_all_plain = debug_all_plain
        self.debug_empty_walk = debug_empty_walk
        self.debug_skip_bias_copies = debug_skip_bias_copies
        self.fence_gathered_only = fence_gathered_only
        self.bias_per_wg = bias_per_wg
        self.bias_bulk = bias_bulk
        self.bias_tma = bias_tma
        if isinstance(bias_box_rows, bool) or not isinstance(bias_box_rows, int):
            raise TypeError(f"bias_box_rows is {bias_box_rows!r}; expected an int (0: one token's rows a box)")
        #: rows and tokens of one bias TMA box: max(bias_box_rows, G) rows (one token's G rows when larger)
        self.box_rows = max(bias_box_rows, config.q_per_kv)
        self.box_tokens = self.box_rows // config.q_per_kv
        if bias_box_rows < 0 or (bias_box_rows and (self.box_rows % config.q_per_kv or 32 % self.box_rows)):
            raise ValueError(f"bias_box_rows is {bias_box_rows}; expected 0 or a multiple of q_per_kv "
                             f"({config.q_per_kv}) that divides 32 (a box within a warp's rows)")
        if bias_tma:
            if not tma_boxes_fit(config.q_per_kv):
                raise ValueError(f"bias_tma needs q_per_kv to divide 32 (one token's box within a warp's rows); it is {config.q_per_kv}")
            self.bias_width = tma_bias_width(config.tile_n, config.q_per_kv, box_rows=self.box_rows)
        elif bias_box_rows:
            raise ValueError(f"bias_box_rows is {bias_box_rows}; it needs bias_tma (it shapes the TMA boxes)")
        if odd_rows_paired and config.q_per_kv != 8:
            raise ValueError(f"odd_rows_paired needs q_per_kv 8 (a token's rows fill a warp's 8 rows of one "
                             f"accumulator half); it is {config.q_per_kv}")
        if odd_rows_paired and self.box_tokens > 1:
            raise ValueError(f"odd_rows_paired needs one token a bias box; bias_box_rows is {bias_box_rows} "
                             f"({self.box_tokens} tokens at q_per_kv {config.q_per_kv})")
        self.odd_rows_paired = odd_rows_paired
        self.kv_len_mask = kv_len_mask
        self.lean_mask = lean_mask
        self.compact_grid = config.compact_grid
        if not 0.0 <= rescale_threshold <= 16.0:
            raise ValueError(f"rescale_threshold is {rescale_threshold}; expected 0 (off) to 16 (log2 units)")
        self.rescale_threshold = float(rescale_threshold)
        if lean_mask and not (bias_bulk or bias_tma):
            raise ValueError("lean_mask needs bias_bulk or bias_tma (the zeros past E come with a row's copy)")
        if bias_only_past_e and not (band_split and lean_mask):
            raise ValueError("bias_only_past_e needs band_split and lean_mask (the staged zeros past E stand for the select)")
        self.bias_only_past_e = bias_only_past_e
        if debug_acc_bias not in ("", "unmasked", "band", "band_noload"):
            raise ValueError(f"debug_acc_bias is {debug_acc_bias!r}; expected '', 'unmasked', 'band' or 'band_noload'")
        if debug_acc_bias and not band_split:
            raise ValueError(f"debug_acc_bias={debug_acc_bias!r} needs band_split (its tile classes)")
        self.debug_acc_bias = debug_acc_bias
        self.debug_no_masks = debug_no_masks
        #: rows of the bias buffer: one a tile row, and with lean_mask a row of zeros after them
        self.zero_row = config.tile_m
        self.bias_rows = config.tile_m + 1 if lean_mask else config.tile_m
        if (bias_bulk or bias_tma) and config.tile_m != PRODUCER_THREADS:
            raise ValueError(f"bias_bulk and bias_tma stage one row a producer thread; tile_m is {config.tile_m}")
        #: bias barriers (full / empty pairs): one a consumer warpgroup with bias_per_wg
        self.bias_halves = 2 if bias_per_wg else 1
        if bias_per_wg not in (False, True, "tile_pages"):
            raise ValueError(f"bias_per_wg is {bias_per_wg!r}; expected False, True or 'tile_pages'")
        self.fresh_scores = fresh_scores
        self.page_reuse = page_reuse
        self.tma_kv = tma_kv
        self.band_split = band_split
        self.late_rescale = late_rescale
        self.smem_epilogue = smem_epilogue
        if stmatrix_epilogue and not smem_epilogue:
            raise ValueError("stmatrix_epilogue needs smem_epilogue (it writes O into the Q tile)")
        self.stmatrix_epilogue = stmatrix_epilogue
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs
        # threads per row of a 16-byte-chunked (rows, head_dim) tile copy
        self.copy_cols = self.head_dim // CHUNK

    # ---------------------------------------------------------------------------------------------
    # host side
    # ---------------------------------------------------------------------------------------------

    def _smem_layout(self, rows: int, stages: int | None):
        atom = warpgroup.make_smem_layout_atom(
            hopper.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, self.dtype, self.head_dim), self.dtype
        )
        shape = (rows, self.head_dim) if stages is None else (rows, self.head_dim, stages)
        order = (0, 1) if stages is None else (0, 1, 2)
        return cute.tile_to_shape(atom, shape, order=order)

    def _tiled_copy(self, copy_atom, threads: int):
        thr_layout = cute.make_ordered_layout((threads // self.copy_cols, self.copy_cols), order=(1, 0))
        return cute.make_tiled_copy_tv(copy_atom, thr_layout, cute.make_layout((1, CHUNK)))

    def _tma_pages(self, mX: cute.Tensor, sKV_layout):
        """The TMA load of one whole page of ``mX`` (K or V cache, (num_blocks, page, Hkv, D)) for
        one KV head into one stage of ``sKV_layout``: ``(atom, coordinates)``, the coordinates
        indexed (row, col, kv_head, page), the mode order a (tile_n, D) box takes."""
        pages = cute.make_tensor(mX.iterator, cute.select(mX.layout, mode=[1, 3, 2, 0]))
        return cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), pages, cute.select(sKV_layout, mode=[0, 1]), (self.tile_n, self.head_dim)
        )

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mBlockTable: cute.Tensor,
        mSeqlens: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mRel: cute.Tensor,
        softmax_scale: Float32,
        window: Int32,
        max_seqlen_q: Int32,
        stream,
    ):
        tiled_mma_qk = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K, Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1), tiler_mn=(64, self.tile_n),
        )  # fmt: skip
        tiled_mma_pv = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.MN, Float32,
            atom_layout_mnk=(self.tile_m // 64, 1, 1), tiler_mn=(64, self.head_dim),
            a_source=warpgroup.OperandSource.RMEM,
        )  # fmt: skip
        sQ_layout = self._smem_layout(self.tile_m, None)
        sKV_layout = self._smem_layout(self.tile_n, STAGES)
        sB_layout = cute.make_layout((self.bias_rows, self.bias_width), stride=(self.bias_width, 1))

        @cute.struct
        class SharedStorage:
            mbar_k: cute.struct.MemRange[Int64, 2 * STAGES]
            mbar_v: cute.struct.MemRange[Int64, 2 * STAGES]
            mbar_b: cute.struct.MemRange[Int64, 2 * self.bias_halves]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sB_layout)], 128]

        copy_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), self.dtype, num_bits_per_copy=128
        )
        copy_q = self._tiled_copy(copy_atom, self.num_mma_threads)
        copy_kv = self._tiled_copy(copy_atom, PRODUCER_THREADS)

        num_kv_heads = mK.shape[2]
        num_reqs = mSeqlens.shape[0]
        grid_m = (max_seqlen_q * self.group + self.tile_m - 1) // self.tile_m
        grid_req = num_reqs
        if const_expr(self.compact_grid):
            # one block a request's M tile, over all requests: at most ceil(T * G / tile_m) + B
            grid_m = (mQ.shape[0] * self.group + self.tile_m - 1) // self.tile_m + num_reqs
            grid_req = 1
        scale_log2 = softmax_scale * LOG2_E
        page_div = cute.FastDivmodDivisorV2(mK.shape[1])
        # with tma_kv: the TMA atoms and coordinate tensors of whole K and V pages
        tma_atom_k = tma_atom_v = tK_pages = tV_pages = None
        if const_expr(self.tma_kv):
            tma_atom_k, tK_pages = self._tma_pages(mK, sKV_layout)
            tma_atom_v, tV_pages = self._tma_pages(mV, sKV_layout)
        # with bias_tma: the atom of one token's bias box and the (E, Hq, T) coordinates of rel_logits
        tma_atom_b = tB_rel = None
        if const_expr(self.bias_tma):
            rel_view = cute.make_tensor(mRel.iterator, cute.select(mRel.layout, mode=[2, 1, 0]))
            box = self._bias_box()
            tma_atom_b, tB_rel = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), rel_view, box, box.shape)
        self.kernel(
            mQ, mK, mV, mO, mBlockTable, mSeqlens, mCuSeqlensQ, mRel, scale_log2, window, page_div,
            sQ_layout, sKV_layout, sB_layout, tiled_mma_qk, tiled_mma_pv, copy_q, copy_kv, copy_atom, tma_atom_k,
            tma_atom_v, tK_pages, tV_pages, tma_atom_b, tB_rel, SharedStorage,
        ).launch(grid=[grid_m, num_kv_heads, grid_req], block=[self.num_threads, 1, 1], stream=stream)  # fmt: skip

    # ---------------------------------------------------------------------------------------------
    # device side
    # ---------------------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mBlockTable: cute.Tensor,
        mSeqlens: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mRel: cute.Tensor,
        scale_log2: Float32,
        window: Int32,
        page_div: cute.FastDivmodDivisorV2,
        sQ_layout: cute.ComposedLayout,
        sKV_layout: cute.ComposedLayout,
        sB_layout: cute.Layout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        copy_q: cute.TiledCopy,
        copy_kv: cute.TiledCopy,
        copy_atom: cute.CopyAtom,
        tma_atom_k: cute.CopyAtom | None,
        tma_atom_v: cute.CopyAtom | None,
        tK_pages: cute.Tensor | None,
        tV_pages: cute.Tensor | None,
        tma_atom_b: cute.CopyAtom | None,
        tB_rel: cute.Tensor | None,
        SharedStorage: cutlass.Constexpr,
    ):
        tile_m, tile_n, G = self.tile_m, self.tile_n, self.group
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if const_expr(self.tma_kv):
            if warp_idx == 0:
                cpasync.prefetch_descriptor(tma_atom_k)
                cpasync.prefetch_descriptor(tma_atom_v)
        if const_expr(self.bias_tma):
            if warp_idx == 1:
                cpasync.prefetch_descriptor(tma_atom_b)
        m_rev, kv_head, req = cute.arch.block_idx()

        # the metadata clamped as inkling_ops/metadata.py says (no change when it is valid)
        num_tokens = mQ.shape[0]
        if const_expr(self.compact_grid):
            m_rev, req = self._find_tile(m_rev, mCuSeqlensQ, mSeqlens.shape[0], num_tokens)
        q_start, q_end = self._request_rows(mCuSeqlensQ, req, num_tokens)
        q_len = q_end - q_start
        page_size = mK.shape[1]
        capacity = mBlockTable.shape[1] * page_size
        kv_len = cutlass.min(cutlass.max(mSeqlens[req], 0), capacity)
        num_m = (q_len * G + tile_m - 1) // tile_m
        if m_rev < num_m:
            # the last M tile of a request (most keys under causality) gets the lowest block index
            m_block = num_m - 1 - m_rev
            smem = cutlass.memory.SmemAllocator()
            storage = smem.allocate(SharedStorage)
            sB = storage.sB.get_tensor(sB_layout)
            if const_expr(self.lean_mask):
                # the row of zeros a masked tile outside the band reads (visible after the sync below)
                if tidx < self.bias_width:
                    sB[self.zero_row, tidx] = self.dtype(0.0)
            producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, PRODUCER_THREADS)
            consumer_arrivals = self.num_mma_threads // 32 if self.release_per_warp else self.num_mma_threads
            consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrivals)
            # with bias_per_wg the bias "stages" are the two warpgroups' halves of one buffer
            bias_producers, bias_consumers = producers, consumers
            if const_expr(self.bias_per_wg):
                bias_producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self._half_count(PRODUCER_THREADS, page_size))
                bias_consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self._half_count(consumer_arrivals, page_size))
            pipes = [
                pipeline.PipelineCpAsync.create(
                    barrier_storage=bar.data_ptr(), num_stages=stages, producer_group=group_p,
                    consumer_group=group_c, defer_sync=True,
                )  # fmt: skip
                for bar, stages, group_p, group_c in (
                    (storage.mbar_k, STAGES, producers, consumers),
                    (storage.mbar_v, STAGES, producers, consumers),
                    (storage.mbar_b, self.bias_halves, bias_producers, bias_consumers),
                )
            ]
            cute.arch.mbarrier_init_fence()
            cute.arch.sync_threads()
            sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
            sK = storage.sK.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)
            sV = storage.sV.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)

            # -------- tile ranges (uniform over the CTA) --------
            offset = kv_len - q_len  # q_abs = offset + token
            # (odd_rows_paired swaps tokens within pairs that never cross an M tile: same range)
            tok_lo = m_block * tile_m // G
            tok_hi = cutlass.min((m_block * tile_m + tile_m - 1) // G, q_len - 1)
            qa_lo = offset + tok_lo
            qa_hi = offset + tok_hi
            rel_extent = mRel.shape[2]
            n_end = cutlass.min((qa_hi + 1 + tile_n - 1) // tile_n, (kv_len + tile_n - 1) // tile_n)
            n_end = cutlass.max(n_end, 0)
            n_begin = cutlass.max(qa_lo - window, 0) // tile_n
            # the lowest key tile whose every element is inside the window
            in_window_lo = (cutlass.max(qa_hi - window, 0) + tile_n - 1) // tile_n
            # plain tiles: every d >= E (so no bias, and visible under causality), inside the window
            plain_hi = cutlass.min(cutlass.max(qa_lo - rel_extent + 1, 0) // tile_n, n_end)
            plain_lo = cutlass.max(in_window_lo, n_begin)
            n_tiles = cutlass.max(n_end - n_begin, 0)
            # band tiles that meet 0 <= d < E: key tile n with n * tile_n > qa_lo - E - tile_n + 1, a
            # run at the top of the range, so the first num_band iterations (diagonal first) stage bias
            lowest = qa_lo - rel_extent - tile_n + 1
            n_band = Int32(0)
            if lowest >= 0:
                n_band = lowest // tile_n + 1
            num_band = cutlass.max(n_end - cutlass.max(n_band, n_begin), 0)
            if const_expr(self.debug_all_plain):
                num_band = Int32(0)  # no bias staged or waited for
            if const_expr(self.debug_empty_walk):
                n_tiles = Int32(0)  # no key tile loaded or multiplied: the CTA's start and end alone
                num_band = Int32(0)
            # band tiles with every element visible (band_split): keys at or below qa_lo, and
            # qa_hi - n0 <= window; without bias_only_past_e (whose staged zeros stand for the
            # bias at d >= E) also every d < E: qa_hi - n0 <= min(E - 1, window)
            bias_hi = cutlass.max(qa_lo + 1, 0) // tile_n
            if const_expr(self.bias_only_past_e):
                bias_lo = in_window_lo
            else:
                bias_lo = (cutlass.max(qa_hi - cutlass.min(rel_extent - 1, window), 0) + tile_n - 1) // tile_n
            q_head0 = kv_head * G

            if warp_idx < PRODUCER_THREADS // 32:
                cute.arch.setmaxregister_decrease(self.producer_regs)
                self._produce(
                    mK, mV, mRel, sK, sV, sB, mBlockTable[req, None], page_div, kv_head, kv_len, q_start, q_len,
                    q_head0, offset, m_block, n_end, n_tiles, num_band, rel_extent, tidx, pipes, copy_kv, copy_atom,
                    (tma_atom_k, tK_pages), (tma_atom_v, tV_pages), (tma_atom_b, tB_rel),
                )  # fmt: skip
            else:
                cute.arch.setmaxregister_increase(self.consumer_regs)
                self._consume(
                    mQ, mO, sQ, sK, sV, sB, q_start, q_len, q_head0, offset, m_block, n_end, n_tiles, num_band,
                    plain_lo, plain_hi, bias_lo, bias_hi, rel_extent, window, kv_len, page_size, scale_log2, tidx - PRODUCER_THREADS, pipes,
                    tiled_mma_qk, tiled_mma_pv, copy_q, copy_atom,
                )  # fmt: skip

    # ---------------------------------------------------------------------------------------------
    # producer warpgroup: K, V and bias into shared memory
    # ---------------------------------------------------------------------------------------------

    @cute.jit
    def _produce(self, mK, mV, mRel, sK, sV, sB, block_row, page_div, kv_head, kv_len, q_start, q_len, q_head0,
                 offset, m_block, n_end, n_tiles, num_band, rel_extent, tidx, pipes, copy_kv, copy_atom, tma_k,
                 tma_v, tma_b):  # fmt: skip
        """Issue the loads in the order the consumers use them: K of the next tile before V of the
        current one (QK of tile i + 1 is issued before PV of tile i), the bias of a band tile after.
        ``tma_k`` / ``tma_v``: (TMA atom, page coordinates) with ``tma_kv``, else (None, None);
        ``tma_b``: (TMA atom, rel_logits coordinates) with ``bias_tma``, else (None, None)."""
        pipe_k, pipe_v, pipe_b = pipes
        thr_copy = copy_kv.get_slice(tidx)
        tTcT = thr_copy.partition_S(cute.make_identity_tensor((self.tile_n, self.head_dim)))
        num_blocks = mK.shape[0]
        pages_k = pages_v = None
        if const_expr(self.tma_kv):
            pages_k = self._page_copies(tma_k, sK, kv_head)
            pages_v = self._page_copies(tma_v, sV, kv_head)
        if n_tiles > 0:
            if const_expr(self.page_reuse and not self.tma_kv):
                # one block-table lookup a key tile, serving its K copy and, an iteration later,
                # its V copy; the next tile's lookup is issued before this tile's copies
                page_k, slot_k = self._lookup(block_row, num_blocks, page_div, kv_len, n_end - 1, tTcT)
                self._copy_rows(mK, sK, 0, pipe_k, kv_head, page_k, slot_k, thr_copy, tTcT, copy_atom)
                if num_band > 0:
                    self._load_bias(mRel, sB, 0, pipe_b, q_start, q_len, q_head0, offset, m_block,
                                    (n_end - 1) * self.tile_n, rel_extent, tidx, copy_atom, mK.shape[1], tma_b)  # fmt: skip
                for it in cutlass.range(n_tiles, unroll=1):
                    n = n_end - 1 - it
                    page_v, slot_v = page_k, slot_k
                    if it + 1 < n_tiles:
                        page_k, slot_k = self._lookup(block_row, num_blocks, page_div, kv_len, n - 1, tTcT)
                        self._copy_rows(mK, sK, it + 1, pipe_k, kv_head, page_k, slot_k, thr_copy, tTcT, copy_atom)
                    self._copy_rows(mV, sV, it, pipe_v, kv_head, page_v, slot_v, thr_copy, tTcT, copy_atom)
                    if it + 1 < num_band:
                        self._load_bias(mRel, sB, it + 1, pipe_b, q_start, q_len, q_head0, offset, m_block,
                                        (n - 1) * self.tile_n, rel_extent, tidx, copy_atom, mK.shape[1], tma_b)  # fmt: skip
            else:
                self._load_kv(mK, sK, 0, pipe_k, block_row, num_blocks, page_div, kv_head, kv_len, n_end - 1,
                              thr_copy, tTcT, copy_atom, pages_k)  # fmt: skip
                if num_band > 0:
                    self._load_bias(mRel, sB, 0, pipe_b, q_start, q_len, q_head0, offset, m_block,
                                    (n_end - 1) * self.tile_n, rel_extent, tidx, copy_atom, mK.shape[1], tma_b)  # fmt: skip
                for it in cutlass.range(n_tiles, unroll=1):
                    n = n_end - 1 - it
                    if it + 1 < n_tiles:
                        self._load_kv(mK, sK, it + 1, pipe_k, block_row, num_blocks, page_div, kv_head, kv_len,
                                      n - 1, thr_copy, tTcT, copy_atom, pages_k)  # fmt: skip
                    self._load_kv(mV, sV, it, pipe_v, block_row, num_blocks, page_div, kv_head, kv_len, n, thr_copy,
                                  tTcT, copy_atom, pages_v)  # fmt: skip
                    if it + 1 < num_band:
                        self._load_bias(mRel, sB, it + 1, pipe_b, q_start, q_len, q_head0, offset, m_block,
                                        (n - 1) * self.tile_n, rel_extent, tidx, copy_atom, mK.shape[1], tma_b)  # fmt: skip
        # the copies land before the producer warps exit
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)

    @cute.jit
    def _load_kv(self, mX, sX, it, pipe, block_row, num_blocks, page_div, kv_head, kv_len, n, thr_copy, tTcT,
                 copy_atom, pages):  # fmt: skip
        """:meth:`_load_rows`, or, with ``tma_kv`` (``pages`` from :meth:`_page_copies`) and key tile
        ``n`` wholly below ``kv_len``, :meth:`_load_page`. The gather stays for the tile that holds
        ``kv_len``, whose rows past it must copy row ``kv_len - 1``, and for every tile when the
        page size is not ``tile_n`` (against the caller's guarantee; the result stays right)."""
        if const_expr(pages is None):
            self._load_rows(mX, sX, it, pipe, block_row, num_blocks, page_div, kv_head, kv_len, n, thr_copy, tTcT,
                            copy_atom)  # fmt: skip
        else:
            if self._tma_tile(n, kv_len, mX.shape[1]):
                self._load_page(it, pipe, block_row, num_blocks, n, pages)
            else:
                self._load_rows(mX, sX, it, pipe, block_row, num_blocks, page_div, kv_head, kv_len, n, thr_copy,
                                tTcT, copy_atom)  # fmt: skip

    @cute.jit
    def _tma_tile(self, n, kv_len, page_size):
        """Whether :meth:`_load_kv` loads key tile ``n`` by TMA (with ``tma_kv``): the tile lies
        wholly below ``kv_len`` and a page is one tile."""
        return (n + 1) * self.tile_n <= kv_len and page_size == self.tile_n

    @cute.jit
    def _page_copies(self, tma, sX, kv_head):
        """``(atom, source, destination)`` of the page TMA copies into ``sX``'s stages: the source
        indexed by page, the destination by stage (each a whole (tile_n, D) tile of KV head ``kv_head``)."""
        atom, tX_pages = tma
        gX = cute.local_tile(tX_pages[None, None, kv_head, None], (self.tile_n, self.head_dim), (0, 0, None))
        sX_tma, gX_tma = cpasync.tma_partition(
            atom, 0, cute.make_layout(1), cute.group_modes(sX, 0, 2), cute.group_modes(gX, 0, 2)
        )
        return atom, gX_tma, sX_tma

    @cute.jit
    def _load_page(self, it, pipe, block_row, num_blocks, n, pages):
        """Key tile ``n`` (K or V), which is page ``block_table[req, n]`` (page_size == tile_n)
        clamped into the cache, into stage ``it % STAGES`` with one TMA copy, issued by producer
        warp 0 alone (the DSL elects the issuing lane).

        The stage's full barrier counts 128 producer arrivals, as for a gathered stage: one
        elected lane adds the tile's bytes to the transaction count and arrives for all 128
        (``mbarrier.arrive.expect_tx``, then an arrive of 127), and the other producer threads skip
        the stage. The phase then completes when the bytes have landed. No arrival can be counted
        toward the wrong phase: every arrival for use ``it`` of a stage, TMA or gathered, comes
        after its thread saw the stage's empty barrier for use ``it - STAGES``, which the consumers
        arrive on only after that use's full phase completed (and so after every thread's
        ``cp.async`` arrival for it landed)."""
        if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 0:
            stage = it % STAGES
            state = _state(STAGES, it, stage, ((it // STAGES) % 2) ^ 1)
            atom, src, dst = pages
            page = cutlass.min(cutlass.max(block_row[n], 0), num_blocks - 1)
            pipe.producer_acquire(state)
            full = pipe.producer_get_barrier(state)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full, self.tile_n * self.head_dim * self.dtype.width // 8)
                cute.arch.mbarrier_arrive(full, arrive_count=PRODUCER_THREADS - 1)
            cute.copy(atom, src[None, page], dst[None, stage], tma_bar_ptr=full)

    @cute.jit
    def _load_rows(self, mX, sX, it, pipe, block_row, num_blocks, page_div, kv_head, kv_len, n, thr_copy, tTcT,
                   copy_atom):  # fmt: skip
        """Wait for stage ``it % STAGES`` to be free, cp.async key tile ``n`` of ``mX`` (K or V) into
        it, and arrive on its full barrier when the copies land. Rows past ``kv_len`` copy row
        ``kv_len - 1`` (finite, always masked: never a NaN from an unused slot); page ids are clamped
        into the cache, as inkling_ops/metadata.py says.

        The ``copy_cols = head_dim / 8`` lanes that copy the column chunks of rows
        ``r0 + (128 / copy_cols) m`` (``m < tile_n * copy_cols / 128``, at most ``copy_cols``) look up
        one of those rows each (lane ``m``: one division, one block-table load) and pass the row's
        offset around with shuffles, so a copy costs a shuffle pair and the cp.async."""
        page, slot = self._lookup(block_row, num_blocks, page_div, kv_len, n, tTcT)
        self._copy_rows(mX, sX, it, pipe, kv_head, page, slot, thr_copy, tTcT, copy_atom)

    @cute.jit
    def _lookup(self, block_row, num_blocks, page_div, kv_len, n, tTcT):
        """``(page, slot)`` of the row of key tile ``n`` this lane looks up for its
        ``copy_cols``-lane group (see :meth:`_load_rows`), clamped as there."""
        lane = cute.arch.lane_idx() % self.copy_cols
        j = cutlass.min(n * self.tile_n + tTcT[0, 0, 0][0] + lane * (PRODUCER_THREADS // self.copy_cols), kv_len - 1)
        page_idx, slot = divmod(j, page_div)
        page = cutlass.min(cutlass.max(block_row[page_idx], 0), num_blocks - 1)
        return page, slot

    @cute.jit
    def _copy_rows(self, mX, sX, it, pipe, kv_head, page, slot, thr_copy, tTcT, copy_atom):
        """:meth:`_load_rows` with this lane's row already looked up (``page``, ``slot``)."""
        stage = it % STAGES
        state = _state(STAGES, it, stage, ((it // STAGES) % 2) ^ 1)
        row_offset = cute.crd2idx((page, slot, kv_head, 0), mX.layout)
        pipe.producer_acquire(state)
        tXsX = thr_copy.partition_D(sX[None, None, stage])
        col = tTcT[0, 0, 0][1]
        for m in cutlass.range_constexpr(cute.size(tXsX, mode=[1])):
            dst = tXsX[None, m, 0]
            address = (mX.iterator + (_shuffle_i64(row_offset, m, self.copy_cols) + col)).toint()
            src = cute.make_tensor(cute.make_ptr(mX.element_type, address, cute.AddressSpace.gmem, assumed_align=16),
                                   dst.layout)  # fmt: skip
            cute.copy(copy_atom, src, dst)
        pipe.producer_commit(state)

    @cute.jit
    def _load_bias(self, mRel, sB, bias_use, pipe, q_start, q_len, q_head0, offset, m_block, n0, rel_extent, tidx,
                   copy_atom, page_size, tma_b):  # fmt: skip
        """Wait for the bias buffer, then stage, per packed row of the tile (one row a producer
        thread), the distances ``[d0, d0 + bias_width)`` of its rel_logits row,
        ``d0 = (q_abs - n0 - tile_n + 1)`` aligned down to 8: the slice key tile ``n0`` can reach.
        Distances outside ``[0, E)`` are not copied (the softmax never reads them): with
        ``bias_bulk`` one bulk copy of the rest (:meth:`_bulk_bias_row`), else one ``cp.async`` per
        16-byte chunk inside ``[0, E)``; with ``bias_tma`` one box of ``box_rows`` rows (:meth:`_tma_bias_rows`).
        ``bias_use``: the tile's index among the walk's band tiles (its place in the bias pipeline)."""
        state = _state(1, bias_use, 0, (bias_use % 2) ^ 1)
        if const_expr(self.bias_per_wg):
            # thread t stages row t, which the consumer warpgroup t // 64 reads
            half = self._bias_half(tidx // (PRODUCER_THREADS // 2), page_size)
            state = _state(2, bias_use, half, (bias_use % 2) ^ 1)
        pipe.producer_acquire(state)
        # the rows that stage their slice: those of the request's tokens (none with debug_skip_bias_copies)
        staged_len = Int32(0) if const_expr(self.debug_skip_bias_copies) else q_len
        if const_expr(self.bias_tma):
            self._tma_bias_rows(tma_b, sB, pipe, state, m_block, q_start, staged_len, q_head0, offset, n0, tidx)
            return
        for rr in cutlass.range_constexpr(self.tile_m // PRODUCER_THREADS):
            r = tidx + rr * PRODUCER_THREADS
            row = m_block * self.tile_m + r
            tok = self._token(row, offset)
            d0 = self._slice_start(offset + tok, n0)
            if const_expr(self.bias_bulk):
                self._bulk_bias_row(mRel, sB, pipe, state, r, row, tok, d0, q_start, staged_len, q_head0, rel_extent)
            elif tok < staged_len:
                src_row = mRel[q_start + tok, q_head0 + row % self.group, None]
                for k in cutlass.range_constexpr(self.bias_width // CHUNK):
                    d = d0 + k * CHUNK
                    if d >= 0 and d < rel_extent:
                        address = (sB.iterator + (r * self.bias_width + k * CHUNK)).toint()
                        dst_ptr = cute.make_ptr(self.dtype, address, cute.AddressSpace.smem, assumed_align=16)
                        dst = cute.make_tensor(dst_ptr, cute.make_layout(CHUNK))
                        src_address = (src_row.iterator + d).toint()
                        src_ptr = cute.make_ptr(self.dtype, src_address, cute.AddressSpace.gmem, assumed_align=16)
                        cute.copy(copy_atom, cute.make_tensor(src_ptr, dst.layout), dst)
        if const_expr(not self.bias_bulk):
            # each thread's cp.async arrive; with bias_bulk its arrive.expect_tx was its arrival
            pipe.producer_commit(state)

    def _slice_start(self, q_abs, n0):
        """``d0``: the smallest distance query position ``q_abs`` has to key tile ``n0``'s keys,
        aligned down to 8 distances (16 bytes), where its staged bias slice starts. The producer
        stages from it and the consumers read back from it: one formula for both."""
        return (q_abs - n0 - self.tile_n + 1) & ~(CHUNK - 1)

    @cute.jit
    def _tma_bias_rows(self, tma_b, sB, pipe, state, m_block, q_start, staged_len, q_head0, offset, n0, tidx):
        """``bias_tma``'s staging: per box of ``box_rows`` rows whose first token is the request's,
        one TMA box of ``G`` heads of ``box_tokens`` tokens by ``bias_width`` distances from the
        first token's ``d0`` (as :meth:`_load_bias` computes it, a multiple of 8) into its rows of
        the buffer, zeros outside ``[0, E)``.

        Every producer thread arrives once on the bias barrier (the count it expects); the thread of
        a box's first row adds the box's bytes (``mbarrier.arrive.expect_tx``). Each producer warp
        then issues the boxes of its 32 rows, ``32 / box_rows`` of them, one after another: the
        branch and the coordinates are warp-uniform, and the DSL's copy elects the issuing lane. A
        box whose first token is past the request's gets none (nor bytes); a box's later tokens past
        it read other rows of rel_logits (zeros past ``T``) into rows that are never stored."""
        atom, tRel = tma_b
        G, W, R = self.group, self.bias_width, self.box_rows
        full = pipe.producer_get_barrier(state)
        row = m_block * self.tile_m + tidx
        size = Int32(0)
        if row % R == 0 and self._token(row, offset) < staged_len:
            size = Int32(R * W * (self.dtype.width // 8))
        cute.arch.mbarrier_arrive_and_expect_tx(full, size)
        box = self._bias_box()
        box_shape = box.shape
        modes = len(box_shape)
        warp_row0 = cute.arch.make_warp_uniform(cute.arch.warp_idx()) * 32
        for k in cutlass.range(32 // R, unroll=1):  # a loop, not unrolled: the producer has 32 registers
            r = warp_row0 + k * R
            tok = self._token(m_block * self.tile_m + r, offset)  # the box's first token: its slice start is the box's
            if tok < staged_len:
                gB = cute.domain_offset((self._slice_start(offset + tok, n0), q_head0, q_start + tok), tRel)
                if const_expr(self.box_tokens > 1):
                    gBox = cute.local_tile(gB, box_shape, (0, 0, 0))
                else:
                    gBox = cute.local_tile(gB[None, None, 0], box_shape, (0, 0))
                dst = cute.make_ptr(self.dtype, (sB.iterator + r * W).toint(), cute.AddressSpace.smem, assumed_align=128)
                sBox = cute.make_tensor(dst, box)
                sX, gX = cpasync.tma_partition(
                    atom, 0, cute.make_layout(1), cute.group_modes(sBox, 0, modes), cute.group_modes(gBox, 0, modes)
                )
                cute.copy(atom, gX, sX, tma_bar_ptr=full)

    def _bias_box(self) -> cute.Layout:
        """One bias TMA box in shared memory, the host's descriptor and the producer's copies alike:
        ``bias_width`` distances by ``G`` heads (by ``box_tokens`` tokens when a box holds more than
        one, the ``bias_box_rows`` case), rows consecutive."""
        W, G = self.bias_width, self.group
        if self.box_tokens > 1:
            return cute.make_layout((W, G, self.box_tokens), stride=(1, W, W * G))
        return cute.make_layout((W, G), stride=(1, W))

    @cute.jit
    def _bulk_bias_row(self, mRel, sB, pipe, state, r, row, tok, d0, q_start, staged_len, q_head0, rel_extent):
        """``bias_bulk``'s staging of tile row ``r`` (packed row ``row``, token ``tok``, slice start
        ``d0``, as :meth:`_load_bias` computes them): the distances ``[max(d0, 0), min(d0 + bias_width,
        E))`` of its rel_logits row in one bulk copy, and this thread's arrival on the bias barrier with
        that many transaction bytes (zero for a row past the request's tokens, or a slice wholly
        outside ``[0, E)``). ``d0`` and ``E`` are multiples of 8 and the row starts 16-byte aligned (the
        backend checks it), so the copy's addresses and size are multiples of 16 bytes. One row a
        producer thread (the constructor checks ``tile_m``): each thread arrives once."""
        elem = self.dtype.width // 8
        lo = cutlass.max(d0, 0)
        hi = cutlass.min(d0 + self.bias_width, rel_extent)
        size = Int32(0)
        if tok < staged_len and hi > lo:
            size = (hi - lo) * elem
        if const_expr(self.lean_mask):
            # zeros over [E - d0, bias_width) of the slice (lean_mask reads them unselected); written
            # before this thread's arrival, which releases them to the consumers
            if tok < staged_len and d0 + self.bias_width > rel_extent:
                z0 = cutlass.max(rel_extent - d0, 0)
                for k in cutlass.range_constexpr(self.bias_width // CHUNK):
                    if k * CHUNK >= z0:
                        for e in cutlass.range_constexpr(CHUNK):
                            sB[r, k * CHUNK + e] = self.dtype(0.0)
                # the next tile's bulk copy (async proxy) may write over these generic stores
                cute.arch.fence_view_async_shared()
        full = pipe.producer_get_barrier(state)
        cute.arch.mbarrier_arrive_and_expect_tx(full, size)
        if size > 0:
            src_row = mRel[q_start + tok, q_head0 + row % self.group, None]
            dst = (sB.iterator + (r * self.bias_width + lo - d0)).toint()
            _bulk_copy_g2s(dst, (src_row.iterator + lo).toint(), size, full.toint())

    @cute.jit
    def _consume(self, mQ, mO, sQ, sK, sV, sB, q_start, q_len, q_head0, offset, m_block, n_end, n_tiles, num_band,
                 plain_lo, plain_hi, bias_lo, bias_hi, rel_extent, window, kv_len, page_size, scale_log2, tidx, pipes,
                 tiled_mma_qk, tiled_mma_pv, copy_q, copy_atom):  # fmt: skip
        """Per key tile ``i`` (FA3's intra-warpgroup overlap): issue ``S_i = Q K_i^T``, issue
        ``O += P_{i-1} V_{i-1}``, wait for S_i, mask / bias / online softmax of S_i while the PV GEMM
        runs, wait for it, rescale O. ``tidx`` counts from the first consumer thread."""
        tile_m, tile_n, G = self.tile_m, self.tile_n, self.group
        pipe_k, pipe_v, pipe_b = pipes
        wg_idx = cute.arch.make_warp_uniform(tidx // 128)
        # the bias half this warpgroup reads (bias_per_wg), else the one buffer
        b_half = self._bias_half(wg_idx, page_size)
        # V seen as the (head_dim, tile_n) B operand of O += P V
        sVt = cute.composition(sV, cute.make_ordered_layout((self.head_dim, tile_n, STAGES), order=(1, 0, 2)))

        # -------- Q: each consumer thread gathers its share, once --------
        thr_copy = copy_q.get_slice(tidx)
        cQ = cute.make_identity_tensor((tile_m, self.head_dim))
        tQcQ = thr_copy.partition_S(cQ)
        tQsQ = thr_copy.partition_D(sQ)
        for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
            tok, address = self._chunk_at(mQ, tQcQ, m, m_block, q_start, q_head0, offset)
            dst = tQsQ[None, m, 0]
            if tok < q_len:
                cute.copy(copy_atom, self._gmem_at(mQ, address, dst), dst)
            else:
                dst.fill(0.0)
        cute.arch.cp_async_commit_group()
        cute.arch.cp_async_wait_group(0)
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=BAR_Q, number_of_threads=self.num_mma_threads)

        # -------- MMA partitions --------
        wg_layout = cute.make_layout(tile_m // 64, stride=128)
        thr_mma_qk = tiled_mma_qk.get_slice(tidx)
        wg_mma_qk = tiled_mma_qk.get_slice(wg_layout(wg_idx))
        wg_mma_pv = tiled_mma_pv.get_slice(wg_layout(wg_idx))
        tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))
        tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
        tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
        acc_O = cute.make_rmem_tensor(tiled_mma_pv.partition_shape_C((tile_m, self.head_dim)), Float32)
        acc_O.fill(0.0)
        acc_S_shape = tiled_mma_qk.partition_shape_C((tile_m, tile_n))
        acc_S = cute.make_rmem_tensor(acc_S_shape, Float32)
        rP = cute.make_rmem_tensor(_acc_as_operand_a(acc_S.layout).shape, self.dtype)
        # the (row, col) of each score this thread holds
        cS = cute.make_identity_tensor((tile_m, tile_n))
        tScS = thr_mma_qk.partition_C(cS)
        tScS_mn = cute.make_tensor(tScS.iterator, _acc_mn_layout(tScS.layout))
        num_rows = cute.size(tScS_mn, mode=[0])
        row_max = cute.make_rmem_tensor(num_rows, Float32)
        row_sum = cute.make_rmem_tensor(num_rows, Float32)
        row_scale = cute.make_rmem_tensor(num_rows, Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)
        # q_abs of each of this thread's rows
        row_qabs = cute.make_rmem_tensor(num_rows, Int32)
        for i in cutlass.range_constexpr(num_rows):
            row_qabs[i] = offset + self._token(m_block * tile_m + tScS_mn[i, 0][0], offset)

        if n_tiles > 0:
            if const_expr(self.pingpong):
                if wg_idx == 0:
                    cute.arch.barrier_arrive(barrier_id=BAR_SCHED, number_of_threads=self.num_mma_threads)
            # first tile: S_0, its softmax (O is zero, nothing to rescale)
            k_first = _state(STAGES, Int32(0), Int32(0), Int32(0))
            self._wait_tile(pipe_k, k_first, n_end - 1, kv_len, page_size)
            acc_biased = self._acc_bias(acc_S, sB, pipe_b, 0, n_end - 1, num_band, bias_lo, bias_hi, b_half, tidx)
            self._sched_wait(wg_idx)
            self._gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, 0], True, acc_biased)
            self._sched_signal(wg_idx, True)
            warpgroup.wait_group(0)
            self._release(pipe_k, k_first)
            self._scores(acc_S, row_max, row_sum, row_scale, row_qabs, tScS_mn, sB, pipe_b, 0, n_end - 1, num_band,
                         plain_lo, plain_hi, bias_lo, bias_hi, rel_extent, window, kv_len, scale_log2, b_half)  # fmt: skip
            self._to_operand(acc_S, rP)

            for it in cutlass.range(1, n_tiles, unroll=1):
                n = n_end - 1 - it
                stage = it % STAGES
                k_state = _state(STAGES, it, stage, (it // STAGES) % 2)
                v_state = _state(STAGES, it - 1, 1 - stage, ((it - 1) // STAGES) % 2)
                self._wait_tile(pipe_k, k_state, n, kv_len, page_size)
                # S of this tile (a fresh accumulator: see fresh_scores)
                acc_T = cute.make_rmem_tensor(acc_S_shape, Float32) if const_expr(self.fresh_scores) else acc_S
                acc_biased = self._acc_bias(acc_T, sB, pipe_b, it, n, num_band, bias_lo, bias_hi, b_half, tidx)
                self._sched_wait(wg_idx)
                self._gemm(tiled_mma_qk, acc_T, tSrQ, tSrK[None, None, None, stage], True, acc_biased)
                if const_expr(self.late_rescale):
                    self._rescale_o(acc_O, row_scale)
                self._wait_tile(pipe_v, v_state, n + 1, kv_len, page_size)
                self._gemm(tiled_mma_pv, acc_O, rP, tOrVt[None, None, None, 1 - stage], False)
                self._sched_signal(wg_idx, True)
                warpgroup.wait_group(1)
                self._release(pipe_k, k_state)
                self._scores(acc_T, row_max, row_sum, row_scale, row_qabs, tScS_mn, sB, pipe_b, it, n, num_band,
                             plain_lo, plain_hi, bias_lo, bias_hi, rel_extent, window, kv_len, scale_log2, b_half)  # fmt: skip
                warpgroup.wait_group(0)
                self._release(pipe_v, v_state)
                if const_expr(not self.late_rescale):
                    self._rescale_o(acc_O, row_scale)
                self._to_operand(acc_T, rP)

            # last PV
            last = n_tiles - 1
            v_last = _state(STAGES, last, last % STAGES, (last // STAGES) % 2)
            self._wait_tile(pipe_v, v_last, n_end - n_tiles, kv_len, page_size)
            self._sched_wait(wg_idx)
            if const_expr(self.late_rescale):
                self._rescale_o(acc_O, row_scale)
            self._gemm(tiled_mma_pv, acc_O, rP, tOrVt[None, None, None, last % STAGES], False)
            self._sched_signal(wg_idx, False)
            warpgroup.wait_group(0)
            self._release(pipe_v, v_last)

        # -------- epilogue: O / row_sum, rows of this request only --------
        acc_O_mn = cute.make_tensor(acc_O.iterator, _acc_mn_layout(acc_O.layout))
        cO = cute.make_identity_tensor((tile_m, self.head_dim))
        thr_mma_pv = tiled_mma_pv.get_slice(tidx)
        tOcO = thr_mma_pv.partition_C(cO)
        tOcO_mn = cute.make_tensor(tOcO.iterator, _acc_mn_layout(tOcO.layout))
        for i in cutlass.range_constexpr(num_rows):
            total = cute.arch.warp_reduction_sum(row_sum[i], threads_in_group=4)
            inv = Float32(0.0)
            if total > 0.0:
                inv = 1.0 / total
            if const_expr(self.stmatrix_epilogue):
                for j in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[1])):
                    acc_O_mn[i, j] = acc_O_mn[i, j] * inv
            elif const_expr(self.smem_epilogue):
                # into this warpgroup's own rows of sQ (its last QK GEMM has completed)
                for j in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[1])):
                    sQ[tOcO_mn[i, 0][0], tOcO_mn[0, j][1]] = (acc_O_mn[i, j] * inv).to(self.dtype)
            else:
                row = m_block * tile_m + tOcO_mn[i, 0][0]
                tok = self._token(row, offset)
                if tok < q_len:
                    out_row = mO[q_start + tok, q_head0 + row % G, None]
                    for j in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[1])):
                        out_row[tOcO_mn[0, j][1]] = (acc_O_mn[i, j] * inv).to(self.dtype)
        if const_expr(self.stmatrix_epilogue):
            # into this warpgroup's own rows of sQ (its last QK GEMM has completed)
            rO = cute.make_rmem_tensor_like(acc_O, self.dtype)
            rO.store(acc_O.load().to(self.dtype))
            atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(transpose=False, num_matrices=4), self.dtype)
            thr_copy_o = cute.make_tiled_copy_C(atom, tiled_mma_pv).get_slice(tidx)
            cute.copy(thr_copy_o, thr_copy_o.retile(rO), thr_copy_o.partition_D(sQ))
        if const_expr(self.smem_epilogue):
            # both warpgroups' rows written: each thread stores the 16-byte chunks it loaded Q into
            cute.arch.barrier(barrier_id=BAR_Q, number_of_threads=self.num_mma_threads)
            for m in cutlass.range_constexpr(cute.size(tQsQ, mode=[1])):
                tok, address = self._chunk_at(mO, tQcQ, m, m_block, q_start, q_head0, offset)
                if tok < q_len:
                    o_chunk = cute.make_rmem_tensor_like(tQsQ[None, m, 0])
                    cute.autovec_copy(tQsQ[None, m, 0], o_chunk)
                    cute.autovec_copy(o_chunk, self._gmem_at(mO, address, o_chunk))

    @cute.jit
    def _rescale_o(self, acc_O, row_scale):
        """The running O times each row's softmax correction (``row_scale``), in place; with
        ``rescale_threshold``, only when some row of the warp has a correction other than 1."""
        if const_expr(self.rescale_threshold > 0.0):
            moved = row_scale[0] != 1.0
            for i in cutlass.range_constexpr(1, cute.size(row_scale)):
                moved = moved or row_scale[i] != 1.0
            if cute.arch.vote_any_sync(moved):
                self._scale_rows(acc_O, row_scale)
        else:
            self._scale_rows(acc_O, row_scale)

    @cute.jit
    def _scale_rows(self, acc_O, row_scale):
        """Each row of the accumulator ``acc_O`` times its ``row_scale``, in place."""
        acc_O_mn = cute.make_tensor(acc_O.iterator, _acc_mn_layout(acc_O.layout))
        for i in cutlass.range_constexpr(cute.size(acc_O_mn, mode=[0])):
            for j in cutlass.range_constexpr(cute.size(acc_O_mn, mode=[1])):
                acc_O_mn[i, j] = acc_O_mn[i, j] * row_scale[i]

    @cute.jit
    def _release(self, pipe, state):
        """Hand a stage back to the producer: every consumer thread arrives on its empty barrier,
        or (``release_per_warp``) one elected lane per warp after the warp is done with it."""
        if const_expr(self.release_per_warp):
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                pipe.consumer_release(state)
        else:
            pipe.consumer_release(state)

    @cute.jit
    def _wait_tile(self, pipe, state, n, kv_len, page_size):
        """Wait for the stage of key tile ``n`` (K or V); the proxy fence orders the producer's
        cp.async writes (generic proxy) before this warpgroup's wgmma reads of them (async proxy).
        With ``fence_gathered_only`` a stage :meth:`_load_kv` loaded by TMA is not fenced."""
        pipe.consumer_wait(state)
        if const_expr(self.consumer_fence):
            if const_expr(self.fence_gathered_only and self.tma_kv):
                if not self._tma_tile(n, kv_len, page_size):
                    cute.arch.fence_view_async_shared()
            else:
                cute.arch.fence_view_async_shared()

    @cute.jit
    def _request_rows(self, mCuSeqlensQ, req, num_tokens):
        """Request ``req``'s packed rows ``[q_start, q_end)``, clamped into ``[0, num_tokens]``
        as inkling_ops/metadata.py says (no change when the metadata is valid)."""
        q_start = cutlass.min(cutlass.max(mCuSeqlensQ[req], 0), num_tokens)
        q_end = cutlass.min(cutlass.max(mCuSeqlensQ[req + 1], q_start), num_tokens)
        return q_start, q_end

    @cute.jit
    def _find_tile(self, tile, mCuSeqlensQ, num_reqs, num_tokens):
        """``compact_grid``: the (M tile from the request's end, request) of linear block ``tile``,
        with every request's tiles in order; past the last tile, an M tile no request has (the
        block exits). The request lengths are clamped as the kernel clamps them.

        Each warp scans 32 requests a step: lane ``l`` takes request ``32 c + l`` of step ``c``, an
        inclusive prefix sum over the lanes (five shuffles) gives each request's first M tile, and
        a warp max finds the request that holds ``tile`` (at most one does: the requests' tile
        ranges do not overlap). Why not one request a step: meta/TUNING.md, "warp_scan"."""
        tile_m, G = self.tile_m, self.group
        lane = cute.arch.lane_idx()
        first = Int32(0)
        found_req = Int32(0)
        found_rev = Int32(1 << 30)
        for c in cutlass.range((num_reqs + 31) // 32, unroll=1):
            r = c * 32 + lane
            tiles = Int32(0)
            if r < num_reqs:
                q_start, q_end = self._request_rows(mCuSeqlensQ, r, num_tokens)
                tiles = ((q_end - q_start) * G + tile_m - 1) // tile_m
            upto = tiles  # the tiles of requests 32 c .. r
            for k in cutlass.range_constexpr(5):
                below = cute.arch.shuffle_sync_up(upto, 1 << k)
                upto = upto + cutlass.select_(lane >= (1 << k), below, Int32(0))
            start = first + upto - tiles
            hit = tile >= start and tile < start + tiles
            hit_req = cute.arch.warp_redux_sync(cutlass.select_(hit, r, Int32(-1)), "max")
            hit_rev = cute.arch.warp_redux_sync(cutlass.select_(hit, tile - start, Int32(-1)), "max")
            found_req = cutlass.select_(hit_req >= 0, hit_req, found_req)
            found_rev = cutlass.select_(hit_req >= 0, hit_rev, found_rev)
            first = first + cute.arch.shuffle_sync(upto, 31)
        # block-uniform, as the block indices they replace (so they stay in uniform registers)
        return cute.arch.make_warp_uniform(found_rev), cute.arch.make_warp_uniform(found_req)

    @cute.jit
    def _sched_wait(self, wg_idx):
        """Ping-pong: wait for this warpgroup's turn to issue GEMMs."""
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=BAR_SCHED + wg_idx, number_of_threads=self.num_mma_threads)

    @cute.jit
    def _sched_signal(self, wg_idx, more: cutlass.Constexpr):
        """Ping-pong: hand the turn to the other warpgroup. The second warpgroup's last turn is not
        handed back (the first has no GEMM left to wait for), so every barrier completes."""
        if const_expr(self.pingpong):
            if const_expr(more):
                cute.arch.barrier_arrive(barrier_id=BAR_SCHED + 1 - wg_idx, number_of_threads=self.num_mma_threads)
            else:
                if wg_idx == 0:
                    cute.arch.barrier_arrive(barrier_id=BAR_SCHED + 1, number_of_threads=self.num_mma_threads)

    @cute.jit
    def _scores(self, acc_S, row_max, row_sum, row_scale, row_qabs, tScS_mn, sB, pipe_b, bias_use, n, num_band, plain_lo,
                plain_hi, bias_lo, bias_hi, rel_extent, window, kv_len, scale_log2, b_half):  # fmt: skip
        """Scores of key tile ``n`` to probabilities, in place: plain tiles scale only; band tiles
        mask and add the staged bias (waiting for it when the tile stages any: ``bias_use`` is its
        index among the walk's band tiles, ``num_band`` or more when it stages none)."""
        acc_S_mn = cute.make_tensor(acc_S.iterator, _acc_mn_layout(acc_S.layout))
        is_plain = n >= plain_lo and n < plain_hi
        if const_expr(self.debug_all_plain):
            self._softmax_step(acc_S_mn, row_max, row_sum, row_scale, scale_log2)
        elif is_plain:
            self._softmax_step(acc_S_mn, row_max, row_sum, row_scale, scale_log2)
        elif const_expr(self.band_split):
            # natural units: S * softmax_scale + bias; the softmax's exp2 multiply-add applies log2(e)
            scale = scale_log2 * (1.0 / LOG2_E)
            if n >= bias_lo and n < bias_hi:
                # debug_acc_bias: nothing here (the bias came with the GEMM's accumulator; the
                # softmax's factor then stands for the scale's multiply, a wrong answer at that cost)
                if const_expr(not self.debug_acc_bias):
                    self._band_scores(acc_S_mn, row_qabs, tScS_mn, sB, pipe_b, bias_use, n, num_band, rel_extent,
                                      window, kv_len, scale, b_half, False, False)  # fmt: skip
            else:
                self._band_scores(acc_S_mn, row_qabs, tScS_mn, sB, pipe_b, bias_use, n, num_band, rel_extent, window,
                                  kv_len, scale, b_half, True, False, self.debug_acc_bias in ("band", "band_noload"))  # fmt: skip
            self._softmax_step(acc_S_mn, row_max, row_sum, row_scale, Float32(LOG2_E))
        else:
            # every band tile masked, in log2 units
            self._band_scores(acc_S_mn, row_qabs, tScS_mn, sB, pipe_b, bias_use, n, num_band, rel_extent, window, kv_len,
                              scale_log2, b_half, True, True)  # fmt: skip
            self._softmax_step(acc_S_mn, row_max, row_sum, row_scale, Float32(1.0))

    @cute.jit
    def _band_scores(self, acc_S_mn, row_qabs, tScS_mn, sB, pipe_b, bias_use, n, num_band, rel_extent, window, kv_len,
                     scale, b_half, masked: cutlass.Constexpr, log2_units: cutlass.Constexpr,
                     no_bias: cutlass.Constexpr = False):  # fmt: skip
        """The scores of band tile ``n`` (bias use ``bias_use``, as :meth:`_scores` says), in place:
        ``S * scale + bias`` (in natural units; with ``log2_units``, ``scale`` is
        ``softmax_scale * log2(e)`` and the bias is multiplied by log2(e) too), with, when
        ``masked``, the bias selected away at ``d >= E`` and the invisible elements set to -inf.
        Unmasked tiles (``band_split``: every element visible, every ``0 <= d < E``) are in the
        band by construction and always wait for their bias; a masked tile waits when its bias use
        is below ``num_band``."""
        tile_n = self.tile_n
        in_band = bias_use < num_band
        if const_expr(not masked):
            in_band = True
        if const_expr(no_bias):
            # debug_acc_bias: the bias came with the accumulator
            in_band = False
        b_state = self._bias_state(bias_use, b_half)
        if in_band:
            pipe_b.consumer_wait(b_state)
        n0 = n * tile_n
        for i in cutlass.range_constexpr(cute.size(tScS_mn, mode=[0])):
            qa = row_qabs[i]
            r = tScS_mn[i, 0][0]
            # the token whose slice start the row's box took (bias_box_rows: the box's first)
            q_box = qa
            if const_expr(self.box_tokens > 1):
                q_box = qa - (r // self.group) % self.box_tokens
            # element c's distance qa - n0 - c, from the row's slice start (d0)
            base = qa - n0 - self._slice_start(q_box, n0)
            if const_expr(masked and self.lean_mask and not no_bias):
                # outside the band the row of zeros: nothing was staged for this tile
                r = cutlass.select_(in_band, r, Int32(self.zero_row))
            cols = cute.size(tScS_mn, mode=[1])
            paired = self.odd_rows_paired and i == 0 and not no_bias
            if const_expr(paired):
                # odd_rows_paired: q_abs is odd, so base is odd and the elements of columns c and
                # c + 1 (c even: base - c and the one below it) are one aligned 32-bit word
                words = cute.make_rmem_tensor((2, cols // 2), self.dtype)
                for jj in cutlass.range_constexpr(cols // 2):
                    lo = r * self.bias_width + base - tScS_mn[0, 2 * jj][1] - 1
                    ptr = cute.make_ptr(self.dtype, (sB.iterator + lo).toint(), cute.AddressSpace.smem, assumed_align=4)
                    cute.autovec_copy(cute.make_tensor(ptr, cute.make_layout(2)), words[None, jj])
            for j in cutlass.range_constexpr(cols):
                c = tScS_mn[0, j][1]
                if const_expr(no_bias):
                    bias = Float32(0.0)
                elif const_expr(paired):
                    bias = words[1 - j % 2, j // 2].to(Float32)  # column c: the word's upper half
                else:
                    bias = sB[r, base - c].to(Float32)
                if const_expr(log2_units):
                    bias = bias * LOG2_E
                if const_expr(masked):
                    d = qa - n0 - c
                    if const_expr(self.lean_mask):
                        s = acc_S_mn[i, j] * scale + bias
                    else:
                        s = acc_S_mn[i, j] * scale + cutlass.select_(d < rel_extent, bias, Float32(0.0))
                    visible = d >= 0 and d <= window
                    if const_expr(self.kv_len_mask):
                        visible = visible and n0 + c < kv_len
                    if const_expr(self.debug_no_masks):
                        acc_S_mn[i, j] = s
                    else:
                        acc_S_mn[i, j] = s if visible else -Float32.inf
                else:
                    acc_S_mn[i, j] = acc_S_mn[i, j] * scale + bias
        if in_band:
            self._release(pipe_b, b_state)

    def _half_count(self, count: int, page_size):
        """The arrivals on one bias barrier of ``bias_per_wg``, where ``count`` arrive on the one
        buffer's: half of them (with ``"tile_pages"``, only when a page is one tile)."""
        if self.bias_per_wg == "tile_pages":
            return cutlass.select_(page_size == self.tile_n, Int32(count // 2), Int32(count))
        return count // 2

    @cute.jit
    def _bias_half(self, half, page_size):
        """The bias barrier pair of the rows of consumer warpgroup ``half``: its own with
        ``bias_per_wg`` (with ``"tile_pages"``, only when a page is one tile), else the one buffer's."""
        if const_expr(self.bias_per_wg == "tile_pages"):
            half = cutlass.select_(page_size == self.tile_n, half, Int32(0))
        return half

    def _bias_state(self, bias_use, b_half):
        """The consumers' pipeline position of the bias of the band tile with use ``bias_use`` in
        half ``b_half`` (``bias_per_wg``; else the one buffer)."""
        if const_expr(self.bias_per_wg):
            return _state(2, bias_use, b_half, bias_use % 2)
        return _state(1, bias_use, 0, bias_use % 2)

    @cute.jit
    def _to_operand(self, acc_S, rP):
        """P = the probabilities in ``acc_S``, converted into the A-operand registers of O += P V."""
        rP_flat = cute.make_tensor(rP.iterator, cute.make_layout(cute.size(rP)))
        acc_flat = cute.make_tensor(acc_S.iterator, cute.make_layout(cute.size(acc_S)))
        rP_flat.store(acc_flat.load().to(self.dtype))

    @cute.jit
    def _gmem_at(self, mX: cute.Tensor, address, like: cute.Tensor) -> cute.Tensor:
        """The 16-byte chunk of ``mX``'s memory at byte ``address``, laid out as ``like``."""
        ptr = cute.make_ptr(mX.element_type, address, cute.AddressSpace.gmem, assumed_align=16)
        return cute.make_tensor(ptr, like.layout)

    def _token(self, row, offset):
        """The request's token of packed row ``row`` (counted from the request's first): ``row // G``,
        with ``odd_rows_paired`` the two tokens of each pair swapped when ``offset`` is even (the
        M tile starts at an even token, 16 a tile at ``G`` 8), so the first of each 16 rows has
        an odd ``q_abs = offset + token``. Integer work only, so the tests call it with ints."""
        tok = row // self.group
        if const_expr(self.odd_rows_paired):
            tok = tok ^ ((offset + 1) & 1)
        return tok

    @cute.jit
    def _chunk_at(self, mX: cute.Tensor, tQcQ, m: cutlass.Constexpr, m_block, q_start, q_head0, offset):
        """``(token, byte address)`` of this thread's ``m``-th 16-byte chunk of the (tokens, heads,
        head_dim) tensor ``mX`` (Q's gather, O's store; ``tQcQ``: the chunks' tile coordinates).
        The address is computed whether or not the token is the request's; only the caller's
        access is guarded by ``token < q_len``."""
        row = m_block * self.tile_m + tQcQ[0, m, 0][0]
        tok = self._token(row, offset)
        address = (mX.iterator + cute.crd2idx((q_start + tok, q_head0 + row % self.group, tQcQ[0, m, 0][1]),
                                              mX.layout)).toint()  # fmt: skip
        return tok, address

    @cute.jit
    def _acc_bias(self, acc, sB, pipe_b, bias_use, n, num_band, bias_lo, bias_hi, b_half, tidx):
        """``debug_acc_bias``: whether key tile ``n`` (bias use ``bias_use``) starts its QK GEMM from
        loaded values (always False without the option); if so, this thread's share of them is in
        ``acc``: 16 vectors of 4 float32 from the bias buffer's first 32 KB (thread ``t`` of the
        warpgroup reads vector ``k`` at float ``(128 k + t) 4``), with the tile's bias barrier
        waited for and released around the loads."""
        biased = False
        if const_expr(self.debug_acc_bias == "unmasked"):
            # (plain tiles lie in [bias_lo, bias_hi) too: only the first num_band stage a bias)
            biased = bias_use < num_band and n >= bias_lo and n < bias_hi
        elif const_expr(self.debug_acc_bias in ("band", "band_noload")):
            biased = bias_use < num_band
        if const_expr(self.debug_acc_bias != ""):
            if biased:
                b_state = self._bias_state(bias_use, b_half)
                pipe_b.consumer_wait(b_state)
                if const_expr(self.debug_acc_bias != "band_noload"):
                    vectors = cute.size(acc) // 4
                    address = sB.iterator.toint() + (tidx % 128) * 16
                    src = cute.make_tensor(cute.make_ptr(Float32, address, cute.AddressSpace.smem, assumed_align=16),
                                           cute.make_layout((4, vectors), stride=(1, 512)))  # fmt: skip
                    dst = cute.make_tensor(acc.iterator, cute.make_layout((4, vectors), stride=(1, 4)))
                    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), Float32, num_bits_per_copy=128)
                    cute.copy(atom, src, dst)
                self._release(pipe_b, b_state)
        if const_expr(self.debug_acc_bias == "band_noload"):
            biased = False  # the wait and the release alone; the GEMM starts from zero
        return biased

    @cute.jit
    def _gemm(self, tiled_mma, acc, tA, tB, zero_init: cutlass.Constexpr, keep=None):
        """acc (+)= A B over the K blocks as one warpgroup MMA batch, committed, not waited for;
        with ``keep`` (a runtime flag) the first K block accumulates onto ``acc`` where it is true."""
        warpgroup.fence()
        atom = cute.make_mma_atom(tiled_mma.op)
        if const_expr(keep is None):
            atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
        else:
            atom.set(warpgroup.Field.ACCUMULATE, keep)
        for k in cutlass.range_constexpr(cute.size(tA.shape[2])):
            cute.gemm(atom, acc, tA[None, None, k], tB[None, None, k], acc)
            atom.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()

    @cute.jit
    def _softmax_step(self, s_mn, row_max, row_sum, row_scale, scale):
        """Online softmax over one tile of scores ``s_mn`` (rows, cols), in place (scores become
        probabilities); ``scale`` turns a score into log2 units (1 when it already is). The factor
        the running O must be multiplied by goes to ``row_scale``."""
        cols = cute.size(s_mn, mode=[1])
        for i in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            tile_max = s_mn[i, 0]
            for j in cutlass.range_constexpr(1, cols):
                tile_max = cute.arch.fmax(tile_max, s_mn[i, j])
            tile_max = cute.arch.warp_reduction_max(tile_max, threads_in_group=4)
            new_max = cute.arch.fmax(row_max[i], tile_max * scale)
            moved = True
            if const_expr(self.rescale_threshold > 0.0):
                # keep the offset unless the tile passes it by more than the threshold (a row with
                # nothing visible yet moves on its first finite maximum: inf > threshold)
                moved = new_max - row_max[i] > self.rescale_threshold
                new_max = cutlass.select_(moved, new_max, row_max[i])
            # a row with nothing visible yet keeps offset 0 (exp2(-inf) = 0, no NaN)
            safe_max = new_max
            if new_max == -Float32.inf:
                safe_max = Float32(0.0)
            correction = cute.math.exp2(row_max[i] - safe_max, fastmath=True)
            if const_expr(self.rescale_threshold > 0.0):
                correction = cutlass.select_(moved, correction, Float32(1.0))
            row_max[i] = new_max
            partial = Float32(0.0)
            for j in cutlass.range_constexpr(cols):
                p = cute.math.exp2(s_mn[i, j] * scale - safe_max, fastmath=True)
                s_mn[i, j] = p
                partial += p
            row_sum[i] = row_sum[i] * correction + partial
            row_scale[i] = correction


def compile_fwd(config: CuteFwdConfig, *, options: str = "--enable-tvm-ffi", **variant):
    """Compile the kernel of ``config`` for ``CUTE_DSL_ARCH`` (set it, e.g. to ``sm_90a``, on a
    machine without that GPU) from fake tensors: no GPU and no tensors needed. Returns the DSL's
    compiled function (with TVM-FFI: callable with torch tensors, on torch's current stream).

    Call signature of the result: ``(q, key_cache, value_cache, out, block_table, cache_seqlens,
    cu_seqlens_q, rel_logits, softmax_scale: float, window: int, max_seqlen_q: int)``; ``window``:
    keys at distance ``d <= window`` are visible (a huge value, e.g. ``2**30``, for no window).
    ``variant``: keyword arguments of :class:`RelAttnFwdSm90` over :func:`schedule` (schedule
    experiments; the backend uses :func:`schedule` as it is); one that turns ``bias_tma`` off
    drops the schedule's ``bias_box_rows`` with it (:func:`_without_moot`).
    """
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    dtype = _cutlass_dtype(config.dtype)
    D = config.head_dim

    def sym(div=1, wide=False):
        return cute.sym_int64(divisibility=div) if wide else cute.sym_int32(divisibility=div)

    tokens, heads, kv_heads, blocks, reqs = sym(), sym(), sym(), sym(), sym()
    q = make_fake_tensor(dtype, (tokens, heads, D), (sym(8, True), sym(8), 1), assumed_align=16)
    o = make_fake_tensor(dtype, (tokens, heads, D), (sym(8, True), sym(8), 1), assumed_align=16)
    kv_shape = (blocks, sym(), kv_heads, D)
    k = make_fake_tensor(dtype, kv_shape, (sym(8, True), sym(8, True), sym(8), 1), assumed_align=16)
    v = make_fake_tensor(dtype, kv_shape, (sym(8, True), sym(8, True), sym(8), 1), assumed_align=16)
    table = make_fake_tensor(Int32, (reqs, sym()), (sym(), 1), assumed_align=4)
    seqlens = make_fake_tensor(Int32, (reqs,), (1,), assumed_align=4)
    cu = make_fake_tensor(Int32, (sym(),), (1,), assumed_align=4)
    rel = make_fake_tensor(dtype, (tokens, heads, sym(8)), (sym(8, True), sym(8), 1), assumed_align=16)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    kernel = RelAttnFwdSm90(config, **_without_moot({**schedule(config), **variant}, config, keep=variant))
    return cute.compile(
        kernel, q, k, v, o, table, seqlens, cu, rel, Float32(1.0), Int32(-1), Int32(1), stream, options=options
    )


__all__ = ["CuteFwdConfig", "RelAttnFwdSm90", "compile_fwd", "schedule", "LOG2_E", "Int64"]
