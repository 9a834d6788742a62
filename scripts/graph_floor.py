"""The floor of the decode timings: CUDA-graph replay of empty kernels, timed as the benchmark
times decode (``inkling_ops.benchmark.time_cuda_graph``: events around one replay, L2 flushed
before each).

    python3 scripts/graph_floor.py

A graph of one empty kernel, and of two back to back (as the split-KV forward and its combine),
each launched as 264 programs of 4 warps (two per H200 SM) that do nothing. What a graph of
``n`` kernels costs before any work: the least a decode step of ours can measure. Also one
kernel after a small memset (``torch.zeros`` of a few int32 counters inside the graph, as an
in-kernel split combine needs), to price a memset node against a kernel node. Used for
meta/logs/graph_floor_*.log.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inkling_ops.benchmark import TimingConfig, time_cuda_graph


@triton.jit
def _empty_kernel(x_ptr, n):
    if tl.program_id(0) == n:  # never true: a launch that does no work
        tl.store(x_ptr, 1.0)


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("graph_floor needs a CUDA device")
    device = torch.device("cuda")
    x = torch.zeros(1, device=device)
    cfg = TimingConfig(warmup_ms=10, rep_ms=30, graph_reps=200)

    def launches(n: int):
        def fn():
            for _ in range(n):
                _empty_kernel[(264,)](x, -1, num_warps=4)
        return fn

    for n in (1, 2, 3):
        ms = time_cuda_graph(launches(n), cfg, device)
        print(f"CUDA graph of {n} empty kernel(s), 264 programs x 4 warps: median {ms * 1e3:.2f} us", flush=True)

    def zeros_then_kernel(count: int):
        def fn():
            counters = torch.zeros(count, dtype=torch.int32, device=device)
            _empty_kernel[(264,)](counters, -1, num_warps=4)
        return fn

    for count in (64, 4096):
        ms = time_cuda_graph(zeros_then_kernel(count), cfg, device)
        print(f"CUDA graph of torch.zeros({count}, int32) then 1 empty kernel: median {ms * 1e3:.2f} us", flush=True)


if __name__ == "__main__":
    main()
