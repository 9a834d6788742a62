"""Prefill sweep on a GPU: chosen launch configurations per (case, page size), timed like the tuner
(``triton.testing.do_bench`` medians, L2 flushed), each checked against the default's output.

    python3 scripts/sweep_prefill.py OUT.jsonl [PLAN]     # PLAN: one of PLANS (default "page16")

Where ``python -m inkling_ops.tuning`` times one fixed candidate list on every case and page
size, this times a plan per case and page: here, one-pass configurations at page 16, where
the two-pass default's plain pass is ~30% slower than at page 128 (meta/logs/passes_*.log).
Writes one tuner-style record per point (append them to meta/tuning_records.jsonl). Used for
meta/logs/sweep_prefill_*.log.
"""

from __future__ import annotations

import sys

import torch

from inkling_ops.kernels.triton_configs import FwdConfig
from inkling_ops.tuning import PREFILL_CASES, _environment, _measure, default_output, tuning_case, write_records

_PLAIN = FwdConfig(128, 128, 8, 3)


def _one(block_m: int, block_n: int, num_warps: int, num_stages: int, max_registers: int | None = None) -> FwdConfig:
    """A one-pass configuration (plain tiles in the same launch), the bias gathered one tile ahead."""
    return FwdConfig(block_m, block_n, num_warps, num_stages, bias_ahead=True, max_registers=max_registers)


_ONE_PASS_16 = [
    _one(64, 32, 4, 3),
    _one(64, 32, 4, 4),
    _one(64, 32, 4, 5),
    _one(64, 32, 4, 3, 168),
    _one(64, 32, 4, 2, 168),
    _one(64, 16, 4, 4),
    _one(64, 64, 4, 3),
    # Two passes with 64-key plain tiles (four in flight) and a 32-key band.
    FwdConfig(64, 32, 4, 3, plain=FwdConfig(128, 64, 8, 4), bias_ahead=True),
]

#: plan name -> {(case, page): configurations}; the case's default (fwd_config) is always timed
#: first. "page16" (4cef147) and "followup" (same visit) chose the page-16 one-pass default;
#: "page64" (96b4ca0) the page-64 threshold; "address" checks one pass at every page size;
#: "page128" and "page128_lengths" (0e931bc, ddfb42d, 47287fb) one pass against two at page 128;
#: "band128" (bf68518) the page-128 band pass and sliding prefill's neighbours.
_F = FwdConfig
PLANS = {
    "page16": {
        ("prefill8k_global", 16): _ONE_PASS_16,
        ("chunk2k_on16k_x4", 16): _ONE_PASS_16,
        ("prefill8k_global", 128): [_one(64, 32, 4, 3), _one(64, 32, 4, 3, 168), _one(64, 16, 4, 4)],
        ("prefill8k_local", 16): [_one(64, 32, 4, 3, 168), _one(64, 32, 4, 3), _one(64, 16, 4, 4), _one(64, 32, 4, 4, 168)],
    },
    "followup": {
        ("prefill8k_global", 16): [
            _one(64, 64, 4, 3), _F(64, 64, 4, 3), _one(64, 64, 4, 4), _one(128, 64, 8, 3),
            _F(64, 64, 4, 3, bias_ahead=True, plain=_F(128, 64, 8, 4)), _F(64, 64, 4, 3, bias_ahead=True, plain=_PLAIN),
        ],
        ("prefill8k_global", 128): [_one(64, 64, 4, 3), _F(64, 64, 4, 3, bias_ahead=True, plain=_PLAIN), _F(64, 64, 4, 3),
                                    _F(64, 64, 4, 3, max_registers=240)],
        ("chunk2k_on16k_x4", 16): [_F(64, 64, 4, 3), _one(64, 64, 4, 4)],
        ("chunk2k_on16k_x4", 128): [_F(64, 64, 4, 3)],
        ("prefill32k_global", 16): [_F(64, 64, 4, 3)],
        ("prefill32k_global", 128): [_F(64, 64, 4, 3)],
    },
    "page64": {
        ("prefill8k_global", 64): [_F(64, 64, 4, 3)],
        ("chunk2k_on16k_x4", 64): [_F(64, 64, 4, 3)],
    },
    "address": {
        (case, page): [_F(64, 64, 4, 3), _F(64, 64, 4, 2, plain=_PLAIN, bias_ahead=True)]
        for case in ("prefill8k_global", "chunk2k_on16k_x4", "prefill32k_global")
        for page in (16, 64, 128)
    },
    # After the page-128 address change: one launch against the two.
    "page128": {
        (case, 128): [_F(64, 64, 4, 3)] for case in ("prefill8k_global", "chunk2k_on16k_x4", "prefill32k_global")
    },
    # After ddfb42d took the spills out of the page-128 band pass and sliding prefill: their
    # neighbours again.
    "band128": {
        **{
            (case, 128): [
                _F(64, 64, 4, 3, plain=_PLAIN, bias_ahead=True), _F(64, 64, 4, 2, plain=_PLAIN),
                _F(64, 32, 4, 3, plain=_PLAIN, bias_ahead=True), _F(64, 32, 4, 2, plain=_PLAIN, bias_ahead=True, max_registers=168),
                _F(128, 64, 8, 2, plain=_PLAIN, bias_ahead=True), _F(64, 64, 4, 2, plain=_F(128, 128, 8, 2), bias_ahead=True),
                _F(64, 64, 4, 2, plain=_F(128, 64, 8, 4), bias_ahead=True),
            ]
            for case in ("prefill8k_global", "chunk2k_on16k_x4")
        },
        ("prefill8k_local", 128): [
            _F(64, 32, 4, 3, bias_ahead=True, max_registers=168, single_masked_loop=True),
            _F(64, 32, 4, 2, bias_ahead=True, single_masked_loop=True),
            _F(64, 64, 4, 2, bias_ahead=True, max_registers=168, single_masked_loop=True),
            _F(64, 64, 4, 2, bias_ahead=True, single_masked_loop=True),
        ],
    },
    # Where between 8K (one launch faster) and 32K (two faster) the page-128 crossover lies.
    "page128_lengths": {
        (case, 128): [_F(64, 64, 4, 3)] for case in ("prefill4k_global", "prefill16k_global", "chunk4k_on32k_x2")
    },
}  # fmt: skip


def _global_case(q_len: int, kv_len: int, num_reqs: int = 1) -> dict:
    """``make_case`` arguments of a global layer as in the anchors (8 / 1 heads, E 1024)."""
    return dict(q_lens=[q_len] * num_reqs, kv_lens=[kv_len] * num_reqs, num_heads=8, num_kv_heads=1, rel_extent=1024)


CASES = {
    **PREFILL_CASES,
    "prefill32k_global": _global_case(32768, 32768),
    "prefill4k_global": _global_case(4096, 4096),
    "prefill16k_global": _global_case(16384, 16384),
    "chunk4k_on32k_x2": _global_case(4096, 32768, num_reqs=2),
}


def main(out_path: str, plan: str = "page16") -> None:
    if plan not in PLANS:
        raise SystemExit(f"sweep_prefill: PLAN is {plan!r}; expected one of {sorted(PLANS)}")
    if not torch.cuda.is_available():
        raise SystemExit("sweep_prefill needs a CUDA device")
    env = _environment()
    records = []
    for (name, page), configs in PLANS[plan].items():
        case = tuning_case(CASES[name], page)
        default = case.triton_config()
        expected = default_output(case)
        for config in [default, *(c for c in configs if c != default)]:
            records.append(_measure(case, expected, name, "prefill", page, 1, config, True, env))
    write_records(out_path, records, append=False)


if __name__ == "__main__":
    main(*sys.argv[1:3])
