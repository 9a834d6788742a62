"""The Triton backend on a CUDA device, beyond the conformance matrix (tests/test_conformance.py):
the launch cache, other head dims, no host syncs, CUDA-graph capture with changing metadata,
opt-in configurations and torch.compile(reduce-overhead).

Skips cleanly without CUDA. Tolerances are vLLM's for bf16 kernels against fp32 references.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import inkling_ops
from inkling_ops.testing import make_case
from lab_tools import load_tool

tuning_candidates = load_tool("tuning").candidates

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEV = "cuda"
TOL = dict(atol=2e-2, rtol=2e-2)

# (id, make_case kwargs): cases the kernel-specific tests below reuse. The backend-level matrix
# (bf16, pages 16 / 64 / 128 and 24 / 48 / 96, separate and packed K/V, forced splits) is
# tests/conformance_cases.py, run by tests/test_conformance.py.
MATRIX = [
    ("chunked_16_2", dict(q_lens=[300, 129, 1], kv_lens=[2000, 700, 1500], num_heads=16, num_kv_heads=2, rel_extent=1024)),
    ("decode_64_8", dict(q_lens=[1] * 5, kv_lens=[3000, 17, 1024, 1025, 2], num_heads=64, num_kv_heads=8, rel_extent=1024)),
    ("decode_sliding_64_16", dict(q_lens=[1] * 4, kv_lens=[3000, 17, 512, 513], num_heads=64, num_kv_heads=16, rel_extent=512, window_left=511)),
]


def _offset_copy(t: torch.Tensor, elements: int = 1) -> torch.Tensor:
    """A copy of ``t`` whose storage starts ``elements`` into a fresh buffer: same values and
    strides, a data pointer off 16-byte alignment."""
    buf = torch.empty(t.numel() + elements, dtype=t.dtype, device=t.device)
    view = buf[elements:].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.parametrize("case_id", ["chunked_16_2", "decode_64_8", "decode_sliding_64_16"])
def test_launch_cache_variants_in_one_process(case_id):
    """The backend's compiled kernels, keyed by CompileKey (its `aligned` field among others), must be the variant for
    each call: the same shapes with 16-byte aligned tensors, then q / rel_logits / out off
    alignment, then float16, then aligned bfloat16 again, all in one process."""
    base = make_case(**dict(MATRIX)[case_id], head_dim=128, page_size=16, dtype=torch.bfloat16, device=DEV)
    n = sum(base.q_lens)
    ref = _reference_fp32(base)
    misaligned = dataclasses.replace(base, q=_offset_copy(base.q), rel_logits=_offset_copy(base.rel_logits))
    assert misaligned.q.data_ptr() % 16 and misaligned.rel_logits.data_ptr() % 16
    half = base.to(DEV)
    half = dataclasses.replace(
        half, q=half.q.half(), key_cache=half.key_cache.half(), value_cache=half.value_cache.half(),
        rel_logits=half.rel_logits.half(),
    )  # fmt: skip
    for case, out in [
        (base, torch.empty_like(base.q)),
        (misaligned, _offset_copy(torch.zeros_like(base.q))),
        (half, torch.empty_like(half.q)),
        (base, torch.empty_like(base.q)),
    ]:
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), out=out)
        torch.testing.assert_close(out[:n].float(), ref[:n], **TOL)


@pytest.mark.parametrize("head_dim", [64, 256])
def test_other_head_dims(head_dim):
    case = make_case(q_lens=[130, 1], kv_lens=[400, 900], num_heads=8, num_kv_heads=2, rel_extent=256,
                     head_dim=head_dim, dtype=torch.float16, device=DEV)  # fmt: skip
    ref = _reference_fp32(case)
    torch.testing.assert_close(inkling_ops.rel_attn(*case.args(), **case.kwargs()).float(), ref, **TOL)


@pytest.mark.parametrize("q_lens,kv_lens", [([1] * 8, [4000] * 8), ([700, 3], [2000, 3])], ids=["decode", "prefill"])
def test_no_host_sync(q_lens, kv_lens):
    case = make_case(q_lens=q_lens, kv_lens=kv_lens, num_heads=8, num_kv_heads=1, rel_extent=1024, head_dim=128,
                     dtype=torch.bfloat16, device=DEV)  # fmt: skip
    out = torch.empty_like(case.q)
    inkling_ops.rel_attn(*case.args(), **case.kwargs(), out=out)  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), out=out)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _replay_with_new_metadata(make, mutate, replays=3):
    """Capture one call in a CUDA graph, then mutate metadata in place and compare each replay."""
    case = make()
    out = torch.zeros_like(case.q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), out=out)  # warm-up compiles
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), out=out)
    for step in range(replays):
        mutate(case, step)
        graph.replay()
        torch.cuda.synchronize()
        n = int(case.cu_seqlens_q[-1])
        torch.testing.assert_close(out[:n].float(), _reference_fp32(case)[:n], **TOL)


def _scramble_pages(case, step):
    """Point every block-table entry at a random block (valid ids), and clean the planted garbage."""
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(0, case.key_cache.shape[0], tuple(case.block_table.shape), generator=gen)
    case.block_table.copy_(ids.to(case.block_table))
    case.key_cache.nan_to_num_(0.5, 0.5, 0.5)
    case.value_cache.nan_to_num_(0.5, 0.5, 0.5)


def test_cuda_graph_decode_changing_metadata():
    def make():
        return make_case(q_lens=[1] * 6, kv_lens=[900, 33, 2048, 1, 700, 1500], num_heads=8, num_kv_heads=1,
                         rel_extent=1024, head_dim=128, dtype=torch.bfloat16, device=DEV, spare_blocks=40,
                         extra_table_cols=4)  # fmt: skip

    def mutate(case, step):
        grown = torch.clamp(case.cache_seqlens + 17 * (step + 1), max=case.block_table.shape[1] * 16 - 64)
        case.cache_seqlens.copy_(grown)
        _scramble_pages(case, step)

    _replay_with_new_metadata(make, mutate)


PREFILL_GRAPH_CASES = [
    # sliding layer, window inside the bias extent: one launch
    ("sliding_one_pass", dict(q_lens=[300, 200, 12], kv_lens=[800, 200, 400], num_heads=8, num_kv_heads=2,
                              rel_extent=512, window_left=511)),
    # global layer: two launches (plain tiles, then the rest)
    ("global_two_pass", dict(q_lens=[300, 200, 12], kv_lens=[1500, 900, 400], num_heads=8, num_kv_heads=1,
                             rel_extent=256)),
]  # fmt: skip


@pytest.mark.parametrize("kwargs", [c[1] for c in PREFILL_GRAPH_CASES], ids=[c[0] for c in PREFILL_GRAPH_CASES])
def test_cuda_graph_prefill_changing_metadata(kwargs):
    def make():
        return make_case(**kwargs, head_dim=128, dtype=torch.bfloat16, device=DEV)

    splits = [[0, 100, 400, 512], [0, 300, 301, 512], [0, 12, 262, 512]]  # each q_len <= max_seqlen_q (300)

    def mutate(case, step):
        cu = torch.tensor(splits[step], dtype=torch.int32, device=DEV)
        case.cu_seqlens_q.copy_(cu)
        q_lens = cu[1:] - cu[:-1]
        case.cache_seqlens.copy_(torch.maximum(case.cache_seqlens, q_lens.to(torch.int32)))
        _scramble_pages(case, step)

    _replay_with_new_metadata(make, mutate)


@pytest.mark.parametrize("bias_ahead", [False, True])
def test_opt_in_configs_eager_and_graph(bias_ahead):
    """A tuner candidate that is off by default in decode: the bias loaded one tile ahead.
    Eager and CUDA-graph replay against the reference."""
    from inkling_ops.kernels.triton_configs import FwdConfig

    case = make_case(q_lens=[1, 3, 1], kv_lens=[5000, 300, 3], num_heads=8, num_kv_heads=1, rel_extent=1024,
                     head_dim=128, dtype=torch.bfloat16, device=DEV)  # fmt: skip
    ref = _reference_fp32(case)
    n = sum(case.q_lens)
    out = torch.zeros_like(case.q)

    def call():
        case.run_triton(out, num_splits=8, config=FwdConfig(16, 64, 4, 2, bias_ahead=bias_ahead))

    call()
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:n].float(), ref[:n], **TOL)
    out.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:n].float(), ref[:n], **TOL)


@pytest.mark.parametrize("kind,config", tuning_candidates(), ids=lambda v: str(v))
def test_every_tuning_candidate(kind, config):
    """Every configuration the tuner times, compiled (inline-PTX gather, register caps, two
    passes), against the reference: ragged global and sliding prefill with plain, band and
    window-edge tiles, and split-KV decode. The interpreter test of the same candidates cannot
    run the PTX gather."""
    if kind == "prefill":
        cases = [
            make_case(q_lens=[600, 70, 1], kv_lens=[1500, 700, 90], num_heads=8, num_kv_heads=1, rel_extent=256,
                      head_dim=128, page_size=16, dtype=torch.bfloat16, device=DEV, extra_tokens=2),
            make_case(q_lens=[500, 33], kv_lens=[1300, 600], num_heads=8, num_kv_heads=2, rel_extent=128,
                      window_left=300, head_dim=128, page_size=128, dtype=torch.bfloat16, device=DEV, extra_tokens=2),
        ]  # fmt: skip
        splits = 1
    else:
        cases = [
            make_case(q_lens=[1, 2, 1], kv_lens=[3000, 90, 1025], num_heads=8, num_kv_heads=1, rel_extent=1024,
                      head_dim=128, page_size=16, dtype=torch.bfloat16, device=DEV, extra_tokens=2),
        ]  # fmt: skip
        splits = 5
    for case in cases:
        n = sum(case.q_lens)
        ref = _reference_fp32(case)
        out = torch.full_like(case.q, 3.0)
        case.run_triton(out, num_splits=splits, config=config)
        torch.cuda.synchronize()
        assert torch.isfinite(out[:n]).all()
        torch.testing.assert_close(out[:n].float(), ref[:n], **TOL)
        assert torch.all(out[n:] == 3.0), "rows past cu_seqlens_q[-1] were written"


def test_compile_reduce_overhead_no_cudagraph_skips():
    from torch._dynamo.utils import counters

    case = make_case(q_lens=[1] * 4, kv_lens=[100, 2000, 5, 64], num_heads=8, num_kv_heads=1, rel_extent=1024,
                     head_dim=128, dtype=torch.bfloat16, device=DEV)  # fmt: skip

    def step(q, k, v, bt, sl, cu, rel):
        return inkling_ops.rel_attn(q * 1.0, k, v, block_table=bt, cache_seqlens=sl, cu_seqlens_q=cu,
                                    rel_logits=rel, max_seqlen_q=1, softmax_scale=1 / 128) + 1.0  # fmt: skip

    args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits)  # fmt: skip
    counters.clear()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        got = compiled(*args)
    torch.cuda.synchronize()
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    torch.testing.assert_close(got.float(), _reference_fp32(case) + 1.0, **TOL)


def _reference_fp32(case) -> torch.Tensor:
    """The reference backend on fp32 copies of the inputs (same device)."""
    return case.reference_fp32()
