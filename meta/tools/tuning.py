"""Tune the Triton backend on a GPU: launch configs for prefill, split counts for decode.

    python meta/tools/tuning.py [--out DIR] [--quick] [--kind prefill|decode] [--splits 2,4,256]

For each anchor case it times candidate launch configurations (prefill, ``triton.testing.do_bench``)
and split counts (decode, CUDA-graph replay) as medians with the L2 flushed, checks every candidate's output
against the default configuration's, prints a table, and appends one JSON line per candidate
to ``meta/tuning_records.jsonl`` of this checkout (and to ``DIR`` when given), with the GPU, versions, git SHA
and the command line. The chosen values are then written by hand into
``inkling_ops/kernels/triton_configs.py`` and ``TRITON_SPLIT_POLICY``. A lab tool, not part of
the package: it registers nothing with the dispatcher, it calls the Triton backend's
``run_triton`` with each candidate.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import REPO_ROOT, benchmark_module  # noqa: E402  (puts this checkout's inkling_ops on sys.path)

import torch  # noqa: E402

from inkling_ops.kernels.triton_configs import FwdConfig  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402

PREFILL_CASES = {
    "prefill8k_global": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024),
    "prefill8k_local": dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511),
    "chunk2k_on16k_x4": dict(q_lens=[2048] * 4, kv_lens=[16384] * 4, num_heads=8, num_kv_heads=1, rel_extent=1024),
}
DECODE_CASES = {
    "decode_b64_8k": dict(q_lens=[1] * 64, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=1, rel_extent=1024),
    "decode_b64_8k_local": dict(q_lens=[1] * 64, kv_lens=[8192] * 64, num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511),
    "decode_b1_128k": dict(q_lens=[1], kv_lens=[131072], num_heads=8, num_kv_heads=1, rel_extent=1024),
}
# (block_m, block_n, num_warps, num_stages). With the block ids fetched one tile ahead, num_stages
# 2 keeps one K/V tile in flight (two buffers), 3 keeps two (three buffers), 4 keeps three.
_PLAIN = FwdConfig(128, 128, 8, 3)
PREFILL_CONFIGS = [
    FwdConfig(64, 64, 4, 2),
    # Two launches: plain tiles with the inner configuration, then the rest with the outer one.
    # The default for global layers (fwd_config): the band's bias gathered one tile ahead.
    FwdConfig(64, 64, 4, 2, plain=_PLAIN, bias_ahead=True),
    FwdConfig(64, 64, 4, 2, plain=_PLAIN),  # the default from 50276c0 to 27741fa
    # The bias gathered with tl.load (a blocked layout converted to the MMA layout through shared
    # memory every tile), as up to 6fd105e; every other candidate gathers with inline PTX.
    FwdConfig(64, 64, 4, 2, plain=_PLAIN, asm_gather=False),
    FwdConfig(64, 32, 4, 3, bias_ahead=True),
    FwdConfig(64, 32, 4, 3, plain=_PLAIN, bias_ahead=True),
    # Capped at 168 registers: three 4-warp programs per SM instead of two (small spills).
    FwdConfig(64, 32, 4, 3, plain=_PLAIN, max_registers=168),
    FwdConfig(64, 32, 4, 3, plain=_PLAIN, bias_ahead=True, max_registers=168),
    # The default for sliding layers whose window lies inside E before 67b0d3b (one launch; plain
    # unused there), and since 67b0d3b, with their edge and band tiles as one masked loop.
    FwdConfig(64, 32, 4, 2, plain=_PLAIN, bias_ahead=True, max_registers=168),
    FwdConfig(64, 32, 4, 2, bias_ahead=True, max_registers=168, single_masked_loop=True),
    FwdConfig(128, 64, 8, 2, plain=_PLAIN, bias_ahead=True),
    # Page 16's plain pass is ~30% slower than page 128's (scattered 256-byte K/V rows): 64-key
    # plain tiles with three tiles in flight (4 stages, 183 registers, no spills on triton 3.6).
    # Not yet timed.
    FwdConfig(64, 64, 4, 2, plain=FwdConfig(128, 64, 8, 4), bias_ahead=True),
    FwdConfig(64, 64, 4, 2, plain=FwdConfig(128, 64, 8, 5), bias_ahead=True),  # four in flight
]
DECODE_CONFIGS = [
    FwdConfig(16, 64, 4, 2, asm_gather=False),  # the default for windows inside E up to 9d7a5c1
    # The default for windows inside E from ab964e1 to 09afbf5: the bias a tile ahead, two K/V
    # tiles in flight (fwd_config adds single_masked_loop since 09afbf5).
    FwdConfig(16, 64, 4, 3, bias_ahead=True),
    FwdConfig(16, 64, 4, 2),  # inline-PTX gather, the default at 27741fa
    FwdConfig(16, 64, 4, 3, asm_gather=False),
    FwdConfig(16, 128, 4, 2, asm_gather=False),
    # The bias one tile ahead.
    FwdConfig(16, 64, 4, 2, asm_gather=False, bias_ahead=True),
    FwdConfig(16, 128, 4, 2, asm_gather=False, bias_ahead=True),
    # Strided splits (the bias band shared out among the splits); K/V loaded a tile ahead into
    # registers (one stage: Triton's own pipelining off).
    FwdConfig(16, 64, 4, 2, asm_gather=False, split_strided=True),
    FwdConfig(16, 64, 4, 1, asm_gather=False, kv_prefetch=True),
    FwdConfig(16, 64, 4, 1, asm_gather=False, kv_prefetch=True, split_strided=True),  # the default elsewhere
]
SPLITS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def candidates() -> list[tuple[str, FwdConfig]]:
    """(kind, configuration) of every candidate the tuner times; the tests check each one."""
    return [("prefill", c) for c in PREFILL_CONFIGS] + [("decode", c) for c in DECODE_CONFIGS]


def tuning_case(kwargs: dict, page_size: int, device: str = "cuda"):
    """One sweep case as every GPU tool here builds it (the tuner and ``profile_case``):
    ``make_case(**kwargs)`` in bf16, head_dim 128, ``page_size``-key pages, no spare blocks."""
    return make_case(**kwargs, head_dim=128, page_size=page_size, dtype=torch.bfloat16, device=device, spare_blocks=0)


def default_output(case) -> torch.Tensor:
    """``case`` run once with the default configuration and no split: what candidates are checked against."""
    expected = torch.zeros_like(case.q)
    case.run_triton(expected, num_splits=1, config=case.triton_config())
    return expected


def command_line(argv: list[str]) -> str:
    """The command that made a record, from ``sys.argv``: ``python3 meta/tools/tuning.py ...``
    for the tuner (however it was started), the script's own path for another caller.

    Equivalent Python: ``"python3 " + " ".join(["meta/tools/tuning.py" if the tuner else argv[0], *argv[1:]])``.
    """
    script = Path(argv[0]) if argv else Path("-m")
    tuner = not argv or argv[0] == "-m" or (script.name == "tuning.py" and script.parent.name == "tools")
    return " ".join(["python3", "meta/tools/tuning.py" if tuner else str(script), *argv[1:]])


def _environment() -> dict:
    import triton

    sha = benchmark_module().git_state(None)[0] or "unknown"  # export $INKLING_GIT_SHA on the GPU machine (its copy of the tree has no usable .git)
    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "git_sha": sha,
        "command": command_line(sys.argv),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _time(fn, quick: bool, graph: bool) -> float:
    """Median ms: do_bench (L2 flushed), or with ``graph`` CUDA-graph replay (L2 flushed), which
    keeps the host's launch cost out of short decode timings."""
    bench = benchmark_module()
    TimingConfig, time_cuda_graph, time_do_bench = bench.TimingConfig, bench.time_cuda_graph, bench.time_do_bench

    cfg = TimingConfig(warmup_ms=10 if quick else 25, rep_ms=30 if quick else 100, graph_reps=50 if quick else 100)
    return time_cuda_graph(fn, cfg, torch.device("cuda")) if graph else time_do_bench(fn, cfg)


def _measure(case, expected, name, kind, page, splits, config, quick, env) -> dict:
    """Time one candidate; returns its record (with ``error`` when it failed to compile or run)."""
    out = torch.zeros_like(case.q)
    fn = functools.partial(case.run_triton, out, num_splits=splits, config=config)
    base = dict(env, case=name, kind=kind, page_size=page, splits=splits, block_m=config.block_m,
                block_n=config.block_n, num_warps=config.num_warps, num_stages=config.num_stages,
                plain=None if config.plain is None else [config.plain.block_m, config.plain.block_n, config.plain.num_warps, config.plain.num_stages],
                bias_ahead=config.bias_ahead,
                asm_gather=config.asm_gather,
                max_registers=config.max_registers,
                split_strided=config.split_strided,
                kv_prefetch=config.kv_prefetch,
                single_masked_loop=config.single_masked_loop,
                kv_evict_first=config.kv_evict_first,
                timing="cuda_graph" if kind == "decode" else "do_bench")  # fmt: skip
    t0 = time.perf_counter()
    try:
        compiled = fn()
        torch.cuda.synchronize()
    except Exception as exc:  # a config may not fit (shared memory, registers)
        print(f"{name:22s} p{page:<4d} s{splits:<4d} {config}: FAILED {str(exc)[:160]}", flush=True)
        return dict(base, error=str(exc)[:300])
    first_call_s = time.perf_counter() - t0
    err = ((out.float() - expected.float()).norm() / expected.float().norm()).item()
    ms = _time(fn, quick, graph=kind == "decode")
    regs, spills = getattr(compiled, "n_regs", None), getattr(compiled, "n_spills", None)
    print(f"{name:22s} p{page:<4d} s{splits:<4d} {config}: {ms * 1e3:9.1f} us  err {err:.1e}  "
          f"first {first_call_s:.1f}s  regs {regs} spills {spills}", flush=True)  # fmt: skip
    return dict(base, median_ms=ms, first_call_s=first_call_s, rel_err_vs_default=err, regs=regs, spills=spills)


def tune(
    page_sizes: list[int], quick: bool, only: str | None, splits: list[int] = SPLITS, kinds: tuple = ("prefill", "decode")
) -> list[dict]:
    """Sweep every case at every page size; returns all records."""
    records = []
    env = _environment()
    jobs = [(n, kw, "prefill") for n, kw in PREFILL_CASES.items()] + [(n, kw, "decode") for n, kw in DECODE_CASES.items()]
    for name, kwargs, kind in jobs:
        if (only and only not in name) or kind not in kinds:
            continue
        for page in page_sizes:
            case = tuning_case(kwargs, page)
            default = case.triton_config()
            expected = default_output(case)
            args = (case, expected, name, kind, page)
            if kind == "prefill":
                records += [_measure(*args, 1, config, quick, env) for config in PREFILL_CONFIGS]
                continue
            by_splits = [_measure(*args, s, default, quick, env) for s in splits]
            records += by_splits
            best = min((r for r in by_splits if "median_ms" in r), key=lambda r: r["median_ms"])["splits"]
            records += [_measure(*args, best, config, quick, env) for config in DECODE_CONFIGS if config != default]
    return records


def write_records(path: str | Path, records: list[dict], *, append: bool = True) -> None:
    """Write ``records`` as JSON lines to ``path`` (appended, or replacing the file), creating
    its folder. Used by the tuner and by the sweep scripts under ``scripts/``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page-sizes", default="16,128")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=None, help="substring filter on case names")
    parser.add_argument("--kind", choices=["prefill", "decode"], default=None, help="only this kind of case")
    parser.add_argument("--splits", default=",".join(map(str, SPLITS)), help="decode split counts to sweep")
    parser.add_argument("--out", default=None, help="also write records here")
    parser.add_argument("--record", default=str(REPO_ROOT / "meta" / "tuning_records.jsonl"))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("meta/tools/tuning.py needs a CUDA device")
    splits = [int(s) for s in args.splits.split(",")]
    kinds = (args.kind,) if args.kind else ("prefill", "decode")
    records = tune([int(p) for p in args.page_sizes.split(",")], args.quick, args.only, splits, kinds)
    paths = [Path(args.record)] + ([Path(args.out) / "tuning_records.jsonl"] if args.out else [])
    for path in paths:
        write_records(path, records)
    print(f"wrote {len(records)} records to {', '.join(map(str, paths))}")


if __name__ == "__main__":
    main()
