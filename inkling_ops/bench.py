"""Time rel_attn on this machine: a few representative Inkling cases, eager and by CUDA-graph replay.

    python -m inkling_ops bench [--page-size 16] [--cases prefill8k_global,decode64x8k_global]
                                [--heads 8/1] [--device cuda|cpu] [--smoke]

Runs only this package's op, through the public :func:`inkling_ops.rel_attn`, on random bf16
inputs (pages of every request shuffled across the cache), and prints one row per case:

- ``eager``: ``triton.testing.do_bench`` median of eager calls (each launched from the host, so
  the launch cost is in it; L2 flushed before each call); on CPU the median of a timed loop;
- ``graph``: the median CUDA-graph replay of one call (L2 flushed before each replay), the time
  the GPU spends when the host is out of the way, as under vLLM's CUDA graphs; ``n/a (cpu)`` on CPU;
- TFLOP/s for prefill (4 * head_dim * Hq per visible (query, key) pair) and GB/s for decode (the
  K/V the queries can see, plus q, out and rel_logits, each read or written once).

On CPU (or with ``--smoke``) the cases shrink to tiny shapes with the same structure, so the
command finishes in seconds; those times say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from .api import rel_attn


@dataclass(frozen=True)
class BenchCase:
    """``num_reqs`` requests, each ``q_len`` new tokens at the end of ``kv_len`` cached positions."""

    name: str
    num_reqs: int
    q_len: int
    kv_len: int
    num_heads: int
    num_kv_heads: int
    rel_extent: int
    window_left: int = -1
    head_dim: int = 128

    @property
    def is_decode(self) -> bool:
        return self.q_len == 1

    def describe(self) -> str:
        window = f" window {self.window_left}" if self.window_left >= 0 else ""
        return f"{self.num_reqs}x(q {self.q_len}, kv {self.kv_len}) h{self.num_heads}/{self.num_kv_heads} E{self.rel_extent}{window}"


#: Inkling's layer shapes: global layers 8 query / 1 KV heads and E = 1024, sliding layers 8 / 2
#: heads, a 512-key window and E = 512; head_dim 128.
CASES: dict[str, BenchCase] = {
    c.name: c
    for c in (
        BenchCase("prefill8k_global", 1, 8192, 8192, 8, 1, 1024),
        BenchCase("prefill8k_sliding", 1, 8192, 8192, 8, 2, 512, window_left=511),
        BenchCase("decode64x8k_global", 64, 1, 8192, 8, 1, 1024),
        BenchCase("decode64x8k_sliding", 64, 1, 8192, 8, 2, 512, window_left=511),
    )
}


def smoke_case(case: BenchCase) -> BenchCase:
    """A tiny case with the same structure: lengths / 64, at most 4 requests, E / 16, window E - 1."""
    q_len = 1 if case.is_decode else max(16, case.q_len // 64)
    rel_extent = max(8, case.rel_extent // 16)
    return replace(
        case,
        num_reqs=min(case.num_reqs, 4),
        q_len=q_len,
        kv_len=max(q_len, case.kv_len // 64),
        rel_extent=rel_extent,
        window_left=rel_extent - 1 if case.window_left >= 0 else -1,
    )


# --- accounting --------------------------------------------------------------------------------


def _sum_range(lo: int, hi: int) -> int:
    """lo + (lo + 1) + ... + hi (0 when hi < lo)."""
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


def visible_pairs_per_request(q_len: int, kv_len: int, window_left: int = -1) -> int:
    """Visible (query, key) pairs of one request: its q_len queries are the last of kv_len positions.

    Query ``i`` sits at ``a = kv_len - q_len + i`` and sees ``a + 1`` keys, or ``min(a + 1,
    window_left + 1)`` with a window (anchors.md's accounting; the lab's peer benchmark uses it too).

    Equivalent Python: ``sum(min(a + 1, window_left + 1) if window_left >= 0 else a + 1 for a in range(kv_len - q_len, kv_len))``.
    """
    if not 0 <= q_len <= kv_len:
        raise ValueError(f"need 0 <= q_len <= kv_len, got q_len={q_len}, kv_len={kv_len}")
    first, last = kv_len - q_len + 1, kv_len  # keys seen by the first and last query, unwindowed
    if window_left < 0:
        return _sum_range(first, last)
    cap = window_left + 1
    return _sum_range(first, min(last, cap)) + cap * max(0, last - max(first, cap + 1) + 1)


def kv_positions_read_per_request(q_len: int, kv_len: int, window_left: int = -1) -> int:
    """Key positions some query of the request sees: all kv_len, or from the first query's window start."""
    if window_left < 0:
        return kv_len
    return kv_len - max(0, kv_len - q_len - window_left)


def visible_pairs(case: BenchCase) -> int:
    """(query, key) pairs the causal (and windowed) mask lets through, over all requests."""
    return case.num_reqs * visible_pairs_per_request(case.q_len, case.kv_len, case.window_left)


def flop_count(case: BenchCase) -> int:
    return 4 * case.head_dim * case.num_heads * visible_pairs(case)


def byte_count(case: BenchCase, elem_bytes: int) -> int:
    """K+V positions some query sees, plus q, out and rel_logits, each once."""
    keys = kv_positions_read_per_request(case.q_len, case.kv_len, case.window_left)
    kv = 2 * case.num_reqs * keys * case.num_kv_heads * case.head_dim
    tokens = case.num_reqs * case.q_len
    return elem_bytes * (kv + 2 * tokens * case.num_heads * case.head_dim + tokens * case.num_heads * case.rel_extent)


def throughput(case: BenchCase, ms: float | None, elem_bytes: int) -> str:
    if ms is None:
        return "-"
    if case.is_decode:
        return f"{byte_count(case, elem_bytes) / (ms * 1e-3) / 1e9:.3g} GB/s"
    return f"{flop_count(case) / (ms * 1e-3) / 1e12:.3g} TFLOP/s"


# --- inputs --------------------------------------------------------------------------------------


def make_call(case: BenchCase, page_size: int, dtype: torch.dtype, device: torch.device, seed: int = 0) -> Callable[[], torch.Tensor]:
    """Random inputs for ``case`` on ``device`` and a function making one ``rel_attn`` call into a preallocated ``out``."""
    g = torch.Generator(device=device).manual_seed(seed)
    tokens = case.num_reqs * case.q_len
    pages = -(-case.kv_len // page_size)
    num_blocks = case.num_reqs * pages

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=dtype)

    q = randn(tokens, case.num_heads, case.head_dim)
    key_cache = randn(num_blocks, page_size, case.num_kv_heads, case.head_dim)
    value_cache = randn(num_blocks, page_size, case.num_kv_heads, case.head_dim)
    rel_logits = randn(tokens, case.num_heads, case.rel_extent)
    perm = torch.randperm(num_blocks, generator=g, device=device)
    block_table = perm.view(case.num_reqs, pages).to(torch.int32)
    cache_seqlens = torch.full((case.num_reqs,), case.kv_len, dtype=torch.int32, device=device)
    cu_seqlens_q = torch.arange(case.num_reqs + 1, dtype=torch.int32, device=device) * case.q_len
    out = torch.empty_like(q)
    window = (case.window_left, 0) if case.window_left >= 0 else (-1, -1)

    def call() -> torch.Tensor:
        return rel_attn(
            q, key_cache, value_cache, block_table=block_table, cache_seqlens=cache_seqlens,
            cu_seqlens_q=cu_seqlens_q, rel_logits=rel_logits, max_seqlen_q=case.q_len,
            softmax_scale=1.0 / case.head_dim, window_size=window, out=out,
        )  # fmt: skip

    return call


# --- clocks --------------------------------------------------------------------------------------


def time_eager(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median ms of eager calls: ``do_bench`` on CUDA, a timed loop of ``reps`` calls on CPU."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def time_graph(fn: Callable[[], object], device: torch.device, reps: int = 100) -> float:
    """Median ms of replaying a CUDA graph of one call, the L2 flushed (a 256 MB write) before each replay."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up (compiles, caches) on a side stream, as capture needs
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    flush = torch.empty(256 << 20, dtype=torch.int8, device=device)
    for _ in range(10):
        flush.zero_()
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


@dataclass
class Row:
    case: BenchCase
    eager_ms: float | None
    graph_ms: float | None
    graph_note: str = ""
    note: str = ""


def measure(case: BenchCase, page_size: int, dtype: torch.dtype, device: torch.device, cpu_reps: int) -> Row:
    """Both clocks of one case (a failure to capture is reported in the row, not raised)."""
    call = make_call(case, page_size, dtype, device)
    out = call()  # first call: compiles
    note = "" if bool(torch.isfinite(out).all()) else "non-finite output"
    eager = time_eager(call, device, cpu_reps)
    if device.type != "cuda":
        return Row(case, eager, None, "n/a (cpu)", note)
    try:
        return Row(case, eager, time_graph(call, device), "", note)
    except RuntimeError as exc:
        torch.cuda.synchronize(device)
        return Row(case, eager, None, f"capture failed ({type(exc).__name__})", note)


def format_table(rows: Sequence[Row], elem_bytes: int) -> str:
    """One line per case: shape, eager ms, graph ms, and the throughput on each clock."""
    header = ("case", "shape", "eager ms", "graph ms", "eager", "graph")
    body = [
        (
            r.case.name + (f" ({r.note})" if r.note else ""),
            r.case.describe(),
            f"{r.eager_ms:.4g}" if r.eager_ms is not None else "-",
            f"{r.graph_ms:.4g}" if r.graph_ms is not None else r.graph_note or "-",
            throughput(r.case, r.eager_ms, elem_bytes),
            throughput(r.case, r.graph_ms, elem_bytes),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(line[k]) for line in body)) for k, h in enumerate(header)]
    lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(line, widths)).rstrip() for line in (header, *body)]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# --- command line ----------------------------------------------------------------------------------


def parse_heads(text: str) -> tuple[int, int]:
    try:
        hq, hkv = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--heads is {text!r}; expected Hq/Hkv, e.g. 8/1") from None
    if hq < 1 or hkv < 1 or hq % hkv:
        raise argparse.ArgumentTypeError(f"--heads is {text!r}; expected positive Hq/Hkv with Hq a multiple of Hkv")
    return hq, hkv


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m inkling_ops bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--page-size", type=int, default=16, help="KV cache page size (default 16)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)} (default all)")
    p.add_argument("--heads", type=parse_heads, default=None, metavar="HQ/HKV", help="query/KV heads for every case (default: Inkling's, 8/1 global, 8/2 sliding)")
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--smoke", action="store_true", help="tiny shapes (automatic on CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or per-case lines")
    return p


def _progress(items: Sequence[BenchCase], enabled: bool):
    """tqdm over the cases when tqdm is installed, else a plain line per case."""
    if not enabled:
        return iter(items)
    try:
        from tqdm import tqdm
    except ImportError:
        return _plain_progress(items)
    return tqdm(items, desc="rel_attn bench", unit="case", file=sys.stderr)


def _plain_progress(items: Sequence[BenchCase]):
    for k, item in enumerate(items, 1):
        print(f"[{k}/{len(items)}] {item.name}", file=sys.stderr, flush=True)
        yield item


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cuda", "cpu"):
        parser.error(f"--device is {args.device!r}; expected cuda or cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here (try --device cpu)")
    if args.page_size < 1:
        parser.error(f"--page-size is {args.page_size}; expected a positive integer")
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        parser.error(f"--cases: unknown case(s) {unknown}; expected a subset of {','.join(CASES)}")
    cases = [CASES[n] for n in names]
    if args.heads is not None:
        cases = [replace(c, num_heads=args.heads[0], num_kv_heads=args.heads[1]) for c in cases]
    smoke = args.smoke or device.type == "cpu"
    if smoke:
        cases = [smoke_case(c) for c in cases]
    # bf16 as served; float32 on CPU, where the reference backend runs and bf16 matmuls are slow.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"rel_attn on {where}: page size {args.page_size}, {str(dtype).removeprefix('torch.')}" + (", tiny shapes (smoke)" if smoke else ""))
    rows = []
    with torch.inference_mode():
        for case in _progress(cases, not args.no_progress):
            rows.append(measure(case, args.page_size, dtype, device, cpu_reps=3 if smoke else 10))
    print(format_table(rows, elem_bytes=torch.empty((), dtype=dtype).element_size()))
    print("eager: do_bench of eager calls (host launch included; a timed loop on CPU); graph: CUDA-graph replay")
    return 0


if __name__ == "__main__":
    sys.exit(main())
