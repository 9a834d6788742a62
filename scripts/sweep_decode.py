"""Decode sweep on a GPU: launch configurations x split counts for the decode anchor cases, timed like the tuner (CUDA-graph replay medians, L2 flushed).

    python3 scripts/sweep_decode.py OUT.jsonl [PLAN]     # PLAN: depth (the default), schedule, latency, wave, bias, warps, interior, defer, pinned, splits

Where ``python -m inkling_ops.tuning`` sweeps split counts with the default configuration and then
tries each candidate at the best count, this crosses them. Writes one tuner-style record per point
(append them to meta/tuning_records.jsonl). Used for meta/logs/sweep_decode_*.log.
"""

from __future__ import annotations

import sys

import torch

from inkling_ops.kernels.triton_configs import FwdConfig
from inkling_ops.tuning import DECODE_CASES, _environment, _measure, default_output, tuning_case, write_records


def _cfg(
    block_n: int, num_warps: int, num_stages: int, max_registers: int | None = None, asm: bool = False, **options
) -> FwdConfig:
    return FwdConfig(16, block_n, num_warps, num_stages, asm_gather=asm, max_registers=max_registers, **options)


#: case -> [(configuration, split counts)]. At dae1f7b (meta/logs/sweep_decode_dae1f7b.log) the
#: plan crossed 2- and 3-stage configurations; Triton 3.6 gives the 16-row decode tile (mma v2)
#: only one K/V buffer at 2 stages (the next tile's copy is issued after the current tile's last
#: use), so this plan adds 4 and 6 stages (3 and 5 buffers, kernel_report) and register caps.
DEPTH_PLAN = {
    "decode_b1_128k": [
        (_cfg(64, 4, 2), [256, 512]),  # the default configuration
        (_cfg(64, 4, 4), [128, 256, 512]),
        (_cfg(32, 4, 4), [256, 512]),
        (_cfg(32, 4, 6), [256, 512]),
        (_cfg(64, 4, 3, 168), [256, 512]),
        (_cfg(64, 4, 4, 128), [256, 512]),
        (_cfg(32, 4, 4, 128), [256, 512]),
        (_cfg(64, 8, 4), [128, 256]),
        (_cfg(64, 4, 4, asm=True), [256]),
    ],
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [1, 2]),  # the default configuration
        (_cfg(64, 4, 4), [1, 2, 4]),
        (_cfg(32, 4, 4), [2, 4]),
        (_cfg(32, 4, 6), [1, 2, 4]),
        (_cfg(64, 4, 3, 168), [2]),
        (_cfg(64, 4, 4, 128), [2, 4]),
        (_cfg(64, 4, 4, asm=True), [2]),
    ],
    "decode_b64_8k": [
        (_cfg(64, 4, 2), [4]),  # the default configuration
        (_cfg(64, 4, 4), [4, 8]),
        (_cfg(32, 4, 4), [4, 8]),
        (_cfg(32, 4, 6), [4]),
        (_cfg(64, 4, 4, 128), [4]),
        (_cfg(64, 4, 4, asm=True), [4]),
    ],
}


#: Tile schedules: strided splits (split s of S takes tiles s, s + S, ...: the bias band, whose
#: tiles cost more, is shared out instead of falling to the last splits) and K/V loaded one tile
#: ahead into registers at one stage (Triton's pipelining off), each crossed with split counts.
SCHEDULE_PLAN = {
    "decode_b1_128k": [
        (_cfg(64, 4, 2), [256, 512]),  # the default configuration
        (_cfg(64, 4, 2, split_strided=True), [256, 512]),
        (_cfg(64, 4, 1, kv_prefetch=True), [256, 512]),
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True), [256, 512]),
        (_cfg(64, 4, 1, 168, kv_prefetch=True, split_strided=True), [256, 512]),  # three programs per SM
        (_cfg(128, 4, 2, split_strided=True), [256]),
    ],
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [1, 2]),  # the default configuration
        (_cfg(64, 4, 2, split_strided=True), [2, 4]),
        (_cfg(64, 4, 1, kv_prefetch=True), [1, 2, 4]),
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True), [2, 4]),
    ],
    "decode_b64_8k": [
        (_cfg(64, 4, 2), [4, 8]),  # the default configuration
        (_cfg(64, 4, 2, split_strided=True), [4, 8]),
        (_cfg(64, 4, 1, kv_prefetch=True), [4, 8]),
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True), [4, 8]),
    ],
}
#: After the combine stopped waiting on cu_seqlens_q before its loads: the schedules that the
#: "schedule" plan found 2-4% faster, with and without the combine as a programmatic dependent
#: launch (pdl), and the sliding case unsplit (no combine at all). Run it twice to see the noise.
_SP = dict(kv_prefetch=True, split_strided=True)
LATENCY_PLAN = {
    "decode_b1_128k": [
        (_cfg(64, 4, 2), [256]),  # the default configuration
        (_cfg(64, 4, 2, pdl=True), [256]),
        (_cfg(64, 4, 1, **_SP), [256]),
        (_cfg(64, 4, 1, pdl=True, **_SP), [256]),
        (_cfg(128, 4, 2, split_strided=True), [256]),
        (_cfg(128, 4, 2, split_strided=True, pdl=True), [256]),
    ],
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [1, 2]),  # the default configuration
        (_cfg(64, 4, 2, pdl=True), [2]),
        (_cfg(64, 4, 1, kv_prefetch=True, pdl=True), [2]),
        (_cfg(128, 4, 2), [1]),
    ],
    "decode_b64_8k": [
        (_cfg(64, 4, 2), [4, 8]),  # the default configuration
        (_cfg(64, 4, 1, **_SP), [4, 8]),
        (_cfg(64, 4, 1, pdl=True, **_SP), [4]),
    ],
}
#: The sliding decode is a chain of ~2 us per tile (meta/logs/probe_sliding_decode_*.log: one
#: 64-key tile 9.6 us, two 11.9, four 16.1, eight 25.5 unsplit), yet 4 splits measured slower than
#: 2: at 168 registers three programs fit an SM, so 512 programs (64 requests x 2 KV heads x 4)
#: take two waves. Register caps (and fewer stages: less shared memory) let 4-8 splits of one or
#: two tiles each run in one wave.
WAVE_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [2, 4]),  # the sliding default up to 9d7a5c1
        (_cfg(64, 4, 2, pdl=True), [2, 4]),
        (_cfg(64, 4, 2, 128), [4, 8]),  # four programs of 4 warps per SM
        (_cfg(64, 4, 2, 128, pdl=True), [4, 8]),
        (_cfg(64, 4, 2, 96), [4, 8]),  # five
        (_cfg(64, 4, 1, 128), [4, 8]),  # no pipelining: one K/V buffer
        (_cfg(64, 2, 2), [4, 8]),  # 2 warps
        (_cfg(64, 2, 2, 128), [4, 8]),
        (_cfg(32, 4, 2, 96), [4, 8, 16]),
        (_cfg(32, 2, 2, 128), [8, 16]),
    ],
}
#: ncu's warp-stall sampling of the sliding decode (meta/logs/ncu_decode_local_p16_s2_stalls_*)
#: puts 30% of all samples on one instruction: the first use of the tile's bias gather, issued at
#: the top of the same tile. The bias a tile ahead, gathered with tl.load (converted to the MMA
#: layout through shared memory) or with inline PTX (lands in the MMA layout).
BIAS_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [1, 2]),  # the sliding default up to 9d7a5c1
        (_cfg(64, 4, 2, bias_ahead=True), [1, 2]),
        (_cfg(64, 4, 2, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(64, 4, 2, asm=True, bias_ahead=True, pdl=True), [2]),
        (_cfg(64, 4, 2, asm=True), [2]),
        (_cfg(128, 4, 2, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(32, 4, 2, asm=True, bias_ahead=True), [2, 4]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True), [1, 2]),
    ],
}
#: With the bias a tile ahead (inline PTX) and three stages, the unsplit sliding decode took 21.9 /
#: 21.6 us against 22.9 / 23.4 for the default (meta/logs/sweep_decode_bias_*.log). What is left
#: per tile is mostly the chain of dependent instructions of ~440 per warp (ncu), issued by two
#: warps per scheduler: eight warps split each tile's columns finer (fewer instructions per warp)
#: and give the schedulers twice the warps.
WARPS_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [2]),  # the sliding default up to 9d7a5c1
        (_cfg(64, 4, 3, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(64, 4, 4, asm=True, bias_ahead=True), [1]),
        (_cfg(64, 8, 2), [1, 2]),
        (_cfg(64, 8, 2, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(64, 8, 3, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(64, 8, 4, asm=True, bias_ahead=True), [1]),
        (_cfg(128, 8, 2, asm=True, bias_ahead=True), [1, 2]),
        (_cfg(128, 8, 3, asm=True, bias_ahead=True), [1]),
        (_cfg(32, 8, 3, asm=True, bias_ahead=True), [1, 2]),
    ],
}
#: After ab964e1 the sliding decode issues one instruction every ~5 cycles from one warp per
#: scheduler (meta/logs/ncu_decode_local_p16_s1_stalls_ab964e1.txt), so its time follows its
#: instructions per tile. Interior band tiles (every key visible to and within E of the row)
#: skip the window and length masks: offline, 367 against 426 sm_90 instructions per tile at
#: page 16 and 473 against 545 at page 128; every tile of the anchor's window is interior.
INTERIOR_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [2]),  # the default up to 9d7a5c1
        (_cfg(64, 4, 3, asm=True, bias_ahead=True), [1, 2]),  # the default since ab964e1
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, band_interior=True), [1, 2]),
        (_cfg(64, 4, 2, asm=True, bias_ahead=True, band_interior=True), [1, 2]),
        (_cfg(128, 4, 3, asm=True, bias_ahead=True, band_interior=True), [1]),
        (_cfg(64, 8, 3, asm=True, bias_ahead=True, band_interior=True), [1]),
    ],
}
#: After ab964e1 the sliding decode's loop holds 9 barriers per tile (sm_90 SASS): three for
#: each cross-warp row reduction (the max and the sum of each tile's scores; 16-row tiles put
#: the 4 warps on the tile's columns), two around the P conversion, one for the pipeline. The
#: sum can wait until the last tile: per-column partial sums (``deferred_row_sum``) make it 6
#: barriers and 397 instructions instead of 428 per tile. Also 64-row tiles (wgmma, warps on
#: the rows, no cross-warp reduction) at 1118 instructions per tile, for comparison.
DEFER_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 3, asm=True, bias_ahead=True), [1]),  # the default since ab964e1
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, deferred_row_sum=True), [1, 2]),
        (_cfg(64, 4, 2, asm=True, bias_ahead=True, deferred_row_sum=True), [1]),
        (_cfg(64, 4, 4, asm=True, bias_ahead=True, deferred_row_sum=True), [1]),
        (_cfg(128, 4, 3, asm=True, bias_ahead=True, deferred_row_sum=True), [1]),
        (_cfg(64, 8, 3, asm=True, bias_ahead=True, deferred_row_sum=True), [1]),
        (FwdConfig(64, 64, 4, 3, bias_ahead=True, asm_gather=True), [1]),
    ],
    "decode_b64_8k": [
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True), [4]),  # the default
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True, deferred_row_sum=True), [4, 8]),
    ],
    "decode_b1_128k": [
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True), [256]),  # the default
        (_cfg(64, 4, 1, kv_prefetch=True, split_strided=True, deferred_row_sum=True), [256]),
    ],
}
#: With the bias gathered by a plain ``ld.global`` instead of ``ld.global.nc``, ptxas keeps the
#: gathers at the top of the iteration (it does not move them across the loop's barriers) in
#: every variant, where with ``.nc`` it sank them to the end in the per-column-sum and one-loop
#: variants. The variants that had fewer instructions but measured slower, again.
PINNED_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 3, asm=True, bias_ahead=True), [1]),  # the default since ab964e1
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, deferred_row_sum=True), [1]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True), [1]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, band_interior=True), [1]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, band_interior=True, deferred_row_sum=True), [1]),
    ],
}
#: Plan ``prefetch`` (an L2 prefetch of the whole window before the first tile,
#: ``FwdConfig.l2_prefetch``) ran at de91f1a, the one commit that has that option; it was slower
#: in every variant (meta/logs/sweep_decode_prefetch_f2e76e2.log) and was removed after it.
#: 6ca82c4's full run put the unsplit sliding decode at 20.5 / 19.6 us, 0.54x / 0.52x the
#: score_mod time. Its split counts were last swept (9d7a5c1) with the bias gathered at its tile
#: and two stages; this crosses the current configuration (one masked loop, the bias a tile
#: ahead through a plain ld.global, three stages) with split counts, strided splits, the
#: combine as a programmatic dependent launch, and register caps that fit more programs per SM.
SPLITS_PLAN = {
    "decode_b64_8k_local": [
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True), [1, 2, 4]),  # the default
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True, split_strided=True), [2, 4]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True, pdl=True), [2, 4]),
        (_cfg(64, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True, split_strided=True, pdl=True), [2, 4]),
        (_cfg(64, 4, 2, asm=True, bias_ahead=True, single_masked_loop=True, pdl=True), [2, 4]),
        (_cfg(64, 4, 3, 168, asm=True, bias_ahead=True, single_masked_loop=True, pdl=True), [2, 4]),
        (_cfg(32, 4, 3, asm=True, bias_ahead=True, single_masked_loop=True, pdl=True), [2, 4]),
    ],
}
PLANS = {
    "depth": DEPTH_PLAN, "schedule": SCHEDULE_PLAN, "latency": LATENCY_PLAN, "wave": WAVE_PLAN, "bias": BIAS_PLAN,
    "warps": WARPS_PLAN, "interior": INTERIOR_PLAN, "defer": DEFER_PLAN,
    "pinned": PINNED_PLAN, "splits": SPLITS_PLAN,
}  # fmt: skip


def main(out_path: str, plan_name: str = "depth") -> None:
    if plan_name not in PLANS:
        raise SystemExit(f"unknown plan {plan_name!r}; plans: {', '.join(PLANS)}")
    if not torch.cuda.is_available():
        raise SystemExit("sweep_decode needs a CUDA device")
    env = _environment()
    records = []
    for name, items in PLANS[plan_name].items():
        for page in (16, 128):
            case = tuning_case(DECODE_CASES[name], page)
            expected = default_output(case)
            for config, split_counts in items:
                for splits in split_counts:
                    records.append(_measure(case, expected, name, "decode", page, splits, config, True, env))
    write_records(out_path, records, append=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
