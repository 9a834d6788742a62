"""One H200 visit for the CuTe backend: direct correctness checks, a CUDA-graph replay, then timings.

    python3 meta/tools/cute_gpu_check.py --out DIR [--skip-timing]

Correctness: a few calls through ``inkling_ops.rel_attn(..., backend="cute")`` against the fp32
reference (vLLM's bf16 tolerance, atol = rtol = 2e-2), with NaN planted in unused pages.
Timing: cute against triton on prefill 8K (global page 128 and 16, 8/1 heads, E 1024; sliding
window 511, E 512, 8/2 heads), ``triton.testing.do_bench`` medians. Writes ``cute_check.json``
and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.getcwd())
import inkling_ops  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402

CHECKS = [
    ("prefill_1500_g8_page16", dict(q_lens=[1500, 7], kv_lens=[1500, 7], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16)),
    ("prefill_300_g8_page128", dict(q_lens=[300], kv_lens=[300], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128)),
    ("sliding_1300_g4_page128", dict(q_lens=[1300], kv_lens=[1300], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128)),
    ("chunks_decodes_g8_page64", dict(q_lens=[300, 129, 1], kv_lens=[2000, 700, 1500], num_heads=16, num_kv_heads=2, rel_extent=1024, page_size=64)),
    # G 4 with requests of both offset parities, chunks and a decode
    ("chunks_decodes_g4_page16", dict(q_lens=[300, 129, 1], kv_lens=[2001, 701, 1500], num_heads=8, num_kv_heads=2, rel_extent=512, page_size=16)),
    ("window_wider_than_E_mha", dict(q_lens=[300], kv_lens=[1000], num_heads=8, num_kv_heads=8, rel_extent=64, window_left=200, page_size=128)),
    ("E16_g8_page24_packed", dict(q_lens=[200], kv_lens=[900], num_heads=8, num_kv_heads=1, rel_extent=16, page_size=24, packed_kv=True)),
]  # fmt: skip

TIMINGS = [
    ("prefill8k_global_page128", dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=128)),
    ("prefill8k_global_page16", dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16)),
    ("prefill8k_sliding_page128", dict(q_lens=[8192], kv_lens=[8192], num_heads=8, num_kv_heads=2, rel_extent=512, window_left=511, page_size=128)),
]  # fmt: skip


def _case(kw):
    return make_case(**kw, head_dim=128, dtype=torch.bfloat16, device="cuda", extra_tokens=3)


def check(name, kw) -> dict:
    case = _case(kw)
    n = sum(case.q_lens)
    out = torch.full_like(case.q, 7.0)
    t0 = time.perf_counter()
    inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    want = case.reference_fp32()[:n]
    got = out[:n].float()
    err = (got - want).abs()
    ok = bool(torch.isfinite(got).all()) and bool(torch.allclose(got, want, atol=2e-2, rtol=2e-2))
    untouched = bool(torch.all(out[n:] == 7.0))
    return dict(case=name, ok=ok and untouched, max_abs_err=float(err.max()), mean_abs_err=float(err.mean()),
                tail_untouched=untouched, first_call_s=round(first, 2))  # fmt: skip


def graph_replay() -> dict:
    """Capture one call in a CUDA graph, change the lengths on the device, replay, compare."""
    kw = dict(q_lens=[200, 1], kv_lens=[900, 300], num_heads=8, num_kv_heads=1, rel_extent=1024, page_size=16)
    case = _case(kw)
    out = torch.zeros_like(case.q)
    args, kwargs = case.args(), case.kwargs()
    inkling_ops.rel_attn(*args, **kwargs, backend="cute", out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        inkling_ops.rel_attn(*args, **kwargs, backend="cute", out=out)
    case.cache_seqlens.copy_(torch.tensor([850, 250], dtype=torch.int32, device="cuda"))
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    eager = torch.zeros_like(out)
    inkling_ops.rel_attn(*args, **kwargs, backend="cute", out=eager)
    n = sum(case.q_lens)
    return dict(case="graph_replay_changed_lengths", ok=bool(torch.equal(out[:n], eager[:n])),
                max_abs_diff=float((out[:n].float() - eager[:n].float()).abs().max()))  # fmt: skip


def timing(name, kw) -> dict:
    from triton.testing import do_bench

    case = _case(kw)
    out = torch.empty_like(case.q)
    row = dict(case=name)
    for backend in ("cute", "triton"):
        fn = lambda: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend=backend, out=out)  # noqa: E731
        try:
            fn()
            torch.cuda.synchronize()
            row[f"{backend}_ms"] = round(do_bench(fn, warmup=50, rep=300, return_mode="median"), 4)
        except Exception as exc:  # noqa: BLE001 - record and go on
            row[f"{backend}_error"] = repr(exc)[:500]
    if "cute_ms" in row and "triton_ms" in row:
        row["cute_over_triton_speed"] = round(row["triton_ms"] / row["cute_ms"], 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    parser.add_argument("--skip-timing", action="store_true")
    ns = parser.parse_args()
    os.makedirs(ns.out, exist_ok=True)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    rows = []
    for name, kw in CHECKS:
        try:
            rows.append(check(name, kw))
        except Exception:  # noqa: BLE001
            rows.append(dict(case=name, ok=False, error=traceback.format_exc()[-2000:]))
        print(json.dumps(rows[-1]), flush=True)
    try:
        rows.append(graph_replay())
    except Exception:  # noqa: BLE001
        rows.append(dict(case="graph_replay", ok=False, error=traceback.format_exc()[-2000:]))
    print(json.dumps(rows[-1]), flush=True)
    if not ns.skip_timing:
        for name, kw in TIMINGS:
            rows.append(timing(name, kw))
            print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(ns.out, "cute_check.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\ncase | ok | max_abs_err | cute ms | triton ms")
    for r in rows:
        print(r["case"], "|", r.get("ok", ""), "|", r.get("max_abs_err", ""), "|", r.get("cute_ms", ""), "|",
              r.get("triton_ms", r.get("cute_error", "")))  # fmt: skip


if __name__ == "__main__":
    main()
