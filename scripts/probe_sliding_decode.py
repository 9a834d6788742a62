"""Where the sliding-window decode's time goes: the same decode timed over window sizes, batch
sizes and split counts (CUDA-graph replay, L2 flushed, as the tuner times decode).

    python3 scripts/probe_sliding_decode.py [OUT.jsonl] [windows|batches]

The anchor case is 64 requests x 8K keys, head_dim 128, E 512, window 511 (8 query heads over 2
KV heads at page 16, over 1 at page 128). If the time grows with the window (keys streamed), the
kernel's inner loop is what to make faster; if it stays put as the window shrinks to one tile,
a fixed cost is (launch, the chain of dependent loads before the first K/V byte, the epilogue,
the combine). Also a global decode over 512 keys with E 1 (seven plain tiles of eight), to
price the bias. Used for meta/logs/probe_sliding_decode_*.log.

``batches``: the sliding decode's configuration up to 9d7a5c1 (two stages, the bias gathered at
its tile) against the bias one tile ahead (inline PTX) with three stages, over batch sizes and
split counts at window 511, to choose the split rule for it. (At 9d7a5c1 the first was the
default, which this plan then named None.)
"""

from __future__ import annotations

import sys

import torch

from inkling_ops.kernels.triton_configs import FwdConfig
from inkling_ops.tuning import _environment, _measure, default_output, tuning_case, write_records


def _case(batch: int, window: int, page: int, kv_len: int = 8192, rel_extent: int = 512) -> dict:
    return dict(
        q_lens=[1] * batch, kv_lens=[kv_len] * batch, num_heads=8, num_kv_heads=2 if page == 16 else 1,
        rel_extent=rel_extent, window_left=window,
    )  # fmt: skip


Point = tuple[str, dict, int, list[int], "FwdConfig | None"]  # label, make_case kwargs, page, splits, config


def plan_windows() -> list[Point]:
    """Every point with the case's default launch configuration (None)."""
    points = []
    for page in (16, 128):
        for window in (15, 63, 127, 255, 511):
            points.append((f"b64 w{window}", _case(64, window, page), page, [1, 2] if window >= 127 else [1], None))
        for batch in (8, 16, 32, 128):
            points.append((f"b{batch} w511", _case(batch, 511, page), page, [1, 2], None))
        # 512 keys, no window, a bias band of one key: seven plain tiles of eight.
        points.append(("b64 kv512 global E1", _case(64, -1, page, kv_len=512, rel_extent=1), page, [1, 2], None))
    return points


#: the default for windows inside E up to 9d7a5c1, and the candidate that replaced it at ab964e1
#: (meta/logs/sweep_decode_bias_*.log)
TWO_STAGES = FwdConfig(16, 64, 4, 2, asm_gather=False)
BIAS_AHEAD_3 = FwdConfig(16, 64, 4, 3, asm_gather=True, bias_ahead=True)


def plan_batches() -> list[Point]:
    points = []
    for page in (16, 128):
        for batch in (4, 8, 16, 32, 64, 96, 128, 256):
            for config in (TWO_STAGES, BIAS_AHEAD_3):
                points.append((f"b{batch} w511", _case(batch, 511, page), page, [1, 2, 4], config))
    return points


PLANS = {"windows": plan_windows, "batches": plan_batches}


def main(out_path: str | None = None, which: str = "windows") -> None:
    if which not in PLANS:
        raise SystemExit(f"unknown plan {which!r}; plans: {', '.join(PLANS)}")
    if not torch.cuda.is_available():
        raise SystemExit("probe_sliding_decode needs a CUDA device")
    env = _environment()
    records = []
    for label, kwargs, page, split_counts, config in PLANS[which]():
        case = tuning_case(kwargs, page)
        expected = default_output(case)
        config = config or case.triton_config()
        for splits in split_counts:
            rec = _measure(case, expected, label, "decode", page, splits, config, True, env)
            records.append(rec)
    if out_path:
        write_records(out_path, records, append=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
