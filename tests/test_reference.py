"""Correctness of rel_attn on CPU (the reference backend) against independent oracles.

Oracles: ``brute_force.rel_attn_brute_force`` (float64, written from contract section 1) and
Hugging Face transformers' eager Inkling attention (``InklingRelativeLogits`` +
``eager_attention_forward``), which computes the same function densely. Cases come from
``inkling_ops.testing.make_case``, which shuffles pages and plants NaN/inf in every cache slot
and block-table entry a correct implementation must not read.
"""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch
from brute_force import rel_attn_brute_force
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import inkling_ops
from inkling_ops.reference import DEFAULT_CHUNK_ELEMENTS, MAX_KEY_CHUNK, plan_chunks, rel_attn_reference
from inkling_ops.testing import make_case

FP32_TOL = dict(atol=1e-5, rtol=1e-5)
LOW_PRECISION_TOL = dict(atol=2e-2, rtol=2e-2)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _run(case, **extra) -> torch.Tensor:
    return inkling_ops.rel_attn(*case.args(), **case.kwargs(), **extra)


def _oracle(case) -> torch.Tensor:
    return rel_attn_brute_force(*case.args(), **case.kwargs())


def _assert_matches_oracle(case, got: torch.Tensor, tol=FP32_TOL) -> None:
    want = _oracle(case)
    assert got.dtype == case.q.dtype and got.shape == case.q.shape
    assert torch.isfinite(got).all(), "non-finite output: a kernel read planted garbage"
    torch.testing.assert_close(got.double(), want, **tol)


# --------------------------------------------------------------------------------------------
# The case matrix: (id, make_case kwargs). Every case uses shuffled pages and garbage in unused
# blocks; most also have garbage rows past the last request, spare blocks and wide tables.
# --------------------------------------------------------------------------------------------
CASES = [
    # ragged batches, q_len == kv_len (fresh prefill)
    ("prefill_ragged", dict(q_lens=[5, 17, 1], kv_lens=[5, 17, 1])),
    # chunked prefill / extend: q_len < kv_len
    ("extend_ragged", dict(q_lens=[7, 12, 3], kv_lens=[40, 75, 3], extra_tokens=2)),
    ("extend_single_long", dict(q_lens=[20], kv_lens=[150], rel_extent=128, page_size=64)),
    # decode (q_len 1) and speculative decode (q_len up to 9)
    ("decode_batch", dict(q_lens=[1] * 5, kv_lens=[1, 17, 33, 64, 100], rel_extent=128)),
    ("decode_kv1", dict(q_lens=[1], kv_lens=[1])),
    ("speculative", dict(q_lens=[9, 3, 5, 2], kv_lens=[50, 9, 120, 2], extra_tokens=1)),
    # rel_extent smaller and larger than the sequence
    ("E16_kv_gt_E", dict(q_lens=[6, 30], kv_lens=[80, 30], rel_extent=16)),
    ("E128_kv_lt_E", dict(q_lens=[10, 4], kv_lens=[30, 20], rel_extent=128)),
    ("E1024_global", dict(q_lens=[6, 2, 12], kv_lens=[60, 300, 12], rel_extent=1024)),
    ("E1", dict(q_lens=[4, 1], kv_lens=[9, 5], rel_extent=1)),
    # sliding windows: E == left + 1 (Inkling's sliding layers) and E != left + 1
    ("win0_E1", dict(q_lens=[5, 1], kv_lens=[12, 7], window_left=0, rel_extent=1)),
    ("win0_E16", dict(q_lens=[5, 1], kv_lens=[12, 7], window_left=0, rel_extent=16)),
    ("win5_E6", dict(q_lens=[9, 1, 4], kv_lens=[30, 20, 4], window_left=5, rel_extent=6)),
    ("win5_E3", dict(q_lens=[9, 1], kv_lens=[30, 20], window_left=5, rel_extent=3)),
    ("win5_E128", dict(q_lens=[9, 1], kv_lens=[30, 20], window_left=5, rel_extent=128)),
    ("win31_E32", dict(q_lens=[40, 2], kv_lens=[90, 70], window_left=31, rel_extent=32, page_size=16)),
    ("win31_E8", dict(q_lens=[40, 2], kv_lens=[90, 70], window_left=31, rel_extent=8)),
    ("win31_E1024_prefill", dict(q_lens=[64], kv_lens=[64], window_left=31, rel_extent=1024)),
    # GQA group sizes 1, 2, 4, 8, 16
    ("gqa_g1", dict(q_lens=[4, 3], kv_lens=[20, 3], num_heads=4, num_kv_heads=4)),
    ("gqa_g2", dict(q_lens=[4, 3], kv_lens=[20, 3], num_heads=4, num_kv_heads=2)),
    ("gqa_g4", dict(q_lens=[4, 3], kv_lens=[20, 3], num_heads=8, num_kv_heads=2, window_left=7, rel_extent=8)),
    ("gqa_g8", dict(q_lens=[4, 3], kv_lens=[20, 3], num_heads=8, num_kv_heads=1)),
    ("gqa_g16", dict(q_lens=[2, 1], kv_lens=[33, 9], num_heads=16, num_kv_heads=1, head_dim=16)),
    ("gqa_g4_16x4", dict(q_lens=[3, 1], kv_lens=[25, 17], num_heads=16, num_kv_heads=4, head_dim=16)),
    # page sizes 16 / 64 / 128 and odd ones
    ("page64", dict(q_lens=[3, 9], kv_lens=[130, 9], page_size=64, rel_extent=128)),
    ("page128", dict(q_lens=[3, 9], kv_lens=[300, 9], page_size=128, rel_extent=128, extra_table_cols=2)),
    ("page3", dict(q_lens=[4, 6], kv_lens=[23, 6], page_size=3)),
    ("page1", dict(q_lens=[2, 3], kv_lens=[11, 5], page_size=1, window_left=4, rel_extent=5)),
    # K/V as strided views of one packed (num_blocks, 2, page, Hkv, D) tensor
    ("packed_kv", dict(q_lens=[5, 1, 3], kv_lens=[40, 17, 3], packed_kv=True, num_kv_heads=2)),
    ("packed_kv_page3_win", dict(q_lens=[6, 1], kv_lens=[19, 8], packed_kv=True, page_size=3, window_left=5)),
    # requests with q_len 0 (anywhere in the batch), garbage rows and blocks
    ("qlen0_middle", dict(q_lens=[3, 0, 4], kv_lens=[10, 25, 4], extra_tokens=3)),
    ("qlen0_first_last", dict(q_lens=[0, 2, 0], kv_lens=[7, 9, 0], extra_tokens=2, spare_blocks=5)),
    ("garbage_everywhere", dict(q_lens=[3, 2], kv_lens=[17, 33], extra_tokens=4, spare_blocks=6, extra_table_cols=3)),
    # Inkling's real head_dim and scale 1 / D
    ("head_dim128", dict(q_lens=[3, 1], kv_lens=[21, 40], head_dim=128, num_heads=8, num_kv_heads=2)),
    ("scale_one", dict(q_lens=[4], kv_lens=[12], softmax_scale=1.0, head_dim=8)),
]


@pytest.mark.parametrize("seed,params", [pytest.param(i, p, id=name) for i, (name, p) in enumerate(CASES)])
def test_matches_brute_force_fp32(seed, params):
    """rel_attn (fp32, reference backend) equals the float64 brute force on the case matrix."""
    case = make_case(**params, generator=_gen(100 + seed))
    _assert_matches_oracle(case, _run(case))


LOW_PRECISION_CASES = [
    ("prefill_gqa4", dict(q_lens=[9, 4], kv_lens=[9, 30], num_heads=8, num_kv_heads=2)),
    ("decode_win5_E6", dict(q_lens=[1, 1, 1], kv_lens=[3, 20, 64], window_left=5, rel_extent=6)),
    ("spec_packed_page3", dict(q_lens=[5, 2], kv_lens=[33, 9], packed_kv=True, page_size=3, rel_extent=128)),
    ("E1024_qlen0", dict(q_lens=[0, 6], kv_lens=[5, 70], rel_extent=1024, extra_tokens=2)),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("params", [pytest.param(p, id=name) for name, p in LOW_PRECISION_CASES])
def test_matches_brute_force_low_precision(params, dtype):
    """bf16/fp16 inputs match the float64 brute force of the same rounded inputs at 2e-2."""
    case = make_case(**params, dtype=dtype, generator=_gen(7))
    _assert_matches_oracle(case, _run(case), tol=LOW_PRECISION_TOL)


def test_max_seqlen_q_is_only_an_upper_bound():
    """A loose max_seqlen_q (an upper bound, not the exact max) gives the same result."""
    case = make_case([3, 1, 5], [20, 9, 5], num_kv_heads=2, generator=_gen(3))
    tight = _run(case)
    loose = _run(dataclasses.replace(case, max_seqlen_q=64))
    assert torch.equal(tight, loose)
    _assert_matches_oracle(case, tight)


# --------------------------------------------------------------------------------------------
# The relative bias
# --------------------------------------------------------------------------------------------
def test_bias_changes_the_output():
    """Zeroing rel_logits moves the output by a clearly non-trivial margin."""
    case = make_case([6, 1], [30, 12], rel_extent=16, generator=_gen(11))
    with_bias = _run(case)
    without = _run(dataclasses.replace(case, rel_logits=torch.zeros_like(case.rel_logits)))
    assert (with_bias - without).abs().max() > 0.2
    # and the brute force agrees about both
    _assert_matches_oracle(case, with_bias)
    _assert_matches_oracle(dataclasses.replace(case, rel_logits=torch.zeros_like(case.rel_logits)), without)


def _visible_band_mask(case) -> torch.Tensor:
    """(T, E) bool: True where rel_logits[t, :, d] can be read by row t (0 <= d <= q_abs, d <= left)."""
    num_tokens, extent = case.rel_logits.shape[0], case.rel_logits.shape[2]
    left = case.window_size[0]
    mask = torch.zeros(num_tokens, extent, dtype=torch.bool)
    start = 0
    for q_len, kv_len in zip(case.q_lens, case.kv_lens):
        for i in range(q_len):
            q_abs = kv_len - q_len + i
            last = q_abs if left < 0 else min(q_abs, left)
            mask[start + i, : min(last + 1, extent)] = True
        start += q_len
    return mask


@pytest.mark.parametrize(
    "params",
    [
        pytest.param(dict(q_lens=[8, 3], kv_lens=[8, 5], rel_extent=16), id="rows_near_start_E16"),
        pytest.param(dict(q_lens=[4, 1], kv_lens=[30, 9], window_left=5, rel_extent=16), id="window5_E16"),
        pytest.param(dict(q_lens=[6], kv_lens=[6], rel_extent=1024, extra_tokens=2), id="E1024_short_seq"),
    ],
)
def test_unreachable_bias_entries_do_not_matter(params):
    """rel_logits[t, h, d] with d outside row t's visible band (d > q_abs, or d > left) never affects out.

    Those entries are set to NaN: any use of them (e.g. another row's bias, or a bias on a
    masked key that is not masked afterwards) poisons the output. As a control, perturbing one
    reachable entry of one row must change that row, and only that row.
    """
    case = make_case(**params, generator=_gen(5))
    band = _visible_band_mask(case)
    assert (~band).any() and band.any(), "the case must have both reachable and unreachable entries"
    reference = _run(case)
    poisoned = case.rel_logits.clone()
    poisoned.masked_fill_(~band[:, None, :], float("nan"))
    got = _run(dataclasses.replace(case, rel_logits=poisoned))
    torch.testing.assert_close(got, reference, atol=0.0, rtol=0.0)

    # Control: a reachable entry does matter (so the test above could have failed).
    t, d = (band & (torch.arange(band.shape[1]) > 0)).nonzero()[-1].tolist()
    bumped = case.rel_logits.clone()
    bumped[t, 0, d] += 5.0
    changed = _run(dataclasses.replace(case, rel_logits=bumped))
    assert (changed[t, 0] - reference[t, 0]).abs().max() > 1e-3
    assert torch.equal(changed[:t], reference[:t]) and torch.equal(changed[t + 1 :], reference[t + 1 :])


def test_distances_at_least_E_get_zero_bias_not_masked():
    """Keys at distance >= E stay visible with zero bias (neither masked nor given rel_logits[E-1]).

    With a constant bias c on every in-band distance: rows whose keys are all within E see a
    uniform shift (softmax-invariant: output equals the unbiased one), while rows with keys at
    d >= E must differ both from the unbiased output (a clamp-to-E-1 bug) and from attention
    restricted to d < E (a masking bug).
    """
    extent, q_len, kv_len = 8, 30, 30
    case = make_case(
        [q_len], [kv_len], rel_extent=extent, num_heads=2, head_dim=8, softmax_scale=0.05, generator=_gen(2)
    )
    const = dataclasses.replace(case, rel_logits=torch.full_like(case.rel_logits, 3.0))
    zero = dataclasses.replace(case, rel_logits=torch.zeros_like(case.rel_logits))
    got_const, got_zero = _run(const), _run(zero)
    # window (E-1, 0) = attention restricted to d < E, with the same constant bias
    got_masked = _run(dataclasses.replace(const, window_size=(extent - 1, 0)))

    near = slice(0, extent)  # q_abs < E: every visible key has d < E
    far = slice(extent + 2, q_len)  # plenty of keys at d >= E
    torch.testing.assert_close(got_const[near], got_zero[near], **FP32_TOL)
    torch.testing.assert_close(got_const[near], got_masked[near], **FP32_TOL)
    assert (got_const[far] - got_zero[far]).abs().amax(dim=(1, 2)).min() > 1e-3
    assert (got_const[far] - got_masked[far]).abs().amax(dim=(1, 2)).min() > 1e-3
    _assert_matches_oracle(const, got_const)


# --------------------------------------------------------------------------------------------
# Rows past the last request
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "q_lens,kv_lens,extra",
    [
        pytest.param([3, 2], [10, 2], 4, id="extra_rows"),
        pytest.param([3, 0], [10, 6], 2, id="extra_rows_after_qlen0"),
        pytest.param([0, 0], [4, 9], 3, id="no_query_rows_at_all"),
    ],
)
def test_rows_past_last_request(q_lens, kv_lens, extra):
    """out= leaves rows past cu_seqlens_q[-1] bitwise untouched; the functional op zeroes them."""
    case = make_case(q_lens, kv_lens, extra_tokens=extra, generator=_gen(9))
    used = sum(q_lens)
    sentinel = torch.full_like(case.q, -1234.5)
    sentinel[used + 1 :] = float("nan")  # NaN sentinels too: they must survive bit for bit
    out = sentinel.clone()
    returned = _run(case, out=out)
    assert returned is out
    assert torch.equal(out[used:].view(torch.int32), sentinel[used:].view(torch.int32))

    functional = _run(case)
    assert torch.equal(functional[used:], torch.zeros_like(functional[used:]))
    assert torch.equal(out[:used], functional[:used])
    _assert_matches_oracle(case, functional)

    # the out= op straight through torch.ops, too
    out2 = sentinel.clone()
    torch.ops.inkling.rel_attn_out.default(
        *case.args(), **{**case.kwargs(), "window_size": list(case.window_size)}, out=out2
    )
    assert torch.equal(out2.view(torch.int32), out.view(torch.int32))


# --------------------------------------------------------------------------------------------
# Chunking (bounded memory) of the reference
# --------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    q_len=st.integers(1, 1 << 20),
    key_span=st.integers(1, 1 << 21),
    num_heads=st.integers(1, 128),
    budget=st.one_of(st.integers(1, 1 << 24), st.just(DEFAULT_CHUNK_ELEMENTS)),
)
def test_plan_chunks_respects_budget(q_len, key_span, num_heads, budget):
    """num_heads * q_chunk * k_chunk <= budget (whenever budget >= num_heads); chunks in range."""
    q_chunk, k_chunk = plan_chunks(q_len, key_span, num_heads, budget)
    assert 1 <= q_chunk <= q_len
    assert 1 <= k_chunk <= min(key_span, MAX_KEY_CHUNK)
    if budget >= num_heads:
        assert num_heads * q_chunk * k_chunk <= budget
    else:
        assert q_chunk == 1 and k_chunk == 1


def test_plan_chunks_uses_the_budget():
    """The plan is not degenerate: when work is plentiful it fills a good part of the budget."""
    q_chunk, k_chunk = plan_chunks(4096, 4096, 8)
    assert 8 * q_chunk * k_chunk >= DEFAULT_CHUNK_ELEMENTS // 2


@pytest.mark.parametrize(
    "num_tokens,kv_len,num_heads,window_left",
    [
        pytest.param(32768, 32768, 8, -1, id="prefill32k_global"),
        pytest.param(32768, 32768, 8, 511, id="prefill32k_sliding"),
        pytest.param(16384, 1 << 20, 64, -1, id="chunk16k_kv1M_64heads"),
    ],
)
def test_long_prefill_plan_never_implies_a_full_score_buffer(num_tokens, kv_len, num_heads, window_left):
    """Planning a 32K-token prefill (pure plan math) keeps every score block far below T x kv_len x heads."""
    key_span = kv_len if window_left < 0 else min(kv_len, window_left + num_tokens)  # as the reference computes it
    q_chunk, k_chunk = plan_chunks(num_tokens, key_span, num_heads)
    block = num_heads * q_chunk * k_chunk
    assert block <= DEFAULT_CHUNK_ELEMENTS
    assert block * 64 <= num_tokens * kv_len * num_heads
    assert q_chunk < num_tokens and k_chunk <= MAX_KEY_CHUNK


class _LargestAllocation(TorchDispatchMode):
    """Records the element count of the largest fresh (non-view) tensor any aten op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        if func.is_view or (returns and returns[0].alias_info is not None):
            return result  # views and in-place ops allocate nothing
        for r in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(r, torch.Tensor):
                self.largest = max(self.largest, r.numel())
        return result


def test_reference_memory_stays_within_the_plan():
    """A 256-token prefill with a small budget allocates nothing near T x kv_len x heads.

    Every intermediate is bounded by the score-block budget or by one key chunk broadcast over
    the query heads (Hq x D x key_chunk), whichever is larger.
    """
    num_heads, num_kv_heads, head_dim, tokens, budget = 8, 2, 8, 256, 1 << 10
    case = make_case(
        [tokens], [tokens], num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=64,
        generator=_gen(4),
    )  # fmt: skip
    _, k_chunk = plan_chunks(tokens, tokens, num_heads, budget)
    out = torch.empty_like(case.q)
    with _LargestAllocation() as mode:
        rel_attn_reference(
            case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits, out, softmax_scale=case.softmax_scale, chunk_elements=budget,
        )  # fmt: skip
    assert mode.largest <= max(budget, num_heads * head_dim * k_chunk)
    assert mode.largest * 32 <= tokens * tokens * num_heads
    torch.testing.assert_close(out, _run(case), **FP32_TOL)


CHUNK_CASES = [
    ("long_kv_decode_spec", dict(q_lens=[1, 3], kv_lens=[200, 150], rel_extent=16)),
    ("prefill_E128", dict(q_lens=[40], kv_lens=[40], rel_extent=128, num_heads=4, num_kv_heads=2)),
    ("window31_E32", dict(q_lens=[24, 2], kv_lens=[120, 70], window_left=31, rel_extent=32)),
    ("window12_E1024_page3", dict(q_lens=[12], kv_lens=[60], window_left=12, rel_extent=1024, page_size=3)),
]


@pytest.mark.parametrize("chunk_elements", [64, 24, 7], ids=["budget64", "budget24", "budget7_lt_heads8"])
@pytest.mark.parametrize("params", [pytest.param(p, id=name) for name, p in CHUNK_CASES])
def test_tiny_chunks_match_default(params, chunk_elements):
    """Many query and key chunks (online softmax across key chunks) give the default result."""
    case = make_case(**{"num_heads": 8, **params}, generator=_gen(6))
    default = _run(case)
    out = torch.full_like(case.q, float("nan"))
    rel_attn_reference(
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits, out, softmax_scale=case.softmax_scale, window_left=case.window_size[0],
        chunk_elements=chunk_elements,
    )  # fmt: skip
    num_rows = sum(case.q_lens)
    _, k_chunk = plan_chunks(max(case.q_lens), max(case.kv_lens), case.q.shape[1], chunk_elements)
    left = case.window_size[0]
    assert k_chunk < (left + 1 if left >= 0 else max(case.kv_lens)), "the case must force several key chunks"
    torch.testing.assert_close(out[:num_rows], default[:num_rows], **FP32_TOL)
    _assert_matches_oracle(case, default)


# --------------------------------------------------------------------------------------------
# Independent oracle: Hugging Face transformers' eager Inkling attention
# --------------------------------------------------------------------------------------------
def _paged_from_dense(keys, values, page_size, gen):
    """Scatter per-request dense (kv_len, Hkv, D) K/V into a paged cache with shuffled pages.

    Unused slots hold NaN (keys) / inf (values); unused block-table entries hold huge ids.
    """
    pages = [-(-k.shape[0] // page_size) for k in keys]
    num_blocks = sum(pages) + 2
    num_kv_heads, head_dim = keys[0].shape[1:]
    key_cache = torch.full((num_blocks, page_size, num_kv_heads, head_dim), float("nan"))
    value_cache = torch.full((num_blocks, page_size, num_kv_heads, head_dim), float("inf"))
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.full((len(keys), max(pages) + 1), 1 << 29, dtype=torch.int32)
    at = 0
    for b, (k, v) in enumerate(zip(keys, values)):
        for p in range(pages[b]):
            blk = perm[at]
            at += 1
            table[b, p] = blk
            rows = slice(p * page_size, min((p + 1) * page_size, k.shape[0]))
            n = rows.stop - rows.start
            key_cache[blk, :n] = k[rows]
            value_cache[blk, :n] = v[rows]
    return key_cache, value_cache, table


def _hf_inkling():
    """Hugging Face's Inkling modeling module, or skip: only transformers releases that ship Inkling have it."""
    return pytest.importorskip(
        "transformers.models.inkling.modeling_inkling",
        reason="this transformers has no Inkling model (the HF oracle); install a release that ships it",
    )


HF_CASES = [
    ("ragged_gqa4_E16", dict(q_lens=[4, 1, 7], kv_lens=[4, 20, 30], hq=8, hkv=2, extent=16, window=-1, page=16)),
    ("mha_E1024", dict(q_lens=[5, 3], kv_lens=[40, 3], hq=4, hkv=4, extent=1024, window=-1, page=16)),
    ("sliding_win5_E6", dict(q_lens=[6, 1], kv_lens=[25, 14], hq=4, hkv=1, extent=6, window=5, page=3)),
    ("sliding_win9_E32_qlen0", dict(q_lens=[0, 8, 2], kv_lens=[5, 33, 12], hq=8, hkv=1, extent=32, window=9, page=4)),
    ("gqa16_page64", dict(q_lens=[2, 9], kv_lens=[70, 9], hq=16, hkv=1, extent=64, window=-1, page=64)),
]


@pytest.mark.parametrize("params", [pytest.param(p, id=name) for name, p in HF_CASES])
def test_matches_transformers_eager_inkling(params):
    """Our paged op equals HF's dense eager Inkling attention (InklingRelativeLogits + eager_attention_forward)."""
    hf = _hf_inkling()
    gen = _gen(21)
    q_lens, kv_lens = params["q_lens"], params["kv_lens"]
    hq, hkv, extent, window = params["hq"], params["hkv"], params["extent"], params["window"]
    head_dim, d_rel = 16, 8
    scaling = 1.0 / head_dim
    bias_module = hf.InklingRelativeLogits(d_rel, extent)
    with torch.no_grad():
        bias_module.proj.copy_(torch.randn(d_rel, extent, generator=gen))
    attn_module = types.SimpleNamespace(num_key_value_groups=hq // hkv, training=False)

    qs, keys, values, rel_states = [], [], [], []
    for q_len, kv_len in zip(q_lens, kv_lens):
        qs.append(torch.randn(q_len, hq, head_dim, generator=gen))
        keys.append(torch.randn(kv_len, hkv, head_dim, generator=gen))
        values.append(torch.randn(kv_len, hkv, head_dim, generator=gen))
        rel_states.append(torch.randn(q_len, hq, d_rel, generator=gen) * 0.5)

    expected = []
    with torch.no_grad():
        for q, k, v, r, q_len, kv_len in zip(qs, keys, values, rel_states, q_lens, kv_lens):
            if q_len == 0:
                continue
            q_pos = torch.arange(kv_len - q_len, kv_len)
            k_pos = torch.arange(kv_len)
            position_bias = bias_module(r[None], q_pos, k_pos)  # (1, Hq, q_len, kv_len)
            dist = q_pos[:, None] - k_pos[None, :]
            allowed = dist >= 0
            if window >= 0:
                allowed &= dist <= window
            mask = torch.zeros(q_len, kv_len).masked_fill(~allowed, float("-inf"))[None, None]
            o, _ = hf.eager_attention_forward(
                attn_module, q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                mask, scaling, position_bias=position_bias,
            )  # fmt: skip
            expected.append(o[0])  # (q_len, Hq, D)
        expected = torch.cat(expected)
        rel_logits = torch.cat([r @ bias_module.proj for r in rel_states])  # (T, Hq, E)

    key_cache, value_cache, block_table = _paged_from_dense(keys, values, params["page"], gen)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    got = inkling_ops.rel_attn(
        torch.cat(qs), key_cache, value_cache,
        block_table=block_table, cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32), cu_seqlens_q=cu,
        rel_logits=rel_logits.contiguous(), max_seqlen_q=max(q_lens), softmax_scale=scaling,
        window_size=(window, 0) if window >= 0 else (-1, -1),
    )  # fmt: skip
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)


# --------------------------------------------------------------------------------------------
# Random cases (hypothesis) against the brute force
# --------------------------------------------------------------------------------------------
@st.composite
def random_cases(draw):
    num_reqs = draw(st.integers(1, 3))
    q_lens = draw(st.lists(st.integers(0, 6), min_size=num_reqs, max_size=num_reqs))
    kv_lens = [q + draw(st.integers(0, 40)) for q in q_lens]
    num_kv_heads = draw(st.sampled_from([1, 2]))
    group = draw(st.sampled_from([1, 2, 4]))
    return dict(
        q_lens=q_lens,
        kv_lens=kv_lens,
        num_heads=num_kv_heads * group,
        num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from([4, 8, 16])),
        page_size=draw(st.sampled_from([1, 3, 16, 64])),
        rel_extent=draw(st.sampled_from([1, 4, 16, 64, 1024])),
        window_left=draw(st.sampled_from([-1, 0, 3, 17])),
        packed_kv=draw(st.booleans()),
        extra_tokens=draw(st.integers(0, 2)),
        spare_blocks=draw(st.integers(0, 3)),
        extra_table_cols=draw(st.integers(0, 2)),
        generator=_gen(draw(st.integers(0, 2**16))),
    )


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(params=random_cases())
def test_random_cases_match_brute_force(params):
    """Random ragged/GQA/paged/windowed cases match the float64 brute force."""
    case = make_case(**params)
    _assert_matches_oracle(case, _run(case))
