"""How the L2 flush before each timed replay weighs on a short, memory-bound decode.

    python3 scripts/probe_flush.py

The benchmark and the tuner (like ``triton.testing.do_bench``) flush the L2 by zeroing a 256 MB
buffer before each replay, which leaves the L2 full of dirty lines: a kernel that then reads B
bytes from DRAM also writes up to min(B, L2) bytes back. The sliding decode 64 x 8K reads ~34 MB,
so under that flush it moves up to twice its bytes. This times, by CUDA-graph replay after each
of two flushes (``--l2-flush zero``, zeroing the buffer; ``read``, reading it, which leaves clean
lines; ``inkling_ops.benchmark.l2_flusher``):

- an empty kernel (the floor of a replay),
- a kernel that only reads the case's K/V bytes, contiguously, at several grid sizes, with
  plain loads and with loads carrying an L2 evict_first policy (the best is the bandwidth floor
  of any kernel for the case),
- our sliding decode, page 16 and 128, with the default configuration.

Used for meta/logs/probe_flush_*.log. Those two logs (6ca82c4, e1fc1d7) were made when the
script had its own replay loop (50 untimed replays, then 100 timed; the read flush a Triton read
kernel instead of ``sum``); it now times through the benchmark's ``time_cuda_graph``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from inkling_ops.benchmark import TimingConfig, time_cuda_graph
from inkling_ops.tuning import DECODE_CASES, default_output, tuning_case


@triton.jit
def _empty_kernel(x_ptr):
    pass


@triton.jit
def _read_kernel(x_ptr, out_ptr, n_per_prog, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    """Sum ``n_per_prog`` int32 words of program ``p``'s contiguous chunk (a read-only stream),
    loaded with the L2 eviction policy ``EVICTION`` ("" or "evict_first")."""
    pid = tl.program_id(0)
    base = x_ptr + pid.to(tl.int64) * n_per_prog
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.range(0, n_per_prog, BLOCK, num_stages=3):
        offs = i + tl.arange(0, BLOCK)
        acc += tl.load(base + offs, mask=offs < n_per_prog, other=0, eviction_policy=EVICTION)
    tl.store(out_ptr + pid, tl.sum(acc, 0))


def time_graph(fn, flush_kind: str) -> float:
    """Median us of a CUDA-graph replay of ``fn`` after each flush of kind ``flush_kind``
    (``benchmark.time_cuda_graph`` with ``TimingConfig.l2_flush``)."""
    cfg = TimingConfig(warmup_ms=10, graph_reps=100, l2_flush=flush_kind)
    return time_cuda_graph(fn, cfg, torch.device("cuda")) * 1e3


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("probe_flush needs a CUDA device")
    cases = {page: tuning_case(DECODE_CASES["decode_b64_8k_local"], page) for page in (16, 128)}
    case = cases[16]
    num_reqs = case.cache_seqlens.shape[0]
    window = case.window_size[0] + 1
    hkv, d = case.key_cache.shape[2], case.key_cache.shape[3]
    kv_bytes = 2 * num_reqs * window * hkv * d * case.key_cache.element_size()
    stream = torch.empty(kv_bytes // 4, dtype=torch.int32, device="cuda").random_(0, 1000)
    progs = num_reqs * hkv  # as many programs as the decode has
    x = torch.zeros(1, device="cuda")
    fns = {"empty kernel": lambda: _empty_kernel[(progs,)](x)}
    # The bandwidth floor: the same bytes read contiguously, by as many programs as the decode
    # has and by enough programs to fill the GPU several times over (best of these is the floor).
    grids = ((progs, 2048, 4, ""), (1056, 2048, 4, ""), (2112, 1024, 4, ""), (4224, 512, 4, ""), (1056, 4096, 8, ""),
             (progs, 2048, 4, "evict_first"), (1056, 2048, 4, "evict_first"), (2112, 1024, 4, "evict_first"))  # fmt: skip
    for programs, block, warps, eviction in grids:
        words = stream.numel() // programs
        sink_p = torch.empty(programs, dtype=torch.int32, device="cuda")
        fns[f"read {kv_bytes / 1e6:.1f} MB: {programs} x {warps} warps {eviction}"] = (
            lambda programs=programs, block=block, warps=warps, words=words, sink_p=sink_p, eviction=eviction:
            _read_kernel[(programs,)](stream, sink_p, words, BLOCK=block, EVICTION=eviction, num_warps=warps)
        )  # fmt: skip
    for page, c in cases.items():
        out = default_output(c)  # compiles the default configuration
        cfg = c.triton_config()
        fns[f"ours sliding decode p{page}"] = lambda c=c, out=out, cfg=cfg: c.run_triton(out, num_splits=1, config=cfg)
    print(f"sliding decode 64 x 8K, heads 8/{hkv}, window {window}: K+V to read {kv_bytes / 1e6:.1f} MB")
    print(f"{'':52s} {'zero flush':>12s} {'read flush':>12s}   (median us, CUDA-graph replay)")
    for name, fn in fns.items():
        row = [time_graph(fn, k) for k in ("zero", "read")]
        print(f"{name:52s} " + " ".join(f"{t:12.1f}" for t in row), flush=True)


if __name__ == "__main__":
    main()
