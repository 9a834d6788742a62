"""Measure the eager host overhead of calling rel_attn.

    python -m inkling_ops.host_overhead [--device cpu|cuda] [--record meta/host_overhead.jsonl]

Three figures, each the median over repeated batches of back-to-back calls (host wall time
per call; on CUDA without synchronizing inside the loop, on a problem small enough that the
GPU never holds the host back):

1. registration style alone: an op with our schema and an empty implementation, declared
   with ``Library.define`` + ``impl`` (what inkling_ops uses) versus the ``custom_op`` decorator;
2. ``torch.ops.inkling.rel_attn_out`` on a tiny decode with a backend that launches nothing:
   the cost of our registration, validation and dispatch;
3. the same call on the default backend (on CUDA: the Triton kernels).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import inkling_ops
from inkling_ops import dispatch
from inkling_ops.backends.base import Backend
from inkling_ops.benchmark import git_state
from inkling_ops.testing import make_case

_PROBE_SCHEMA = (
    "probe(Tensor q, Tensor k, Tensor v, Tensor bt, Tensor sl, Tensor cu, Tensor rel, *, SymInt max_seqlen_q, "
    "float softmax_scale, int[2] window_size=[-1, -1], bool causal=True, int num_splits=0, str? backend=None, "
    "Tensor(a!) out) -> ()"
)


class _NullBackend(Backend):
    """Launches nothing: isolates registration + validation + dispatch."""

    name = "null"
    device_types = ("cpu", "cuda")

    def why_not(self, problem, facts):
        return None

    def run(self, *args):
        return None


def _per_call_us(fn, calls: int = 2000, batches: int = 7, device: str = "cpu") -> float:
    for _ in range(200):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        if device == "cuda":
            torch.cuda.synchronize()
    return statistics.median(samples)


def _registration_probes(args, options):
    from torch.library import Library, custom_op

    lib = Library("inkling_overhead_probe", "DEF")
    lib.define(_PROBE_SCHEMA)

    def empty(*a, **k):
        return None

    for key in ("CPU", "CUDA"):
        lib.impl("probe", empty, key)

    @custom_op("inkling_overhead_probe::probe_custom_op", mutates_args=("out",))
    def probe_custom_op(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bt: torch.Tensor, sl: torch.Tensor, cu: torch.Tensor,
        rel: torch.Tensor, max_seqlen_q: int, softmax_scale: float, window_size: list[int], causal: bool,
        num_splits: int, backend: str | None, out: torch.Tensor,
    ) -> None:  # fmt: skip
        return None

    define = lambda: torch.ops.inkling_overhead_probe.probe.default(*args, **options)  # noqa: E731
    decorated = lambda: probe_custom_op(  # noqa: E731
        *args, options["max_seqlen_q"], options["softmax_scale"], options["window_size"], True, 0, None, options["out"]
    )
    return define, decorated, lib


def measure(device: str) -> dict:
    case = make_case([1] * 4, [64] * 4, num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=64,
                     dtype=torch.bfloat16 if device == "cuda" else torch.float32, device=device)  # fmt: skip
    out = torch.empty_like(case.q)
    args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits)  # fmt: skip
    options = dict(max_seqlen_q=1, softmax_scale=case.softmax_scale, window_size=[-1, -1], out=out)
    define, decorated, _lib = _registration_probes(args, options)
    if "null" not in dispatch.backend_names():
        dispatch.register_backend(_NullBackend(), before=None)
    op = torch.ops.inkling.rel_attn_out.default
    with torch.inference_mode():
        results = {
            "library_define_empty_us": _per_call_us(define, device=device),
            "custom_op_empty_us": _per_call_us(decorated, device=device),
            "rel_attn_out_null_backend_us": _per_call_us(lambda: op(*args, **options, backend="null"), device=device),
            "rel_attn_out_default_backend_us": _per_call_us(lambda: op(*args, **options), calls=300, device=device),
        }
        if device == "cuda":
            import triton

            results["triton"] = triton.__version__
            results["gpu"] = torch.cuda.get_device_name()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--record", default="meta/host_overhead.jsonl")
    args = parser.parse_args(argv)
    results = measure(args.device)
    sha = git_state(None)[0] or "unknown"  # $INKLING_GIT_SHA on the GPU machine (its tree has no .git)
    record = dict(
        results,
        device=args.device,
        torch=torch.__version__,
        inkling_ops=inkling_ops.__version__,
        git_sha=sha,
        command="python -m inkling_ops.host_overhead " + " ".join(sys.argv[1:] if argv is None else argv),
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    for key, value in results.items():
        print(f"{key:34s} {value:8.2f}" if isinstance(value, float) else f"{key:34s} {value}")
    path = Path(args.record)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
