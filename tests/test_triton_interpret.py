"""The Triton kernels on CPU, under Triton's interpreter, against the reference (small shapes).

TRITON_INTERPRET=1 must be set before the kernel modules are imported; this module sets it
when no CUDA device is present (the kernels are imported lazily by the Triton backend).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import inkling_ops  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402
from lab_tools import load_tool  # noqa: E402
from matrix import rotated  # noqa: E402

tuning_candidates = load_tool("tuning").candidates

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="interpreter tests run on CPU-only machines (GPU machines run tests/test_triton_gpu.py)",
)

# (id, make_case kwargs): cases the kernel-specific tests below reuse. The backend-level matrix
# (every case, split counts 0 / 1 / 3) is tests/conformance_cases.py, run by tests/test_conformance.py.
CASES = [
    ("extend_window_g4_packed", dict(q_lens=[40, 2], kv_lens=[90, 33], window_left=5, num_heads=8, num_kv_heads=2, packed_kv=True)),
    ("decode_batch_E_lt_kv_g8", dict(q_lens=[1, 1, 1], kv_lens=[300, 7, 64], rel_extent=16, num_heads=8)),
    ("spec_verify_q9", dict(q_lens=[9, 4], kv_lens=[150, 9], rel_extent=32, num_heads=2, num_kv_heads=1)),
    ("sliding_E_eq_window", dict(q_lens=[50], kv_lens=[260], rel_extent=32, window_left=31, num_heads=4, num_kv_heads=2)),
    ("page3_odd", dict(q_lens=[4, 2], kv_lens=[11, 5], page_size=3, rel_extent=5, num_heads=2, num_kv_heads=2)),
]


def _check(case, run):
    """``run(out)`` writes the Triton result into ``out``; compare it with the reference backend."""
    n = sum(case.q_lens)
    ref = inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="reference")
    out = torch.full_like(case.q, 7.0)
    run(out)
    torch.testing.assert_close(out[:n], ref[:n], atol=2e-5, rtol=2e-5)
    assert torch.isfinite(out[:n]).all(), "garbage in unused pages reached out"
    assert torch.all(out[n:] == 7.0), "rows past cu_seqlens_q[-1] were written"


def _with_config(case, config, num_splits):
    """A ``run`` for :func:`_check` that launches the kernels with an explicit configuration."""
    return lambda out: case.run_triton(out, num_splits=num_splits, config=config)


# the decode batch's 130-split run is the default run's longest single test (~40 s): slow
@pytest.mark.parametrize(
    "case_id, num_splits",
    [pytest.param("spec_verify_q9", 130, id="spec_verify_q9-130")]
    + [pytest.param(c, n, id=f"{c}-{n}", marks=pytest.mark.slow)
       for c, n in (("decode_batch_E_lt_kv_g8", 130), ("decode_batch_E_lt_kv_g8", 300), ("spec_verify_q9", 300))],
)  # fmt: skip
def test_many_splits_cross_combine_chunks(case_id, num_splits):
    """Many splits, most of them empty; at 300 the combine reads the splits in two chunks."""
    case = make_case(**dict(CASES)[case_id], head_dim=64)
    _check(case, lambda out: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="triton", num_splits=num_splits, out=out))


def test_combine_blocks():
    from inkling_ops.kernels.triton_combine import combine_blocks

    assert combine_blocks(1, 128) == (1, 1, 128)
    assert combine_blocks(4, 128) == (4, 4, 128)
    assert combine_blocks(130, 128) == (256, 256, 16)
    assert combine_blocks(256, 128) == (256, 256, 16)
    assert combine_blocks(7, 32) == (8, 8, 32)
    assert combine_blocks(512, 64) == (512, 256, 16)  # more splits than one load holds: two chunks
    for splits in (1, 2, 3, 64, 130, 256, 1000):
        for head_dim in (32, 64, 128, 256):
            pad, block_s, block_d = combine_blocks(splits, head_dim)
            assert head_dim % block_d == 0 and block_s * block_d <= 4096 and block_s <= pad


def test_merges_splits_rule():
    from inkling_ops.kernels.triton_configs import MERGE_MAX_SPLITS, merges_splits

    assert [s for s in range(1, 70) if merges_splits(s)] == [2, 4] and MERGE_MAX_SPLITS == 4
    assert not merges_splits(8) and not merges_splits(3)


def _merge_launch(case, num_splits: int, arrivals):
    """The forward kernel alone (no combine launch) with ``num_splits`` splits, into a fresh ``out``."""
    from inkling_ops.kernels.triton_configs import fwd_config
    from inkling_ops.kernels.triton_fwd import launch_rel_attn_fwd
    from inkling_ops.problem import RelAttnArgs

    args = RelAttnArgs(case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens,
                       case.cu_seqlens_q, case.rel_logits)  # fmt: skip
    config = fwd_config(head_dim=case.q.shape[2], q_per_kv=case.q.shape[1] // case.key_cache.shape[2],
                        max_seqlen_q_bucket=16, page_size=case.key_cache.shape[1], window_left=case.window_size[0],
                        rel_extent=case.rel_logits.shape[2])  # fmt: skip
    rows = num_splits * case.q.shape[0] * case.q.shape[1]
    part_out = torch.empty(num_splits, *case.q.shape)
    part_lse = torch.empty(num_splits, *case.q.shape[:2])
    out = torch.full_like(case.q, 7.0)
    launch_rel_attn_fwd(args, out, softmax_scale=case.softmax_scale, window_left=case.window_size[0],
                        max_seqlen_q=case.max_seqlen_q, num_splits=num_splits, config=config, part_out=part_out,
                        part_lse=part_lse, arrivals=arrivals)  # fmt: skip
    assert rows == part_lse.numel()
    return out


@pytest.mark.parametrize("case_id", ["decode_batch_E_lt_kv_g8", "spec_verify_q9"])
def test_forward_merges_its_splits_and_leaves_the_counts_zero(case_id):
    """A split launch that merges in the kernel writes out alone and sets every arrival count back
    to zero; counts that do not start at zero make it merge early, so they are what it waits on."""
    case = make_case(**dict(CASES)[case_id])
    n = sum(case.q_lens)
    ref = inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="reference")
    counts = 2 * len(case.q_lens) * case.key_cache.shape[2] * case.max_seqlen_q  # more than the row blocks
    arrivals = torch.zeros(counts, dtype=torch.int32)
    out = _merge_launch(case, 4, arrivals)
    torch.testing.assert_close(out[:n], ref[:n], atol=2e-5, rtol=2e-5)
    assert torch.all(out[n:] == 7.0) and torch.all(arrivals == 0)
    early = _merge_launch(case, 4, torch.ones(counts, dtype=torch.int32))  # the third split merges
    assert not torch.allclose(early[:n], ref[:n], atol=2e-5, rtol=2e-5)
    with pytest.raises(ValueError, match="arrivals"):
        _merge_launch(case, 4, None)
    # fewer counts than the grid's row blocks (two or more requests here) would be indexed out of bounds
    with pytest.raises(ValueError, match="arrivals holds 1 counts"):
        _merge_launch(case, 4, torch.zeros(1, dtype=torch.int32))


TWO_PASS_CONFIGS = [  # (band config, plain config); band entry 5 sets bias_ahead
    ((16, 16, 4, 2), (64, 32, 4, 2)),
    ((64, 64, 4, 2), (128, 128, 8, 3)),
    ((32, 32, 4, 2), (32, 64, 4, 2)),
    ((32, 16, 4, 3, True), (64, 64, 4, 2)),
]
TWO_PASS_CASES = [
    ("global_g16_page64", dict(q_lens=[90], kv_lens=[500], rel_extent=16, num_heads=16, num_kv_heads=1, page_size=64)),
    ("window_gt_E_packed", dict(q_lens=[200, 1], kv_lens=[600, 300], rel_extent=24, window_left=150, num_heads=4, num_kv_heads=2, packed_kv=True)),
    # the slowest interpreter case (~22 s per configuration): with every == 2 it meets half the
    # configurations; the product is in the slow suite
    ("global_ragged_g4", dict(q_lens=[300, 5, 129], kv_lens=[700, 400, 129], rel_extent=40, num_heads=8, num_kv_heads=2)),
]


def _configs(configs):
    return [("x".join(map(str, band)) + "-" + "x".join(map(str, plain)), (band, plain)) for band, plain in configs]


# every configuration meets one of the two cheap cases in the default run
@pytest.mark.parametrize("kwargs, configs", rotated(TWO_PASS_CASES[:2], _configs(TWO_PASS_CONFIGS), every=2)
                         + [pytest.param(TWO_PASS_CASES[2][1], c, id=f"global_ragged_g4-{n}", marks=pytest.mark.slow)
                            for n, c in _configs(TWO_PASS_CONFIGS)])  # fmt: skip
def test_two_pass_matches_reference(kwargs, configs):
    """Plain tiles in one launch, band/edge/diagonal tiles in a second with other tile shapes."""
    from inkling_ops.kernels.triton_configs import FwdConfig

    band, plain = configs
    case = make_case(**kwargs, extra_tokens=2)
    options = dict(zip(("bias_ahead",), band[4:]))
    config = FwdConfig(*band[:4], plain=FwdConfig(*plain), **options)
    _check(case, _with_config(case, config, num_splits=1))


BAND_OPTIONS = [
    dict(bias_ahead=True),
    # windows inside E: the edge and band tiles as one masked loop (no effect elsewhere)
    dict(single_masked_loop=True), dict(single_masked_loop=True, bias_ahead=True),
]
BAND_CASES = [
    ("sliding_E_eq_window", dict(CASES)["sliding_E_eq_window"]),
    ("extend_window_g4_packed", dict(CASES)["extend_window_g4_packed"]),
    ("decode_batch_E_lt_kv_g8", dict(CASES)["decode_batch_E_lt_kv_g8"]),
    ("page3_odd", dict(CASES)["page3_odd"]),
    # E several tiles wide, so interior band tiles exist (with and without a window inside E)
    ("wide_band_mha", dict(q_lens=[64, 5], kv_lens=[400, 150], rel_extent=128, num_heads=2, num_kv_heads=2)),
    ("wide_band_window", dict(q_lens=[64], kv_lens=[400], rel_extent=128, window_left=100, num_heads=4, num_kv_heads=2)),
    # pages of several 16-key tiles: a tile starts inside its page (int32 key rows at page >= tile)
    ("page64_decode_extend", dict(q_lens=[1, 7], kv_lens=[300, 170], rel_extent=40, num_heads=8, num_kv_heads=1, page_size=64)),
    ("page32_window_packed", dict(q_lens=[3, 1], kv_lens=[200, 90], rel_extent=24, window_left=50, num_heads=4, num_kv_heads=2, page_size=32, packed_kv=True)),
    ("page24_window", dict(q_lens=[2, 1], kv_lens=[130, 60], rel_extent=20, window_left=40, num_heads=4, num_kv_heads=2, page_size=24)),
]


def _named(options):
    return [("+".join(sorted(o)), o) for o in options]


# one diagonal of cases x options x splits in the default run (every case with both split
# counts, every option on six cases); the whole product in the slow suite
@pytest.mark.parametrize("kwargs, options, splits", rotated(BAND_CASES, _named(BAND_OPTIONS), [(1, 1), (3, 3)], every=3))
def test_band_options_match_reference(kwargs, options, splits):
    """Opt-in band-tile variants: bias loaded a tile ahead, one masked loop on windows inside E."""
    from inkling_ops.kernels.triton_configs import FwdConfig

    case = make_case(**kwargs, extra_tokens=2)
    _check(case, _with_config(case, FwdConfig(16, 16, 4, 2, **options), num_splits=splits))


SCHEDULE_OPTIONS = [
    dict(split_strided=True),
    dict(kv_prefetch=True),
    dict(kv_prefetch=True, split_strided=True),
    dict(kv_prefetch=True, bias_ahead=True, split_strided=True),
    dict(single_masked_loop=True, split_strided=True),
]


# one diagonal of cases x options in the default run, with one split (every option on three
# cases); the rest, and every run with three splits (~10 s each under the interpreter), in the
# slow suite
@pytest.mark.parametrize(
    "kwargs, options, splits",
    rotated(BAND_CASES, _named(SCHEDULE_OPTIONS), [(1, 1)], every=3)
    + [pytest.param(*p.values[:2], 3, id=p.id[:-2] + "-3", marks=pytest.mark.slow)
       for p in rotated(BAND_CASES, _named(SCHEDULE_OPTIONS), [(1, 1)], every=1)],
)  # fmt: skip
def test_tile_schedules_match_reference(kwargs, options, splits):
    """Strided splits (split s takes every S-th tile) and K/V loaded a tile ahead into registers,
    on every kind of tile range: window edges, plain runs, bands, interior band tiles, ranges
    shorter than the split count (empty phases) and odd page sizes."""
    from inkling_ops.kernels.triton_configs import FwdConfig

    case = make_case(**kwargs, extra_tokens=2)
    stages = 1 if options.get("kv_prefetch") else 2
    _check(case, _with_config(case, FwdConfig(16, 16, 4, stages, **options), num_splits=splits))


def test_prefetch_rejects_pipelined_launch():
    from inkling_ops.kernels.triton_configs import FwdConfig

    case = make_case(**dict(CASES)["decode_batch_E_lt_kv_g8"])
    out = torch.zeros_like(case.q)
    with pytest.raises(ValueError, match="kv_prefetch=True with num_stages=2"):
        case.run_triton(out, num_splits=2, config=FwdConfig(16, 64, 4, 2, kv_prefetch=True))


def test_two_pass_rejects_tiles_that_do_not_nest():
    from inkling_ops.kernels.triton_configs import FwdConfig

    case = make_case(q_lens=[40], kv_lens=[200], rel_extent=8)
    config = FwdConfig(16, 64, 4, 2, plain=FwdConfig(64, 32, 4, 2))
    with pytest.raises(ValueError, match="must divide"):
        case.run_triton(torch.zeros_like(case.q), num_splits=1, config=config)


def test_triton_is_not_cpu_default():
    case = make_case(q_lens=[2], kv_lens=[4])
    plan = inkling_ops.plan(_problem(case), inkling_ops.device_facts(case.q.device))
    assert plan.backend == "reference" and plan.key.backend == "reference"


@pytest.mark.parametrize("num_splits", [1, 3], ids=lambda n: f"splits{n}")
def test_value_cache_laid_out_unlike_key_cache(num_splits):
    """V pages stored head-major (other strides than K's) at page 16: the kernel takes the
    general per-key address path (no offsets shared with K, no int32 row index)."""
    import dataclasses

    case = make_case(q_lens=[5, 1, 30], kv_lens=[70, 33, 100], rel_extent=24, num_heads=4, num_kv_heads=2)
    value_cache = case.value_cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert value_cache.stride() != case.key_cache.stride()
    case = dataclasses.replace(case, value_cache=value_cache)
    _check(case, lambda out: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="triton", num_splits=num_splits, out=out))


@pytest.mark.parametrize("packed_kv", [False, True], ids=["separate", "packed"])
def test_slot_stride_not_a_power_of_two(packed_kv):
    """Three KV heads per slot (slot stride 3 * D): the int32 row index with a runtime widening
    multiply instead of a shift (KV_SLOT_SHIFT = -1)."""
    case = make_case(q_lens=[5, 1, 20], kv_lens=[50, 21, 90], rel_extent=24, num_heads=6, num_kv_heads=3, packed_kv=packed_kv)
    assert case.key_cache.stride(1) == 3 * case.q.shape[2]
    _check(case, lambda out: inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="triton", num_splits=2, out=out))


def test_slot_shift():
    from inkling_ops.kernels.triton_configs import slot_shift as _slot_shift

    assert [_slot_shift(n) for n in (1, 2, 64, 128, 256, 1024)] == [0, 1, 6, 7, 8, 10]
    assert [_slot_shift(n) for n in (0, -4, 3, 192, 384)] == [-1] * 5


def test_key_rows_fit_int32():
    """The int32 row index (KV_ROW_I32) is used only when block strides are whole numbers of slot
    strides and every row number stays below 2**31."""
    from inkling_ops.kernels.triton_fwd import _key_rows_fit_int32

    def cache(num_blocks, page=16, heads=1, dim=128, packed=False):
        shape = (num_blocks, 2, page, heads, dim) if packed else (num_blocks, page, heads, dim)
        t = torch.empty(shape, device="meta", dtype=torch.bfloat16)
        return t[:, 0] if packed else t

    assert _key_rows_fit_int32(cache(1000))
    assert _key_rows_fit_int32(cache(1000, packed=True))  # 2 * page rows per block
    assert _key_rows_fit_int32(cache((2**31 - 1) // 16))
    assert not _key_rows_fit_int32(cache(2**27))  # 2**31 rows
    assert not _key_rows_fit_int32(cache(2**26, packed=True))  # 2**26 blocks x 32 rows
    odd = torch.empty((10, 16, 3, 130), device="meta").as_strided((10, 16, 2, 128), (16 * 3 * 130 + 7, 3 * 130, 130, 1))
    assert not _key_rows_fit_int32(odd)  # a block stride that is not a whole number of slots


def _problem(case):
    from inkling_ops.validation import check_call

    return check_call(
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits, case.max_seqlen_q, case.softmax_scale, case.window_size, True, 0, None,
    )  # fmt: skip


@pytest.mark.parametrize("kind,config", tuning_candidates(), ids=lambda v: str(v))
def test_every_tuning_candidate_is_correct(kind, config):
    """Every launch configuration the tuner may pick computes the same function."""
    if kind == "prefill":
        case = make_case(q_lens=[40, 3], kv_lens=[130, 70], num_heads=8, num_kv_heads=2, rel_extent=24, window_left=50)
        splits = 1
    else:
        case = make_case(q_lens=[1, 2], kv_lens=[300, 90], num_heads=8, num_kv_heads=1, rel_extent=48)
        splits = 3
    _check(case, _with_config(case, config, num_splits=splits))


@pytest.mark.parametrize("num_splits", [1, 3])
def test_strided_index_tensors_match_reference(num_splits):
    """Index tensors passed as views (a column of a wider tensor, every other block id, an
    expand): valid input; the kernels read packed copies, so the result is the reference's."""
    case = make_case(q_lens=[2, 1], kv_lens=[40, 9], num_heads=4, num_kv_heads=2, head_dim=32, rel_extent=16)
    kwargs = case.kwargs()
    ref = inkling_ops.rel_attn(*case.args(), **kwargs, backend="reference")

    def strided(t):
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]

    views = dict(block_table=strided(case.block_table), cache_seqlens=strided(case.cache_seqlens),
                 cu_seqlens_q=strided(case.cu_seqlens_q))  # fmt: skip
    assert all(v.stride(-1) == 2 for v in views.values())
    got = inkling_ops.rel_attn(*case.args(), **(kwargs | views), num_splits=num_splits, backend="triton")
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=2e-5)
    one = make_case(q_lens=[3], kv_lens=[40], num_heads=4, num_kv_heads=2, head_dim=32, rel_extent=16)
    expanded = one.cache_seqlens[:1].expand(1)  # stride 0 over one element: nothing to copy, still right
    got = inkling_ops.rel_attn(*one.args(), **(one.kwargs() | dict(cache_seqlens=expanded)), backend="triton")
    torch.testing.assert_close(got, inkling_ops.rel_attn(*one.args(), **one.kwargs(), backend="reference"), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_rows_before_a_first_request_that_does_not_start_at_0_stay_untouched(num_splits):
    """Bad metadata: ``cu_seqlens_q`` starting at 2. The kernels clamp the first request to start
    there, so rows 0 and 1 belong to no request: no path writes them, the combine kernel of three
    splits included (its workspace rows for them hold stale values no split wrote)."""
    case = make_case(q_lens=[2, 2, 2], kv_lens=[40, 33, 20], num_heads=4, num_kv_heads=2, rel_extent=16)
    bad_cu = torch.tensor([2, 4, 6, 6], dtype=torch.int32)
    out = torch.full_like(case.q, 7.0)
    inkling_ops.rel_attn(*case.args(), **(case.kwargs() | dict(cu_seqlens_q=bad_cu)), backend="triton",
                         num_splits=num_splits, out=out)  # fmt: skip
    assert torch.all(out[:2] == 7.0)
    assert torch.isfinite(out[2:]).all() and not torch.all(out[2:] == 7.0)


# --- bad device metadata under a bounds-checking interpreter (tests/triton_bounds.py) ---------------

IMAX, IMIN = 2**31 - 1, -(2**31)


def _bounds_guard():
    from triton_bounds import bounds_checked, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no bounds checks on this Triton: {reason}")
    return bounds_checked


@triton.jit
def _copy_kernel(src, dst, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs + SHIFT, mask=offs < n), mask=offs < n)


def test_the_bounds_guard_catches_a_read_past_a_tensor():
    """The control: a copy that reads one element past its source raises under the guard, and
    the same copy in bounds does not (a guard that never fires would make the tests below
    unable to fail)."""
    from triton_bounds import OutOfBounds

    bounds_checked = _bounds_guard()
    src, dst = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    with bounds_checked():
        _copy_kernel[(1,)](src, dst, 8, SHIFT=0, BLOCK=8)
    assert torch.equal(dst, src)
    with pytest.raises(OutOfBounds, match=r"load in _copy_kernel .* \+32 bytes from the start of 'src'"):
        with bounds_checked():
            _copy_kernel[(1,)](src, dst, 8, SHIFT=1, BLOCK=8)


#: (cu_seqlens_q, cache_seqlens, value written into every other block-table entry or None)
BAD_METADATA = [
    ([0, 1, 2, 3], [IMAX, IMIN, 5], IMAX),
    ([IMIN, IMAX, IMIN, IMAX], [IMAX, IMAX, IMAX], IMIN),
    ([2, 0, IMAX, 1], [0, 1, IMIN], -1),
    ([0, 3, 3, 40], [700, 2, 64], None),
    ([-1, -1, -1, -1], [IMAX, 0, 1], IMAX),
]


def _bad_case(cu, seqlens, table_value):
    case = make_case(q_lens=[1, 1, 1], kv_lens=[300, 7, 64], rel_extent=16, num_heads=8, num_kv_heads=2,
                     page_size=32, window_left=100, extra_tokens=2)  # fmt: skip
    case.max_seqlen_q = 2
    case.cu_seqlens_q = torch.tensor(cu, dtype=torch.int32)
    case.cache_seqlens = torch.tensor(seqlens, dtype=torch.int32)
    if table_value is not None:
        case.block_table.view(-1)[::2] = table_value
    return case


@pytest.mark.parametrize("num_splits", [1, 2, 3, 8])
@pytest.mark.parametrize("metadata", BAD_METADATA, ids=[f"bad{i}" for i in range(len(BAD_METADATA))])
def test_bad_metadata_stays_in_bounds_on_every_split_path(metadata, num_splits):
    """int32 extremes, negative values, cu_seqlens_q not starting at 0 or decreasing, KV lengths
    past the table and block ids out of range, on the unsplit forward, the in-kernel merge of 2
    splits and the combine kernel of 3 and 8: every access of every kernel stays inside its
    tensors, checked lane by lane (the guard raises OutOfBounds). The values are not checked:
    clamped block ids read the NaN make_case plants in unused pages."""
    bounds_checked = _bounds_guard()
    case = _bad_case(*metadata)
    out = torch.full_like(case.q, 7.0)
    with bounds_checked(), inkling_ops.checked_mode(False):
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="triton", num_splits=num_splits, out=out)
