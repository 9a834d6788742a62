"""One backend on invalid metadata, in a process of its own (for tests/test_conformance.py).

Device-resident metadata is never validated without checked mode, so a backend must clamp it
(inkling_ops/metadata.py). A backend that does not may read out of bounds, which can crash
the process (a segfault under Triton's interpreter, an illegal address on a GPU) or return
garbage. Run from here, a crash fails only the test that started this script, by name, and the
test compares what comes back with the clamped semantics.

    python tests/invalid_metadata_probe.py BACKEND DEVICE OUT_PATH

writes ``{variant: out}`` (out on the CPU) to OUT_PATH with ``torch.save``.
"""

from __future__ import annotations

import sys

import torch

#: What ``out`` holds before the call; rows no (clamped) request owns must keep it.
SENTINEL = 7.0


def _clean(cache: torch.Tensor, generator: torch.Generator) -> None:
    """Replace the NaN / inf make_case plants with finite random values: here the point is where
    a backend reads, and any read must produce a finite, predictable result."""
    bad = ~torch.isfinite(cache)
    cache[bad] = torch.randn(int(bad.sum()), generator=generator).to(cache.dtype)


def invalid_cases(dtype: torch.dtype = torch.float32, head_dim: int = 32) -> dict:
    """Variant name -> RelAttnCase (on the CPU) with invalid metadata. Two requests (q_lens 4, 3;
    kv_lens 20, 9; page 16, block-table width 3) and 3 rows past the last request, 10 rows in all.
    max_seqlen_q is the row count, so that no clamped request is longer than it."""
    from inkling_ops.testing import make_case

    def base():
        g = torch.Generator().manual_seed(5)
        case = make_case(
            [4, 3], [20, 9], num_heads=4, num_kv_heads=2, head_dim=head_dim, extra_tokens=3, dtype=dtype, generator=g
        )
        _clean(case.key_cache, g)
        _clean(case.value_cache, g)
        case.max_seqlen_q = case.q.shape[0]
        return case

    cases = {}
    c = base()  # block ids below 0, at num_blocks and far past it, in pages that are read
    c.block_table[0, 0] = -7
    c.block_table[0, 1] = c.key_cache.shape[0]
    c.block_table[1, 0] = 1 << 29
    cases["block_ids_out_of_range"] = c
    c = base()  # KV lengths past what the block-table row addresses (reads its huge unused entry), and negative
    c.cache_seqlens = torch.tensor([10_000, -4], dtype=torch.int32)
    cases["cache_seqlens_past_table"] = c
    c = base()  # cu_seqlens_q decreasing, its first request past the real rows
    c.cu_seqlens_q = torch.tensor([0, 9, 5], dtype=torch.int32)
    cases["cu_seqlens_q_decreasing"] = c
    c = base()  # cu_seqlens_q ending far past the rows of q
    c.cu_seqlens_q = torch.tensor([0, 4, 40], dtype=torch.int32)
    cases["cu_seqlens_q_overlong"] = c
    c = base()  # everything at once
    c.cu_seqlens_q = torch.tensor([0, 9, 5], dtype=torch.int32)
    c.cache_seqlens = torch.tensor([10_000, -4], dtype=torch.int32)
    c.block_table[0, 0] = -7
    c.block_table[1, 0] = 1 << 29
    cases["all_at_once"] = c
    return cases


def main(argv: list[str]) -> None:
    import inkling_ops

    backend, device, path = argv
    dtype, head_dim = (torch.float32, 32) if device == "cpu" else (torch.bfloat16, 128)
    outs = {}
    for name, case in invalid_cases(dtype, head_dim).items():
        case = case.to(device)
        out = torch.full_like(case.q, SENTINEL)
        with inkling_ops.checked_mode(False):
            inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend=backend, out=out)
        outs[name] = out.cpu()
    torch.save(outs, path)


if __name__ == "__main__":
    main(sys.argv[1:])
