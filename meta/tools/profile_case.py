"""Run one tuning case a few times with the Triton backend, for a profiler to attach to.

    ncu --clock-control none -k regex:rel_attn --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight python meta/tools/profile_case.py prefill8k_global --page 128

Builds the case of ``meta/tools/tuning.py`` (bf16, head_dim 128) on the GPU and calls the
kernels ``--calls`` times with the default configuration (or ``--config bm,bn,warps,stages``)
and ``--splits`` (default 1). Prints nothing but a line at the end; timing is the profiler's job.
The logs under ``meta/logs/ncu_*`` were made this way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run as ``python meta/tools/profile_case.py``: its sibling ``tuning`` and this checkout's inkling_ops.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]

import torch  # noqa: E402
from tuning import DECODE_CASES, PREFILL_CASES, tuning_case  # noqa: E402

from inkling_ops.kernels.triton_configs import FwdConfig  # noqa: E402


def _config_arg(text: str) -> FwdConfig:
    """``--config`` as four positive integers: block_m,block_n,num_warps,num_stages."""
    values = text.split(",")
    if len(values) != 4 or not all(v.strip().isdigit() and int(v) > 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"--config is {text!r}; expected four positive integers block_m,block_n,num_warps,num_stages"
        )
    return FwdConfig(*(int(v) for v in values))


def main(argv: list[str] | None = None) -> None:
    cases = {**PREFILL_CASES, **DECODE_CASES}
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=sorted(cases))
    parser.add_argument("--page", type=int, default=128)
    parser.add_argument("--splits", type=int, default=1)
    parser.add_argument(
        "--config", default=None, type=_config_arg, help="block_m,block_n,num_warps,num_stages (default: the tuned one)"
    )
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("meta/tools/profile_case.py needs a CUDA device")
    kwargs = cases[args.case]
    case = tuning_case(kwargs, args.page)
    if args.config:
        config = args.config
    else:
        config = case.triton_config()
    out = torch.zeros_like(case.q)
    for _ in range(args.calls):
        case.run_triton(out, num_splits=args.splits, config=config)
    torch.cuda.synchronize()
    print(f"ran {args.case} page {args.page} splits {args.splits} {config} x{args.calls}")


if __name__ == "__main__":
    main()
