"""A/B on a GPU: the forward kernel of another commit against this checkout's, in one process.

    git show c334786:inkling_ops/kernels/triton_fwd.py > /tmp/base_fwd.py     # on a machine with git
    python3 scripts/ab_fwd_module.py /tmp/base_fwd.py [CASE:PAGE[:SPLITS] ...]  # default: prefill8k_global:128 prefill8k_global:16

Loads the given copy of ``inkling_ops/kernels/triton_fwd.py`` as a module of this package (so its
relative imports resolve here), runs each case's default configuration with both modules through
the backend's ``run_triton`` (same passes, workspace and combine; with SPLITS > 1, split-KV), checks that the outputs agree, then times them alternately (four CUDA-graph replay medians each, L2
flushed). Meant for changes that should not change what runs, such as a refactor whose SASS
digest (``python -m inkling_ops.kernel_report --sass``) moved. Used for
meta/logs/ab_band_390be60_vs_c334786.log.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys

import torch

from inkling_ops.benchmark import TimingConfig, time_cuda_graph
from inkling_ops.kernels import triton_fwd
from inkling_ops.tuning import DECODE_CASES, PREFILL_CASES, tuning_case


def _load_baseline(path: str):
    name = "inkling_ops.kernels._ab_baseline_fwd"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _runner(module, case, config, splits: int):
    """A call of ``case`` through the backend's ``run_triton`` with ``module.launch_rel_attn_fwd``:
    one or two passes, or with ``splits > 1`` split-KV followed by the combine."""
    out = torch.zeros_like(case.q)

    def call():
        case.run_triton(out, num_splits=splits, config=config, launch_fwd=module.launch_rel_attn_fwd)

    return call, out


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    if not torch.cuda.is_available():
        raise SystemExit("ab_fwd_module needs a CUDA device")
    baseline = _load_baseline(argv[0])
    cases = argv[1:] or ["prefill8k_global:128", "prefill8k_global:16"]
    timing = TimingConfig(warmup_ms=10, rep_ms=30, graph_reps=50)
    for item in cases:
        parts = item.split(":")
        name, page, splits = parts[0], parts[1] if len(parts) > 1 else "", parts[2] if len(parts) > 2 else "1"
        kwargs = {**PREFILL_CASES, **DECODE_CASES}.get(name)
        if kwargs is None or len(parts) > 3 or not page.isdigit() or not splits.isdigit() or int(splits) < 1:
            raise SystemExit(
                f"case {item!r}: expected NAME:PAGE[:SPLITS] with NAME one of {sorted({**PREFILL_CASES, **DECODE_CASES})}"
            )
        case = tuning_case(kwargs, int(page))
        config = case.triton_config()
        runs = {key: _runner(module, case, config, int(splits)) for key, module in (("baseline", baseline), ("current", triton_fwd))}
        for call, _ in runs.values():
            call()
        torch.cuda.synchronize()
        diff = (runs["baseline"][1].float() - runs["current"][1].float()).abs().max().item()
        print(f"{name} page {page} splits {splits}: max |baseline - current| = {diff}", flush=True)
        times = {key: [] for key in runs}
        for _ in range(4):
            for key, (call, _) in runs.items():
                times[key].append(time_cuda_graph(call, timing, torch.device("cuda")) * 1e3)
        for key, values in times.items():
            print(f"  {key:8s} " + " ".join(f"{v:.1f}" for v in values) + f"  median {statistics.median(values):.1f} us", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
