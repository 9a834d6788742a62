"""Why the CuTe backend's CUDA-graph clock reads slower than its eager clock at page 128.

In the peer runs (``meta/bench/benchmark.py``) ours replayed reads 5-11% slower than eagerly on
4 x 2K chunks over 16K at page 128 (H200 at 6bc0891, H100 at 497896f), about 2.5% on 8K global
page 128, and under 1% at page 16, while flash-attn-4's two clocks agree. This probe times, in
one process and for each case and page: the benchmark's graph clock, then its eager clock, then
the graph clock again (so order is not the difference), the graph clock with the L2 flushed by a
read instead of a write, and the kernels themselves by CUPTI (``torch.profiler``) in both modes:
if the kernel runs as long replayed as eagerly, the gap is outside the kernel.

    python3 meta/tools/graph_gap_probe.py [--cases chunk2k_on16k_x4,prefill8k_global] [--pages 16,128] [--peers ours,fa4_nobias]

Prints one block per case, page and peer (ms); needs a CUDA device (flash-attn-4 for its peer).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import benchmark as bm  # noqa: E402


def kernel_times(fn, *, graph: bool, flush, reps: int, device) -> dict[str, tuple[float, int]]:
    """(median CUPTI duration in ms, count) per kernel name over ``reps`` calls (or replays of a
    graph of one call), each after ``flush``; the flush's own kernels are left out."""
    from torch.profiler import ProfilerActivity, profile

    run = bm.capture_graph(fn, device).replay if graph else fn
    for _ in range(3):
        flush()
        run()
    torch.cuda.synchronize(device)

    def kernels(body) -> list:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            body()
            torch.cuda.synchronize(device)
        return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

    flush_names = {e.name for e in kernels(flush)}  # the flush's own kernels, left out below

    def calls():
        for _ in range(reps):
            flush()
            run()

    durations: dict[str, list[float]] = {}
    for event in kernels(calls):
        if event.name not in flush_names:
            durations.setdefault(event.name[:70], []).append(event.device_time / 1e3)
    return {name: (statistics.median(ts), len(ts)) for name, ts in durations.items()}


def smi() -> str:
    import subprocess

    query = "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
    done = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()[:80]


def idle_replays(fn, cfg, device, idle_ms: float = 5.0) -> float:
    """Median event-timed replay (ms) of a graph of one ``fn`` call, the L2 flushed before each and
    the GPU idle ``idle_ms`` before each flush (the host sleeps with the queue empty)."""
    import time

    g = bm.capture_graph(fn, device)
    flush = bm.l2_flusher("zero", device)
    times = []
    for _ in range(cfg.graph_reps // 2):
        torch.cuda.synchronize(device)
        time.sleep(idle_ms / 1e3)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def rounds(name, page, peer, fn, cfg, device, count: int) -> None:
    for i in range(count):
        g = bm.time_cuda_graph(fn, cfg, device)
        after_g = smi()
        e = bm.time_do_bench(fn, cfg)
        after_e = smi()
        idle = idle_replays(fn, cfg, device)
        print(f"{name} p{page} {peer} round {i}: graph {g:.4f} [{after_g}], eager {e:.4f} [{after_e}], idle-replayed {idle:.4f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="chunk2k_on16k_x4,prefill8k_global")
    parser.add_argument("--pages", default="16,128")
    parser.add_argument("--peers", default="ours,fa4_nobias")
    parser.add_argument("--reps", type=bm._positive_int, default=20, help="profiled calls per mode")
    parser.add_argument(
        "--rounds", type=int, default=0,
        help="instead of the above: ROUNDS rounds of graph, eager, and graph with the GPU idle 5 ms before each "
        "replay, each followed by the SM clock and the clock-event reasons nvidia-smi reads then",
    )
    args = parser.parse_args(argv)
    if args.rounds < 0:
        parser.error(f"--rounds is {args.rounds}; expected 0 (off) or a positive count")
    device = torch.device("cuda")
    cases = {c.name: c for c in map(bm.case_from_dict, bm.EMBEDDED_CASES)}
    cfg = bm.TimingConfig(warmup_ms=25, rep_ms=100, graph_reps=100)
    read_cfg = dataclasses.replace(cfg, l2_flush="read")
    flush = bm.l2_flusher("zero", device)
    peers = bm.make_peers(args.peers.split(","), [None], 0, "compiled")
    print(torch.cuda.get_device_name(device), "torch", torch.__version__, flush=True)
    for name in args.cases.split(","):
        case = cases[name]
        inputs = bm.make_inputs(case, device, seed=0)
        for page in map(int, args.pages.split(",")):
            paged = bm.make_paged(inputs, page)
            for peer in peers:
                try:
                    prepared = peer.prepare(inputs, paged, None)
                except bm.Unavailable as exc:
                    print(f"{name} p{page} {peer.name}: unavailable ({exc})")
                    continue
                if args.rounds:
                    rounds(name, page, peer.name, prepared.fn, cfg, device, args.rounds)
                    continue
                g1 = bm.time_cuda_graph(prepared.fn, cfg, device)
                e = bm.time_do_bench(prepared.fn, cfg)
                g2 = bm.time_cuda_graph(prepared.fn, cfg, device)
                gr = bm.time_cuda_graph(prepared.fn, read_cfg, device)
                ke = kernel_times(prepared.fn, graph=False, flush=flush, reps=args.reps, device=device)
                kg = kernel_times(prepared.fn, graph=True, flush=flush, reps=args.reps, device=device)
                print(
                    f"{name} p{page} {peer.name} ({prepared.note}): graph {g1:.4f}, eager {e:.4f}, graph again {g2:.4f}, "
                    f"graph read-flush {gr:.4f}",
                    flush=True,
                )
                for kname in sorted(set(ke) | set(kg)):
                    (te, ne), (tg, ng) = ke.get(kname, (float("nan"), 0)), kg.get(kname, (float("nan"), 0))
                    print(f"    kernel {kname}: eager {te:.4f} ms x{ne}, replayed {tg:.4f} ms x{ng}")
            del paged
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
