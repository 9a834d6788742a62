"""The CuTe backend captured in a CUDA graph, then replayed after the call's metadata changed in
place: the split of the query tokens among the requests, the key lengths and the block table,
with NaN in the blocks the new table does not reach and huge ids in its unused entries (issue 17,
"CUDA-graph replays with changed metadata"). Each replay must match the reference and leave the
rows past the batch untouched.

Both grids (the dense one of a single long request, the compact one of a serving batch), both
K/V paths (the gather at page 16, TMA at page 128), global and sliding layers. GPU only (Hopper
with nvidia-cutlass-dsl); skips cleanly elsewhere.
"""

from __future__ import annotations

import pytest
import torch

import inkling_ops
from cute_device import why_no_cute_device
from inkling_ops.backends import cute_backend
from inkling_ops.testing import make_case


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(why_no_cute_device() is not None, reason=str(why_no_cute_device()))]

TOL = dict(atol=2e-2, rtol=2e-2)
HUGE_ID = 2**30

# (id, make_case kwargs, the query splits of the replays: each a cu_seqlens_q with the capture's
# request count and token total, every q_len <= the capture's max_seqlen_q)
CASES = [
    ("serving_global_p16", dict(q_lens=[300] + [1] * 5, kv_lens=[900, 700, 33, 1500, 2048, 400], num_heads=8,
                                num_kv_heads=1, rel_extent=256, page_size=16),
     [[0, 1, 2, 290, 300, 304, 305], [0, 16, 17, 300, 301, 302, 305], [0, 300, 301, 302, 303, 304, 305]]),
    ("serving_sliding_p128", dict(q_lens=[260] + [1] * 3, kv_lens=[1200, 640, 129, 1000], num_heads=8,
                                  num_kv_heads=2, rel_extent=256, window_left=199, page_size=128),
     [[0, 3, 200, 262, 263], [0, 1, 2, 3, 263], [0, 130, 131, 132, 263]]),
    ("prefill_global_p128", dict(q_lens=[700], kv_lens=[900], num_heads=8, num_kv_heads=1, rel_extent=512,
                                 page_size=128),
     [[0, 700], [0, 513], [0, 1]]),
    ("prefill_sliding_p16", dict(q_lens=[400], kv_lens=[400], num_heads=8, num_kv_heads=2, rel_extent=128,
                                 window_left=127, page_size=16),
     [[0, 400], [0, 129], [0, 64]]),
]  # fmt: skip


def _change_metadata(case, cu: torch.Tensor, step: int) -> None:
    """In place: the query split ``cu``, every key length grown by ``61 * (step + 1)`` (at least
    its query length, within the table and the cache), then a new block table (:func:`_remap`)."""
    page = case.key_cache.shape[1]
    capacity = case.block_table.shape[1] * page
    q_lens = (cu[1:] - cu[:-1]).to(torch.int32)
    kv_lens = torch.maximum(torch.clamp(case.cache_seqlens.cpu() + 61 * (step + 1), max=capacity), q_lens)
    if (-(-kv_lens // page)).sum() > case.key_cache.shape[0]:  # past the cache: back to the q lengths plus a page
        kv_lens = torch.clamp(q_lens + page, max=capacity)
    case.cu_seqlens_q.copy_(cu)
    case.cache_seqlens.copy_(kv_lens)
    _remap(case, step)


def _remap(case, step: int) -> None:
    """A new block table: each request's pages at random distinct blocks, its unused entries huge
    ids, and NaN in K and V of every block the new table does not reach."""
    page = case.key_cache.shape[1]
    num_blocks = case.key_cache.shape[0]
    gen = torch.Generator().manual_seed(100 + step)
    lens = case.cache_seqlens.tolist()
    needed = [-(-kv // page) for kv in lens]
    ids = torch.randperm(num_blocks, generator=gen)[: sum(needed)]
    table = torch.full(tuple(case.block_table.shape), HUGE_ID, dtype=torch.int32)
    at = 0
    for b, n in enumerate(needed):
        table[b, :n] = ids[at : at + n]
        at += n
    case.block_table.copy_(table)
    unused = torch.ones(num_blocks, dtype=torch.bool)
    unused[ids] = False
    fresh = torch.randn(case.key_cache.shape, generator=gen).to(case.key_cache)
    case.key_cache.copy_(fresh)
    case.value_cache.copy_(torch.randn(case.value_cache.shape, generator=gen).to(case.value_cache))
    case.key_cache[unused.to(case.key_cache.device)] = float("nan")
    case.value_cache[unused.to(case.key_cache.device)] = float("nan")


@pytest.mark.parametrize("kwargs,splits", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_cute_graph_replays_with_changed_metadata(kwargs, splits):
    case = make_case(**kwargs, head_dim=128, dtype=torch.bfloat16, device="cuda", extra_tokens=5, spare_blocks=120,
                     extra_table_cols=3)  # fmt: skip
    grid = cute_backend.compact_grid(case.problem())
    assert grid == (len(kwargs["q_lens"]) > 1)  # the cases cover both grids
    out = torch.zeros_like(case.q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)  # compiles
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)
    for step, cu in enumerate(splits):
        cu = torch.tensor(cu, dtype=torch.int32)
        _change_metadata(case, cu, step)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        n = int(cu[-1])
        want = case.reference_fp32()
        torch.testing.assert_close(out[:n].float(), want[:n], **TOL, msg=lambda m: f"replay {step}: {m}")
        assert not out[n:].any(), f"replay {step}: rows past the batch were written"
