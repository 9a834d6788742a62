"""What the lab tools under meta/ share: the repository root on ``sys.path`` (so this checkout's
``inkling_ops`` is imported when a tool runs as ``python meta/tools/X.py``) and the peer
benchmark module, loaded by path (meta/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: Root of the repository (this file is <root>/meta/tools/lab.py).
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def benchmark_module():
    """meta/bench/benchmark.py, imported once (as ``inkling_lab_benchmark``)."""
    name = "inkling_lab_benchmark"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "meta" / "bench" / "benchmark.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
