"""Why the benchmark timed the 1 x 128K decode ~1 us slower than the sweeps (GPU only).

    python3 scripts/why_decode128k.py

Same kernel, same process, three alternating rounds of CUDA-graph timings (``time_cuda_graph``)
at pages 16 and 128: the benchmark's inputs through the op (20 and 50 replays) and through
``run_triton``, and the tuner's case with and without its extra block-table column and spare
blocks. Used for meta/logs/why_decode128k_16f519e.log: every variant measured 33-34 us in a
process of its own, against 34.3-35.5 us inside the benchmark, which then timed graph replays
without warmup replays first.
"""
import statistics, torch
from inkling_ops import benchmark as B
from inkling_ops.tuning import DECODE_CASES, tuning_case
from inkling_ops.testing import make_case
from inkling_ops.api import rel_attn

dev = torch.device("cuda")
case = next(c for c in B.load_cases(None)[0] if c.name == "decode_b1_128k")
inputs = B.make_inputs(case, dev, 0)
cfg20 = B.TimingConfig(warmup_ms=5, rep_ms=25, graph_reps=20)
cfg50 = B.TimingConfig(warmup_ms=10, rep_ms=30, graph_reps=50)
for page in (16, 128):
    paged = B.make_paged(inputs, page)
    tc = tuning_case(DECODE_CASES["decode_b1_128k"], page)
    tc0 = make_case(**DECODE_CASES["decode_b1_128k"], head_dim=128, page_size=page, dtype=torch.bfloat16, device="cuda", spare_blocks=0, extra_table_cols=0)
    config = tc.triton_config()
    out_b = torch.empty_like(inputs.q)
    def bench_op():
        return rel_attn(inputs.q, paged.key_cache, paged.value_cache, block_table=paged.block_table, cache_seqlens=inputs.cache_seqlens,
                        cu_seqlens_q=inputs.cu_seqlens_q, rel_logits=inputs.rel_logits, max_seqlen_q=1, softmax_scale=case.softmax_scale,
                        window_size=case.window_size, out=out_b)
    from inkling_ops.backends.triton_backend import run_triton
    def bench_direct():
        return run_triton(inputs.q, paged.key_cache, paged.value_cache, paged.block_table, inputs.cache_seqlens, inputs.cu_seqlens_q,
                          inputs.rel_logits, out_b, softmax_scale=case.softmax_scale, window_left=-1, max_seqlen_q=1, num_splits=256, config=config)
    o1 = torch.empty_like(tc.q); o0 = torch.empty_like(tc0.q)
    variants = {
        "bench inputs, op, 20 reps": (bench_op, cfg20),
        "bench inputs, op, 50 reps": (bench_op, cfg50),
        "bench inputs, run_triton, 50": (bench_direct, cfg50),
        "tuning_case (+1 table col), run_triton, 50": (lambda: tc.run_triton(o1, num_splits=256, config=config), cfg50),
        "tuning_case (no spare, exact table), run_triton, 50": (lambda: tc0.run_triton(o0, num_splits=256, config=config), cfg50),
    }
    times = {k: [] for k in variants}
    for _ in range(3):
        for k, (fn, c) in variants.items():
            times[k].append(B.time_cuda_graph(fn, c, dev) * 1e3)
    for k, v in times.items():
        print(f"p{page:<4d} {k:55s} " + " ".join(f"{x:6.2f}" for x in v) + f"   median {statistics.median(v):6.2f} us", flush=True)
