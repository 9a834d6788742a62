"""The sliding decode 64 x 8K at 1, 2 and 4 splits: forward and combine, against the forward
alone (the combine replaced by a no-op), CUDA-graph replay with the L2 flushed as the tuner does.
Also one empty kernel (the floor of a replay).

    python3 scripts/time_fwd_alone.py

Whether splitting the window shortens the forward kernel itself, whatever the combine costs.
Used for meta/logs/fwd_alone_splits_*.log.
"""
import functools

import torch
import triton

from inkling_ops.backends import triton_backend as tb
from inkling_ops.tuning import DECODE_CASES, _time, default_output, tuning_case


@triton.jit
def _empty(x):
    pass


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("time_fwd_alone needs a CUDA device")
    _, _, comb_mod = tb._kernel_modules()
    real_combine = comb_mod.launch_rel_attn_combine
    for page in (16, 128):
        case = tuning_case(DECODE_CASES["decode_b64_8k_local"], page)
        cfg = case.triton_config()  # the default configuration
        exp = default_output(case)
        for splits in (1, 2, 4):
            out = torch.zeros_like(case.q)
            fn = functools.partial(case.run_triton, out, num_splits=splits, config=cfg)
            fn()
            torch.cuda.synchronize()
            err = ((out.float() - exp.float()).norm() / exp.float().norm()).item()
            both = _time(fn, True, graph=True) * 1e3
            comb_mod.launch_rel_attn_combine = lambda *a, **k: None
            try:
                fwd = _time(fn, True, graph=True) * 1e3
            finally:
                comb_mod.launch_rel_attn_combine = real_combine
            print(f"p{page} splits {splits}: fwd+combine {both:.1f} us, fwd alone {fwd:.1f} us, err {err:.1e}", flush=True)
    # the graph floor: one empty kernel
    x = torch.zeros(1, device="cuda")
    print(f"empty kernel {_time(lambda: _empty[(128,)](x), True, graph=True) * 1e3:.1f} us")


if __name__ == "__main__":
    main()
