"""What the lab tools under meta/ share: the repository root on ``sys.path`` (so this checkout's
``inkling_ops`` is imported when a tool runs as ``python meta/tools/X.py``) and the peer
bench scripts, loaded by path (meta/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: Root of the repository (this file is <root>/meta/tools/lab.py).
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _bench_script(script: str):
    """meta/bench/<script>.py, imported once (as ``inkling_lab_<script>``)."""
    name = f"inkling_lab_{script}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "meta" / "bench" / f"{script}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def benchmark_module():
    """meta/bench/benchmark.py, imported once (as ``inkling_lab_benchmark``)."""
    return _bench_script("benchmark")


def plot_module():
    """meta/bench/plot_performance.py (its records reader; no torch, no matplotlib at import),
    imported once (as ``inkling_lab_plot_performance``)."""
    return _bench_script("plot_performance")
