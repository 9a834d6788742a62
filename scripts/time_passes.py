"""Time the two launches of the two-pass prefill separately on a GPU.

    python3 scripts/time_passes.py            # 8K global and chunked 4 x 2K on 16K, pages 16 and 128

Pass 1 runs only the plain tiles, pass 2 the window-edge, band and diagonal tiles (see
docs/triton_kernels.md). Each is timed alone with ``triton.testing.do_bench`` (median, L2
flushed), with the default configurations of ``fwd_config``; "both" is the two back to back, as
the op runs them. Where the default is one launch (pages under ``TWO_PASS_MIN_PAGE``), that
launch is timed instead. Used for meta/logs/passes_*.log.
"""

from __future__ import annotations

import torch
import triton

from inkling_ops.kernels.triton_fwd import launch_rel_attn_fwd
from inkling_ops.tuning import PREFILL_CASES, tuning_case


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("time_passes needs a CUDA device")
    for name in ("prefill8k_global", "chunk2k_on16k_x4"):
        kwargs = PREFILL_CASES[name]
        for page in (16, 128):
            case = tuning_case(kwargs, page)
            config = case.triton_config()
            out = torch.empty_like(case.q)
            if config.plain is None:
                t = triton.testing.do_bench(lambda: case.run_triton(out, num_splits=1, config=config), warmup=10, rep=40, return_mode="median")
                print(f"{name} p{page}: one launch {t * 1e3:.1f} us (the default at this page size)", flush=True)
                continue
            lse = torch.empty(case.q.shape[0], case.q.shape[1], dtype=torch.float32, device="cuda")
            args = (case.q, case.key_cache, case.value_cache, case.rel_logits, case.block_table,
                    case.cache_seqlens, case.cu_seqlens_q, out)  # fmt: skip
            common = dict(softmax_scale=case.softmax_scale, window_left=-1, max_seqlen_q=case.max_seqlen_q, num_splits=1)

            def pass1():
                launch_rel_attn_fwd(*args, **common, config=config.plain, part_lse=lse, fwd_pass=1)

            def pass2():
                launch_rel_attn_fwd(*args, **common, config=config, part_lse=lse, fwd_pass=2, pass1_config=config.plain)

            def both():
                pass1()
                pass2()

            both()
            torch.cuda.synchronize()
            t1, t2, t12 = (triton.testing.do_bench(f, warmup=10, rep=40, return_mode="median") for f in (pass1, pass2, both))
            print(f"{name} p{page}: pass1 {t1 * 1e3:.1f} us  pass2 {t2 * 1e3:.1f} us  both {t12 * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main()
