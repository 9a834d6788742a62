"""Launch configurations of the Triton kernels: a pure function of compile-key quantities.

Tuned on the H200 (see meta/); no tensors or device queries here, so the configuration of every
enumerated compile key is known ahead of time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class FwdConfig:
    """Launch configuration of the forward kernel: tile shape, pipeline depth and the kernel's
    optional code paths. Each flag reaches the kernel as the constexpr of the same name in
    capitals (see :func:`fwd_constexprs`). The measurements behind each default are in
    meta/TUNING.md.

    With ``plain`` set, a prefill call runs in two launches: the plain tiles (no bias, no mask)
    with the ``plain`` configuration, then every other tile with this one. Its tiles must divide
    the plain pass's (``block_n`` divides ``plain.block_n``, ``block_m`` divides ``plain.block_m``).
    """

    #: rows per program: query tokens x padded query heads of one KV head (raised to G_PAD)
    block_m: int
    #: keys per tile
    block_n: int
    num_warps: int
    #: Triton's software pipeline depth for the tile loops (1: not pipelined)
    num_stages: int
    #: the plain pass's configuration of a two-launch prefill (None: one launch)
    plain: "FwdConfig | None" = None
    #: load each masked tile's bias one tile ahead, into loop-carried registers: its latency is
    #: hidden by a whole tile, at the cost of registers
    bias_ahead: bool = False
    #: gather the bias with inline PTX, so it lands in the MMA layout with no shared-memory
    #: round trip (CUDA and 16-bit rel_logits only; the interpreter always uses tl.load). Pays
    #: where the gather is a tile ahead of its use (prefill, the sliding decode); a decode tile
    #: that gathers its own bias waits on it, and there tl.load is faster
    asm_gather: bool = True
    #: cap on registers per thread (ptxas ``.maxnreg``): at 4 warps, 168 lets three programs
    #: share an SM's 64K registers where 255 allows two (None: the compiler's choice)
    max_registers: int | None = None
    #: split-KV: split ``s`` of ``S`` takes every S-th tile from tile ``s`` (instead of one
    #: contiguous run), so the bias band and the diagonal, the costlier tiles, are shared out
    #: among the splits rather than all falling to the last ones
    split_strided: bool = False
    #: load the next tile's K and V into registers while computing this one (the block ids two
    #: tiles ahead, the bias of biased tiles one ahead). Needs ``num_stages=1``, where Triton
    #: does not pipeline the loop itself: at 2 stages it gives the 16-row decode tile only one
    #: K/V buffer, so each tile's load waits for the previous tile's compute
    kv_prefetch: bool = False
    #: on layers whose window lies inside the bias extent (no plain tiles), run the window-edge
    #: and band tiles as one masked loop and compile no plain loop: one loop body and pipeline
    #: prologue instead of three and two, roughly half the kernel's instructions. Same results;
    #: no effect on other layers
    single_masked_loop: bool = False
    #: load K and V with an L2 evict_first policy (``ld.global.L1::evict_first.L2::cache_hint``).
    #: Streamed K/V is read once, so its lines are the first to go when the L2 needs room,
    #: instead of lines the next kernels use, or dirty lines that would be written back first.
    #: Only loads Triton does not turn into ``cp.async`` carry it (Triton 3.6 drops the policy
    #: from the copies of pipelined loops), so it is meant for ``kv_prefetch`` (one stage)
    kv_evict_first: bool = False


#: Calls whose bucketed max_seqlen_q is at most this use the decode configuration (and may split KV).
DECODE_MAX_Q = 16


#: Global prefill runs in one launch (no separate plain pass) when pages hold fewer keys than
#: this: the plain pass's 128-key tiles then span several pages, and one launch of 64-key tiles
#: measured faster at pages 16 and 64. At page 128 one launch is faster only while rows see
#: short contexts, and the compile key does not know the context length (meta/TUNING.md).
TWO_PASS_MIN_PAGE = 128


@functools.lru_cache(maxsize=4096)
def fwd_config(
    *,
    head_dim: int,
    q_per_kv: int,
    max_seqlen_q_bucket: int,
    page_size: int,
    window_left: int = -1,
    rel_extent: int = 0,
) -> FwdConfig:
    """The forward kernel's configuration for one compile key (each choice the fastest of the
    H200 sweeps; meta/TUNING.md has the measurements, its "Kernel cleanup (issue 15)" section
    the figures once quoted here).

    - Decode / speculative verify (bucket <= 16): a program holds every query row of its KV head
      (up to 64 rows) and streams 64-key tiles, the bias gathered with ``tl.load`` at its own
      tile (measured faster there than the inline-PTX gather), except on sliding windows inside
      E (below).
    - With at most 16 rows on a layer with plain tiles (global, or a window wider than E): few
      rows and many keys, so the loop is bound by K/V streaming. One stage with the next tile's
      K/V loaded into registers during this one (``kv_prefetch``), loaded evict_first (read
      once, they should not push out what the next kernels use), and strided splits (the band
      and diagonal tiles shared out among the splits).
    - A sliding window inside E is all band tiles: with at most 16 rows each tile's bias is
      gathered one tile ahead with inline PTX (ncu put a large share of the stalls on the wait
      for a bias gathered at its tile), three stages keep two K/V tiles in flight, and the edge and band tiles run
      as one masked loop. Otherwise (more rows) two stages: Triton's pipeline, one tile in flight.
    - Prefill at head_dim <= 128, global layers (and windows wider than the bias extent), pages
      of at least ``TWO_PASS_MIN_PAGE`` keys: two launches. The plain tiles, most of a long
      prefill, run in 128-row / 128-key / 8-warp programs with three stages; then the
      window-edge, bias-band and diagonal tiles in 64-row / 64-key / 4-warp programs with two
      stages, each tile's bias gathered (inline PTX) one tile ahead.
    - The same layers with smaller pages: one launch of 64-row / 64-key / 4-warp programs with
      three stages (128-key plain tiles would span several pages).
    - Prefill of a sliding layer whose window lies inside the bias extent (every tile is a band
      tile, one launch): 64-row / 32-key / 4-warp programs with two stages, the bias one tile
      ahead, and at most 168 registers per thread, so three programs share an SM; its edge and
      band tiles run as one masked loop.
    - Prefill at head_dim 256: 64-row / 32-key / 4-warp programs with two stages.

    Memoized (the result is immutable): a call costs a dictionary lookup on the hot path.
    """
    g_pad = 1 << max(0, q_per_kv - 1).bit_length()
    if max_seqlen_q_bucket <= DECODE_MAX_Q:
        rows = max_seqlen_q_bucket * g_pad
        block_m = max(min(64, max(16, 1 << max(0, rows - 1).bit_length())), g_pad)
        if block_m == 16 and head_dim <= 128 and not 0 <= window_left < rel_extent:
            # Plain tiles to stream: K/V a tile ahead in registers (loaded evict_first), splits
            # strided over the tiles.
            return FwdConfig(
                block_m=16, block_n=64, num_warps=4, num_stages=1, asm_gather=False, kv_prefetch=True,
                split_strided=True, kv_evict_first=True,
            )  # fmt: skip
        if block_m == 16 and head_dim <= 128:
            # A window inside E: every tile is a band tile. The bias a tile ahead (inline PTX,
            # straight into the MMA layout), two K/V tiles in flight, one masked loop.
            return FwdConfig(
                block_m=16, block_n=64, num_warps=4, num_stages=3, bias_ahead=True, asm_gather=True,
                single_masked_loop=True,
            )  # fmt: skip
        return FwdConfig(
            block_m=block_m, block_n=64 if head_dim <= 128 else 32, num_warps=4, num_stages=2, asm_gather=False,
        )  # fmt: skip
    if head_dim <= 128:
        if 0 <= window_left < rel_extent:
            return FwdConfig(
                block_m=max(64, g_pad), block_n=32, num_warps=4, num_stages=2, bias_ahead=True, max_registers=168,
                single_masked_loop=True,
            )  # fmt: skip
        if page_size < TWO_PASS_MIN_PAGE:
            return FwdConfig(block_m=max(64, g_pad), block_n=64, num_warps=4, num_stages=3)
        plain = FwdConfig(block_m=max(128, g_pad), block_n=128, num_warps=8, num_stages=3)
        return FwdConfig(block_m=max(64, g_pad), block_n=64, num_warps=4, num_stages=2, plain=plain, bias_ahead=True)
    return FwdConfig(block_m=max(64, g_pad), block_n=32, num_warps=4, num_stages=2)


#: A split-KV launch of at most this many splits merges its partial results inside the forward
#: kernel: the last split program of each row block to finish reads every split's partial and
#: writes ``out`` (``MERGE_SPLITS``), so the call is one launch (one fewer launch's host time in
#: eager calls). With more splits that one program reads too much alone, and the combine kernel,
#: wide over rows, heads and slices of the head dimension, is faster on the graph clock
#: (meta/TUNING.md, "The merge in the forward kernel").
MERGE_MAX_SPLITS = 4


def merges_splits(num_splits: int) -> bool:
    """Whether a launch of ``num_splits`` splits merges them in the forward kernel (no combine
    launch): more than one split, at most :data:`MERGE_MAX_SPLITS`, a power of two (the merge
    loads every split's log-sum-exp in one power-of-two-wide block).

    Equivalent Python: ``1 < num_splits <= MERGE_MAX_SPLITS and num_splits & (num_splits - 1) == 0``.
    """
    return 1 < num_splits <= MERGE_MAX_SPLITS and num_splits & (num_splits - 1) == 0


class FwdConstexprs(NamedTuple):
    """The forward kernel's compile-time constants, named and ordered as in its signature
    (``rel_attn_fwd_kernel``'s ``tl.constexpr`` parameters); see :func:`fwd_constexprs`."""

    G: int  # query heads per KV head
    G_PAD: int  # G rounded up to a power of two (rows per token in a program)
    HEAD_DIM: int
    NUM_KV_HEADS: int
    PAGE: int  # keys per KV block
    REL_EXTENT: int  # E: the bias covers distances 0 <= d < E
    WINDOW_LEFT: int  # -1: no window
    NUM_SPLITS: int
    SPLIT_KV: bool  # NUM_SPLITS > 1: partial results into the workspace, then merged
    BLOCK_M: int  # rows per program (at least G_PAD)
    BLOCK_N: int  # keys per tile
    DOT_PRECISION: str  # "ieee" for fp32 inputs, else "tf32" (unused by 16-bit dots)
    PASS: int  # 0: every tile; 1 / 2: the plain / the other tiles of a two-pass prefill
    P1_BLOCK_Q: int  # pass 2: pass 1's tokens per program (1 otherwise)
    P1_BLOCK_N: int  # pass 2: pass 1's keys per tile (1 otherwise)
    BIAS_AHEAD: bool
    ASM_GATHER: bool
    KV_SAME_STRIDES: bool  # K and V pages have the same block and slot strides
    KV_ROW_I32: bool  # every key row of the cache has an int32 index (see triton_fwd)
    KV_SLOT_SHIFT: int  # log2 of the slot stride when KV_ROW_I32 and it is a power of two, else -1
    SPLIT_STRIDED: bool
    KV_PREFETCH: bool
    SINGLE_MASKED_LOOP: bool
    KV_EVICT_FIRST: bool
    MERGE_SPLITS: bool  # split-KV merged by the kernel's last split of each row block (merges_splits)


def slot_shift(slot_stride: int) -> int:
    """``log2(slot_stride)`` when it is a power of two (the kernel's ``KV_SLOT_SHIFT``), else -1.

    Equivalent Python: ``slot_stride.bit_length() - 1 if slot_stride & (slot_stride - 1) == 0 else -1``.
    """
    if slot_stride <= 0 or slot_stride & (slot_stride - 1):
        return -1
    return slot_stride.bit_length() - 1


@functools.lru_cache(maxsize=4096)
def fwd_constexprs(
    config: FwdConfig,
    *,
    group: int,
    head_dim: int,
    num_kv_heads: int,
    page_size: int,
    rel_extent: int,
    window_left: int,
    num_splits: int = 1,
    fwd_pass: int = 0,
    pass1_config: FwdConfig | None = None,
    fp32: bool = False,
    ptx_gather: bool = True,
    kv_same_strides: bool = True,
    kv_row_i32: bool = True,
    kv_slot_stride: int | None = None,
) -> FwdConstexprs:
    """The forward kernel's compile-time constants for ``config`` and one call's layout facts:
    the one mapping from a configuration to a compiled variant, used by the launcher, the
    offline kernel report and ahead-of-time compilation.

    ``group``: query heads per KV head; ``fwd_pass`` / ``pass1_config``: see
    ``launch_rel_attn_fwd``; ``fp32``: fp32 inputs (IEEE dots); ``ptx_gather``: the bias may be
    gathered with inline PTX (a CUDA device and 16-bit rel_logits: ``config.asm_gather`` applies);
    ``kv_same_strides``: K and V have the same block and slot strides; ``kv_row_i32``: every key
    row has an int32 index (``triton_fwd._key_rows_fit_int32``); ``kv_slot_stride``: elements
    between key slots (default ``num_kv_heads * head_dim``, a contiguous cache).

    Raises ValueError for a configuration the kernel cannot run: ``kv_prefetch`` with Triton's
    pipeliner on, a split two-pass launch, or pass-2 tiles that do not divide pass 1's.
    Memoized (pure, immutable result).
    """
    if config.kv_prefetch and config.num_stages != 1:
        raise ValueError(
            f"config has kv_prefetch=True with num_stages={config.num_stages}; expected num_stages=1 (the loop "
            "prefetches K/V itself, and Triton's pipeliner must stay off)"
        )
    split = num_splits > 1
    if split and fwd_pass != 0:
        raise ValueError(f"fwd_pass={fwd_pass} with num_splits={num_splits}: split-KV runs in one pass")
    g_pad = 1 << max(0, group - 1).bit_length()
    block_m = max(config.block_m, g_pad)
    p1_block_q, p1_block_n = 1, 1
    if fwd_pass == 2:
        if pass1_config is None:
            raise ValueError("fwd_pass=2 needs pass1_config, the configuration pass 1 ran with")
        p1_block_q = max(pass1_config.block_m, g_pad) // g_pad
        p1_block_n = pass1_config.block_n
        if p1_block_q % (block_m // g_pad) or p1_block_n % config.block_n:
            raise ValueError(
                f"config's tiles ({block_m // g_pad} tokens, {config.block_n} keys) must divide "
                f"pass1_config's ({p1_block_q} tokens, {p1_block_n} keys) in a two-pass prefill"
            )
    if kv_slot_stride is None:
        kv_slot_stride = num_kv_heads * head_dim
    return FwdConstexprs(
        G=group, G_PAD=g_pad, HEAD_DIM=head_dim, NUM_KV_HEADS=num_kv_heads, PAGE=page_size, REL_EXTENT=rel_extent,
        WINDOW_LEFT=window_left, NUM_SPLITS=num_splits, SPLIT_KV=split, BLOCK_M=block_m, BLOCK_N=config.block_n,
        DOT_PRECISION="ieee" if fp32 else "tf32", PASS=fwd_pass, P1_BLOCK_Q=p1_block_q, P1_BLOCK_N=p1_block_n,
        BIAS_AHEAD=config.bias_ahead, ASM_GATHER=config.asm_gather and ptx_gather, KV_SAME_STRIDES=kv_same_strides,
        KV_ROW_I32=kv_row_i32, KV_SLOT_SHIFT=slot_shift(kv_slot_stride) if kv_row_i32 else -1,
        SPLIT_STRIDED=config.split_strided and split, KV_PREFETCH=config.kv_prefetch,
        SINGLE_MASKED_LOOP=config.single_masked_loop, KV_EVICT_FIRST=config.kv_evict_first,
        MERGE_SPLITS=merges_splits(num_splits),
    )  # fmt: skip
