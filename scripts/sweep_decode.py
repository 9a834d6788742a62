"""Decode sweep on a GPU: launch configurations x split counts for the long and the sliding decode
anchor cases, timed like the tuner (CUDA-graph replay medians, L2 flushed).

    python3 scripts/sweep_decode.py OUT.jsonl

Where ``python -m inkling_ops.tuning`` sweeps split counts with the default configuration and then
tries each candidate at the best count, this crosses them. Writes one tuner-style record per point
(append them to meta/tuning_records.jsonl). Used for meta/logs/sweep_decode_*.log.
"""

from __future__ import annotations

import json
import sys

import torch

from inkling_ops.kernels.triton_configs import FwdConfig
from inkling_ops.testing import make_case
from inkling_ops.tuning import DECODE_CASES, _environment, _measure


def _cfg(block_n: int, num_warps: int, num_stages: int) -> FwdConfig:
    return FwdConfig(16, block_n, num_warps, num_stages, asm_gather=False)


#: case -> [(configuration, split counts)]
PLAN = {
    "decode_b1_128k": [
        (_cfg(64, 4, 2), [256, 512]),  # the default configuration
        (_cfg(128, 4, 2), [128, 256, 512]),
        (_cfg(128, 4, 3), [128, 256]),
        (_cfg(64, 2, 2), [256, 512]),
        (_cfg(128, 8, 2), [256]),
        (_cfg(256, 8, 2), [128, 256]),
        (_cfg(32, 4, 4), [256, 512]),
    ],
    "decode_b64_8k_local": [
        (_cfg(64, 4, 2), [1, 2]),  # the default configuration
        (_cfg(128, 4, 2), [1, 2]),
        (_cfg(32, 4, 3), [2, 4]),
        (_cfg(64, 2, 2), [2]),
        (_cfg(256, 8, 2), [1, 2]),
    ],
}


def main(out_path: str) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("sweep_decode needs a CUDA device")
    env = _environment()
    records = []
    for name, items in PLAN.items():
        for page in (16, 128):
            case = make_case(**DECODE_CASES[name], head_dim=128, page_size=page, dtype=torch.bfloat16, device="cuda", spare_blocks=0)
            expected = torch.zeros_like(case.q)
            case.run_triton(expected, num_splits=1, config=_cfg(64, 4, 2))
            for config, split_counts in items:
                for splits in split_counts:
                    records.append(_measure(case, expected, name, "decode", page, splits, config, True, env))
    with open(out_path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
