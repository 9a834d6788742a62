"""A few small calls of the CuTe backend for compute-sanitizer (lab tool; meta/tools/cute_sanitize.sh).

    python3 meta/tools/cute_sanitize_cases.py [--repeat N]     # CUTE_SANITIZE_HEAD_DIM=64: the cases at head_dim 64

Each case goes through ``inkling_ops.rel_attn(..., backend="cute")`` and is compared with the
fp32 reference (atol = rtol = 2e-2). The cases are chosen to reach the edges a sanitizer
checks: ragged batches (a decode row beside prefill rows, KV lengths that end inside a page and
inside a key tile), NaN in the unused pages and huge ids in the unused block-table entries
(``make_case`` plants them), q rows past the last request that the kernel must leave alone,
a sliding window, page 16 / 64 / 128, a K/V cache packed as vLLM stores it, and GQA groups of 8,
4 and 1. Small enough that racecheck finishes in minutes. Exits 1 when a case is wrong.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import inkling_ops  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402

CASES = [
    ("ragged_g8_page16", dict(q_lens=[37, 1, 130], kv_lens=[200, 65, 300], num_heads=8, num_kv_heads=1, rel_extent=64, page_size=16)),
    ("sliding_g4_page64", dict(q_lens=[150, 3], kv_lens=[400, 77], num_heads=8, num_kv_heads=2, rel_extent=64, window_left=100, page_size=64)),
    ("packed_mha_page128", dict(q_lens=[1, 129], kv_lens=[129, 300], num_heads=4, num_kv_heads=4, rel_extent=136, page_size=128, packed_kv=True)),
]  # fmt: skip


def run_case(name: str, kw: dict) -> bool:
    head_dim = int(os.environ.get("CUTE_SANITIZE_HEAD_DIM", "128"))  # 64: the kernel's other head_dim
    case = make_case(**kw, head_dim=head_dim, dtype=torch.bfloat16, device="cuda", extra_tokens=5, spare_blocks=4,
                     extra_table_cols=3)  # fmt: skip
    n = sum(case.q_lens)
    out = torch.full_like(case.q, 7.0)
    inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)
    torch.cuda.synchronize()
    got, want = out[:n].float(), case.reference_fp32()[:n]
    ok = bool(torch.isfinite(got).all()) and bool(torch.allclose(got, want, atol=2e-2, rtol=2e-2))
    untouched = bool(torch.all(out[n:] == 7.0))
    print(f"{name:22s} {'ok' if ok and untouched else 'WRONG'}  max abs err {float((got - want).abs().max()):.4f}  "
          f"rows past the last request untouched: {untouched}", flush=True)  # fmt: skip
    return ok and untouched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="run the cases this many times (the first loads or compiles)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device (an H100/H200: the kernel is sm_90a)")
        return 2
    good = all(run_case(name, kw) for _ in range(args.repeat) for name, kw in CASES)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
