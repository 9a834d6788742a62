"""Contract section 5: malformed calls raise a clear error naming the argument and change nothing.

Every bad call is made with a pre-filled ``out`` and the test then checks, bit for bit (NaN-safe),
that ``out``, the caches and every other tensor argument are unchanged. Also covered: the
inference-only rule (requires-grad inputs under grad mode) and the opt-in checked mode that
validates the metadata living in device tensors.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

import inkling_ops
from inkling_ops.compat import inkling_fa4_rel_attention
from inkling_ops.testing import make_case

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def _bits(t: torch.Tensor) -> torch.Tensor:
    """An integer view of t's bits (NaN-safe equality with torch.equal)."""
    t = t.detach()
    if t.is_floating_point():
        return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t.contiguous()


class _Snapshot:
    """Bitwise copies of every (non-meta) tensor among the given values."""

    def __init__(self, *values):
        self._saved = []
        seen = set()
        for v in values:
            if isinstance(v, torch.Tensor) and v.device.type != "meta" and id(v) not in seen:
                seen.add(id(v))
                self._saved.append((v, _bits(v).clone()))

    def assert_unchanged(self):
        for tensor, bits in self._saved:
            assert torch.equal(_bits(tensor), bits), f"tensor of shape {tuple(tensor.shape)} was modified"


def _base_case(dtype=torch.float32):
    """A valid ragged call (GQA 2, a q_len-0 request, garbage rows past the last request)."""
    return make_case(
        [3, 0, 4], [10, 6, 4], num_heads=4, num_kv_heads=2, head_dim=16, page_size=4, extra_tokens=2,
        dtype=dtype, generator=torch.Generator().manual_seed(1),
    )  # fmt: skip


def _sentinel_out(case) -> torch.Tensor:
    out = torch.full_like(case.q, 7.25)
    out[-1] = float("nan")  # a NaN row: the comparison must be bitwise
    return out


def _api_args(case) -> dict:
    return dict(
        q=case.q,
        key_cache=case.key_cache,
        value_cache=case.value_cache,
        block_table=case.block_table,
        cache_seqlens=case.cache_seqlens,
        cu_seqlens_q=case.cu_seqlens_q,
        rel_logits=case.rel_logits,
        max_seqlen_q=case.max_seqlen_q,
        softmax_scale=case.softmax_scale,
        window_size=case.window_size,
        num_splits=0,
        out=_sentinel_out(case),
    )


def _call_api(a: dict):
    a = dict(a)
    return inkling_ops.rel_attn(a.pop("q"), a.pop("key_cache"), a.pop("value_cache"), **a)


_POSITIONAL = ("q", "key_cache", "value_cache", "block_table", "cache_seqlens", "cu_seqlens_q", "rel_logits")


def _call_op_out(a: dict):
    a = dict(a)
    a.setdefault("causal", True)
    if isinstance(a["window_size"], tuple):
        a["window_size"] = list(a["window_size"])
    pos = [a.pop(k) for k in _POSITIONAL]
    torch.ops.inkling.rel_attn_out.default(*pos, **a)


def _call_op_functional(a: dict):
    a = dict(a)
    a.pop("out")
    a.setdefault("causal", True)
    if isinstance(a["window_size"], tuple):
        a["window_size"] = list(a["window_size"])
    pos = [a.pop(k) for k in _POSITIONAL]
    return torch.ops.inkling.rel_attn.default(*pos, **a)


def _call_compat(a: dict):
    a = dict(a)
    a.pop("num_splits")  # the op's; vLLM's own (accepted and ignored) goes in as compat_num_splits
    if "compat_num_splits" in a:
        a["num_splits"] = a.pop("compat_num_splits")
    a.setdefault("causal", True)
    a.setdefault("rel_extent", a["rel_logits"].shape[-1] if isinstance(a["rel_logits"], torch.Tensor) else 16)
    q, k, v = a.pop("q"), a.pop("key_cache"), a.pop("value_cache")
    return inkling_fa4_rel_attention(q, k, v, **a)


def _expect_failure(call: Callable[[dict], object], args: dict, exc, match: str, *originals):
    """Make the call, expect ``exc`` matching ``match``, then check no tensor changed."""
    snap = _Snapshot(*args.values(), *originals)
    with pytest.raises(exc, match=match):
        call(args)
    snap.assert_unchanged()


def _strided_last_dim(t: torch.Tensor) -> torch.Tensor:
    """A copy of t whose last dim has stride 2."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _set(**changes):
    def mutate(a):
        a.update(changes)

    return mutate


def _map(name, fn):
    def mutate(a):
        a[name] = fn(a[name])

    return mutate


def _both_caches(fn):
    def mutate(a):
        a["key_cache"], a["value_cache"] = fn(a["key_cache"]), fn(a["value_cache"])

    return mutate


def _kv_heads_3(a):
    nb, page, _, d = a["key_cache"].shape
    a["key_cache"] = torch.randn(nb, page, 3, d)
    a["value_cache"] = torch.randn(nb, page, 3, d)


@dataclasses.dataclass
class Bad:
    id: str
    mutate: Callable[[dict], None]
    exc: type
    match: str
    marks: tuple = ()


BAD_API_CALLS = [
    # q
    Bad("q_rank2", _map("q", lambda t: t[:, 0]), ValueError, r"'q' is of rank 2"),
    Bad("q_rank4", _map("q", lambda t: t[None]), ValueError, r"'q' is of rank 4"),
    Bad("q_dtype_float64", _map("q", lambda t: t.double()), ValueError, r"'q' is of dtype torch.float64"),
    Bad("q_dtype_int32", _map("q", lambda t: t.to(torch.int32)), ValueError, r"'q' is of dtype torch.int32"),
    Bad("q_last_dim_strided", _map("q", _strided_last_dim), ValueError, r"'q' .*last-dim stride 2"),
    Bad("q_zero_heads", _map("q", lambda t: t[:, :0]), ValueError, r"'q' is of shape"),
    Bad("q_not_tensor", _map("q", lambda t: t.tolist()), TypeError, r"'q'"),
    # key_cache / value_cache
    Bad("key_cache_rank3", _map("key_cache", lambda t: t[:, :, 0]), ValueError, r"'key_cache' is of rank 3"),
    Bad("value_cache_rank5", _map("value_cache", lambda t: t[None]), ValueError, r"'value_cache' is of rank 5"),
    Bad("key_cache_dtype", _map("key_cache", lambda t: t.half()), ValueError, r"'key_cache' is of dtype torch.float16"),
    Bad("value_cache_dtype", _map("value_cache", lambda t: t.bfloat16()), ValueError, r"'value_cache' is of dtype"),
    Bad("head_dim_mismatch", _both_caches(lambda t: t[..., :8]), ValueError, r"'key_cache' .*head_dim 16"),
    Bad("value_head_dim_mismatch", _map("value_cache", lambda t: t[..., :8]), ValueError, r"'value_cache' .*head_dim"),
    Bad("kv_shape_mismatch", _map("value_cache", lambda t: t[:-1]), ValueError, r"'value_cache' .*shape of key_cache"),
    Bad(
        "key_cache_last_dim_strided",
        _map("key_cache", _strided_last_dim),
        ValueError,
        r"'key_cache' .*last-dim stride 2",
    ),
    Bad("key_cache_meta_device", _map("key_cache", lambda t: t.to("meta")), ValueError, r"'key_cache' .*device meta"),
    Bad("hq_not_divisible_by_hkv", _kv_heads_3, ValueError, r"'key_cache' .*3 KV heads"),
    Bad("caches_zero_blocks", _both_caches(lambda t: t[:0]), ValueError, r"'key_cache' is of shape"),
    Bad("value_cache_none", _set(value_cache=None), TypeError, r"'value_cache' must be a torch.Tensor"),
    # rel_logits
    Bad("rel_logits_rank2", _map("rel_logits", lambda t: t[:, 0]), ValueError, r"'rel_logits' is of rank 2"),
    Bad("rel_logits_token_count", _map("rel_logits", lambda t: t[:-1]), ValueError, r"'rel_logits' is of shape"),
    Bad("rel_logits_head_count", _map("rel_logits", lambda t: t[:, :2]), ValueError, r"'rel_logits' is of shape"),
    Bad("rel_logits_extent_0", _map("rel_logits", lambda t: t[..., :0]), ValueError, r"'rel_logits' .*rel_extent"),
    Bad("rel_logits_dtype", _map("rel_logits", lambda t: t.half()), ValueError, r"'rel_logits' is of dtype"),
    Bad(
        "rel_logits_meta_device", _map("rel_logits", lambda t: t.to("meta")), ValueError, r"'rel_logits' .*device meta"
    ),
    Bad("rel_logits_none", _set(rel_logits=None), TypeError, r"'rel_logits' must be a torch.Tensor"),
    # index tensors
    Bad(
        "block_table_int64",
        _map("block_table", lambda t: t.long()),
        ValueError,
        r"'block_table' is of dtype torch.int64",
    ),
    Bad("block_table_rank1", _map("block_table", lambda t: t[0]), ValueError, r"'block_table' is of rank 1"),
    Bad("block_table_rows", _map("block_table", lambda t: t[:-1]), ValueError, r"'block_table' is of shape"),
    Bad("block_table_no_columns", _map("block_table", lambda t: t[:, :0]), ValueError,
        r"'block_table' is of shape \(\d+, 0\); expected max_blocks_per_seq >= 1"),
    Bad(
        "block_table_not_tensor",
        _map("block_table", lambda t: t.tolist()),
        TypeError,
        r"'block_table'",
    ),
    Bad("cache_seqlens_int64", _map("cache_seqlens", lambda t: t.long()), ValueError, r"'cache_seqlens' is of dtype"),
    Bad("cache_seqlens_float", _map("cache_seqlens", lambda t: t.float()), ValueError, r"'cache_seqlens' is of dtype"),
    Bad("cache_seqlens_rank2", _map("cache_seqlens", lambda t: t[None]), ValueError, r"'cache_seqlens' is of rank 2"),
    Bad(
        "cache_seqlens_meta",
        _map("cache_seqlens", lambda t: t.to("meta")),
        ValueError,
        r"'cache_seqlens' .*device meta",
    ),
    Bad("cu_seqlens_q_int64", _map("cu_seqlens_q", lambda t: t.long()), ValueError, r"'cu_seqlens_q' is of dtype"),
    Bad("cu_seqlens_q_length", _map("cu_seqlens_q", lambda t: t[:-1]), ValueError, r"'cu_seqlens_q' is of shape"),
    Bad("cu_seqlens_q_meta", _map("cu_seqlens_q", lambda t: t.to("meta")), ValueError, r"'cu_seqlens_q' .*device meta"),
    # window_size
    Bad("window_right_1", _set(window_size=(5, 1)), ValueError, r"'window_size' .*right == 0"),
    Bad("window_left_minus2", _set(window_size=(-2, 0)), ValueError, r"'window_size' .*left >= -1"),
    Bad("window_none_right_3", _set(window_size=(-1, 3)), ValueError, r"'window_size'"),
    Bad("window_single", _set(window_size=(5,)), TypeError, r"'window_size' must be a pair"),
    Bad("window_triple", _set(window_size=(5, 0, 0)), TypeError, r"'window_size' must be a pair"),
    Bad("window_floats", _set(window_size=(5.0, 0)), TypeError, r"'window_size'"),
    # max_seqlen_q
    Bad("max_seqlen_q_zero", _set(max_seqlen_q=0), ValueError, r"'max_seqlen_q' is 0"),
    Bad("max_seqlen_q_negative", _set(max_seqlen_q=-3), ValueError, r"'max_seqlen_q' is -3"),
    Bad("max_seqlen_q_float", _set(max_seqlen_q=4.0), TypeError, r"'max_seqlen_q'"),
    Bad("max_seqlen_q_bool", _set(max_seqlen_q=True), TypeError, r"'max_seqlen_q'"),
    # softmax_scale
    Bad("softmax_scale_zero", _set(softmax_scale=0.0), ValueError, r"'softmax_scale' is 0.0"),
    Bad("softmax_scale_negative", _set(softmax_scale=-0.125), ValueError, r"'softmax_scale' is -0.125"),
    Bad("softmax_scale_nan", _set(softmax_scale=float("nan")), ValueError, r"'softmax_scale' is nan"),
    Bad("softmax_scale_inf", _set(softmax_scale=float("inf")), ValueError, r"'softmax_scale' is inf"),
    Bad("softmax_scale_str", _set(softmax_scale="0.1"), TypeError, r"'softmax_scale'"),
    Bad("softmax_scale_bool", _set(softmax_scale=True), TypeError, r"'softmax_scale'"),
    # num_splits, backend
    Bad("num_splits_negative", _set(num_splits=-1), ValueError, r"'num_splits'"),
    Bad("backend_unknown", _set(backend="no_such_backend"), ValueError, r"'backend' is 'no_such_backend'"),
    # out
    Bad("out_shape", _map("out", lambda t: t[:-1]), ValueError, r"'out' is of shape"),
    Bad("out_dtype", _map("out", lambda t: t.double()), ValueError, r"'out' is of dtype torch.float64"),
    Bad("out_last_dim_strided", _map("out", _strided_last_dim), ValueError, r"'out' .*last-dim stride 2"),
    Bad("out_meta_device", _map("out", lambda t: t.to("meta")), ValueError, r"'out' .*device meta"),
]


def _ids(bads):
    return [pytest.param(b, id=b.id, marks=b.marks) for b in bads]


def test_enough_distinct_bad_calls():
    """The section-5 matrix keeps at least 24 distinct malformed calls (ids are unique)."""
    ids = [b.id for b in BAD_API_CALLS]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 24


@pytest.mark.parametrize("bad", _ids(BAD_API_CALLS))
def test_bad_call_through_api(bad: Bad):
    """inkling_ops.rel_attn(..., out=out) raises the documented error and modifies nothing."""
    case = _base_case()
    args = _api_args(case)
    originals = (args["out"], case.key_cache, case.value_cache)
    bad.mutate(args)
    _expect_failure(_call_api, args, bad.exc, bad.match, *originals)


def test_base_call_is_valid():
    """Control: the unmutated call succeeds and writes out (so every failure above is the mutation's)."""
    case = _base_case()
    args = _api_args(case)
    before = args["out"].clone()
    _call_api(args)
    assert not torch.equal(_bits(args["out"][:7]), _bits(before[:7]))
    assert torch.equal(_bits(args["out"][7:]), _bits(before[7:]))  # rows past the last request untouched


def test_max_seqlen_q_zero_allowed_without_tokens():
    """Control for max_seqlen_q_zero: with no query tokens at all, max_seqlen_q = 0 is valid."""
    case = make_case([0, 0], [3, 5], generator=torch.Generator().manual_seed(2))
    assert case.q.shape[0] == 0
    got = inkling_ops.rel_attn(*case.args(), **{**case.kwargs(), "max_seqlen_q": 0})
    assert got.shape == case.q.shape


BAD_OP_CALLS = [
    Bad("causal_false", _set(causal=False), ValueError, r"'causal' is False"),
    Bad("window_right_2", _set(window_size=[3, 2]), ValueError, r"'window_size'"),
    Bad("softmax_scale_nan", _set(softmax_scale=float("nan")), ValueError, r"'softmax_scale'"),
    Bad("num_splits_negative", _set(num_splits=-3), ValueError, r"'num_splits'"),
    Bad("backend_unknown", _set(backend="nope"), ValueError, r"'backend'"),
    Bad("rel_logits_token_count", _map("rel_logits", lambda t: t[:-2]), ValueError, r"'rel_logits'"),
    Bad("cu_seqlens_q_int64", _map("cu_seqlens_q", lambda t: t.long()), ValueError, r"'cu_seqlens_q'"),
    Bad("max_seqlen_q_zero", _set(max_seqlen_q=0), ValueError, r"'max_seqlen_q'"),
]


@pytest.mark.parametrize("variant", ["rel_attn_out", "rel_attn"])
@pytest.mark.parametrize("bad", _ids(BAD_OP_CALLS))
def test_bad_call_through_torch_ops(bad: Bad, variant: str):
    """torch.ops.inkling.rel_attn{,_out}.default validate the same way as the Python API."""
    case = _base_case()
    args = _api_args(case)
    originals = (args["out"], case.key_cache, case.value_cache)
    bad.mutate(args)
    call = _call_op_out if variant == "rel_attn_out" else _call_op_functional
    _expect_failure(call, args, bad.exc, bad.match, *originals)


def test_torch_ops_wrong_kind_names_the_argument():
    """A non-tensor where the schema wants a Tensor is rejected by the op schema, naming the argument."""
    case = _base_case()
    args = _api_args(case)
    args["block_table"] = case.block_table.tolist()
    _expect_failure(_call_op_out, args, (TypeError, RuntimeError), r"'block_table'", case.key_cache)


BAD_COMPAT_CALLS = [
    Bad("rel_extent_mismatch", _set(rel_extent=17), ValueError, r"'rel_extent' is 17"),
    Bad("causal_false", _set(causal=False), ValueError, r"'causal' is False"),
    Bad("window_right_1", _set(window_size=(511, 1)), ValueError, r"'window_size'"),
    Bad("max_seqlen_q_negative", _set(max_seqlen_q=-1), ValueError, r"'max_seqlen_q'"),
    Bad("softmax_scale_zero", _set(softmax_scale=0.0), ValueError, r"'softmax_scale'"),
    Bad("block_table_int64", _map("block_table", lambda t: t.long()), ValueError, r"'block_table'"),
    Bad("out_dtype", _map("out", lambda t: t.half()), ValueError, r"'out'"),
    Bad("num_splits_negative", _set(compat_num_splits=-5), TypeError, r"'num_splits'"),
    Bad("num_splits_str", _set(compat_num_splits="x"), TypeError, r"'num_splits'"),
    Bad("rel_extent_float", _set(rel_extent=16.0), TypeError, r"'rel_extent'"),
]


@pytest.mark.parametrize("bad", _ids(BAD_COMPAT_CALLS))
def test_bad_call_through_compat(bad: Bad):
    """inkling_fa4_rel_attention (vLLM's signature) rejects bad calls the same way."""
    case = _base_case()
    args = _api_args(case)
    originals = (args["out"], case.key_cache, case.value_cache)
    bad.mutate(args)
    _expect_failure(_call_compat, args, bad.exc, bad.match, *originals)


def test_compat_valid_call_matches_api():
    """Control for the compat cases: the unmutated compat call works and equals rel_attn."""
    case = _base_case()
    args = _api_args(case)
    got = _call_compat(args)
    assert got is args["out"]
    torch.testing.assert_close(got[:7], inkling_ops.rel_attn(*case.args(), **case.kwargs())[:7], atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_bad_call_low_precision_leaves_out_unchanged(dtype):
    """Same guarantee with 2-byte dtypes (bit views of another width): mixed q/cache dtypes are refused."""
    case = _base_case(dtype)
    args = _api_args(case)
    originals = (args["out"], case.key_cache, case.value_cache)
    args["key_cache"] = case.key_cache.float()
    _expect_failure(_call_api, args, ValueError, r"'key_cache' is of dtype torch.float32", *originals)


# --------------------------------------------------------------------------------------------
# Inference only
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["q", "key_cache", "value_cache", "rel_logits"])
@pytest.mark.parametrize("functional", [False, True], ids=["out", "functional"])
def test_requires_grad_under_grad_mode_raises(name, functional):
    """An input that requires grad while grad mode is on raises a RuntimeError naming the op."""
    case = _base_case()
    args = _api_args(case)
    if functional:
        del args["out"]
    args[name] = args[name].detach().clone().requires_grad_(True)
    snap = _Snapshot(*args.values(), case.key_cache, case.value_cache)
    with torch.enable_grad(), pytest.raises(RuntimeError, match=rf"inkling::rel_attn .*'{name}' requires grad"):
        _call_api(args)
    snap.assert_unchanged()


def test_an_out_that_requires_grad_under_grad_mode_raises():
    """Writing into an ``out`` that autograd tracks would bypass autograd (the kernel writes its
    memory directly): refused like the inputs, through the API and the op."""
    case = _base_case()
    args = _api_args(case)
    args["out"] = args["out"].detach().clone().requires_grad_(True)
    snap = _Snapshot(*args.values(), case.key_cache, case.value_cache)
    with torch.enable_grad(), pytest.raises(RuntimeError, match=r"inkling::rel_attn .*'out' requires grad"):
        _call_api(args)
    snap.assert_unchanged()


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_requires_grad_inputs_run_without_grad_mode(context):
    """The same requires-grad inputs run fine under no_grad / inference_mode, with the usual result."""
    case = _base_case()
    expected = inkling_ops.rel_attn(*case.args(), **case.kwargs())
    args = _api_args(case)
    del args["out"]
    for name in ("q", "key_cache", "value_cache", "rel_logits"):
        args[name] = args[name].detach().clone().requires_grad_(True)
    with context():
        got = _call_api(args)
    assert not got.requires_grad
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


# --------------------------------------------------------------------------------------------
# Checked mode: device-resident values
# --------------------------------------------------------------------------------------------
def _checked_case():
    """3 requests (q_lens 3, 2, 1; kv_lens 10, 2, 17), page 4, table width 6, 2 garbage rows."""
    return make_case(
        [3, 2, 1], [10, 2, 17], num_heads=4, num_kv_heads=2, head_dim=8, page_size=4, extra_tokens=2,
        extra_table_cols=1, generator=torch.Generator().manual_seed(3),
    )  # fmt: skip


def _edit(name, fn):
    """Mutation of a metadata tensor (on a copy) or a scalar."""

    def mutate(case):
        value = getattr(case, name)
        new = value.clone() if isinstance(value, torch.Tensor) else value
        new = fn(new)
        return dataclasses.replace(case, **{name: new})

    return mutate


def _put(index, value):
    def fn(t):
        t[index] = value
        return t

    return fn


# (id, mutation, argument named, rows of out that must still equal the valid call's, or None)
CHECKED_ERRORS = [
    ("cu_start_nonzero", _edit("cu_seqlens_q", _put(0, 1)), "cu_seqlens_q", r"starts at 1", None),
    ("cu_decreasing", _edit("cu_seqlens_q", _put(2, 2)), "cu_seqlens_q", r"decreases at index 2", None),
    ("cu_past_num_tokens", _edit("cu_seqlens_q", _put(3, 9)), "cu_seqlens_q", r"ends at 9", slice(0, 5)),
    (
        "max_seqlen_q_too_small",
        _edit("max_seqlen_q", lambda v: 2),
        "max_seqlen_q",
        r"is 2 but request 0 has 3",
        slice(0, 6),
    ),
    ("cache_seqlens_lt_q_len", _edit("cache_seqlens", _put(1, 1)), "cache_seqlens", r"\[1\] is 1", slice(0, 3)),
    (
        "cache_seqlens_past_capacity",
        _edit("cache_seqlens", _put(2, 100)),
        "cache_seqlens",
        r"\[2\] is 100",
        slice(0, 5),
    ),
    (
        "block_id_too_large",
        _edit("block_table", _put((0, 1), 10_000)),
        "block_table",
        r"\[0, 1\] is 10000",
        slice(3, 6),
    ),
    ("block_id_num_blocks", None, "block_table", r"\[2, 4\]", slice(0, 5)),  # == num_blocks, filled in below
    ("block_id_negative", _edit("block_table", _put((2, 0), -1)), "block_table", r"\[2, 0\] is -1", slice(0, 5)),
]


def _block_id_num_blocks(case):
    return _edit("block_table", _put((2, 4), case.key_cache.shape[0]))(case)


def _mutated(mutation, case):
    return _block_id_num_blocks(case) if mutation is None else mutation(case)


@pytest.mark.parametrize("mutation,arg,match", [pytest.param(m, a, r, id=i) for i, m, a, r, _ in CHECKED_ERRORS])
def test_checked_mode_rejects_bad_device_values(mutation, arg, match):
    """With checked mode on, each bad device value raises ValueError naming the argument; out unchanged."""
    case = _checked_case()
    bad = _mutated(mutation, case)
    out = _sentinel_out(case)
    snap = _Snapshot(out, bad.key_cache, bad.value_cache, bad.block_table, bad.cache_seqlens, bad.cu_seqlens_q)
    with inkling_ops.checked_mode():
        with pytest.raises(ValueError, match=rf"checked mode.*'{arg}' {match}"):
            inkling_ops.rel_attn(*bad.args(), **bad.kwargs(), out=out)
        with pytest.raises(ValueError, match=rf"'{arg}'"):
            inkling_ops.rel_attn(*bad.args(), **bad.kwargs())  # the functional op too
    snap.assert_unchanged()


@pytest.mark.parametrize("mutation,intact", [pytest.param(m, keep, id=i) for i, m, _, _, keep in CHECKED_ERRORS])
def test_unchecked_bad_device_values_stay_in_bounds(mutation, intact):
    """Without checked mode the same calls neither raise nor crash (metadata is clamped), and requests
    whose own metadata is intact still get their correct rows."""
    case = _checked_case()
    bad = _mutated(mutation, case)
    with inkling_ops.checked_mode(False):
        expected = inkling_ops.rel_attn(*case.args(), **case.kwargs())
        out = _sentinel_out(case)
        inkling_ops.rel_attn(*bad.args(), **bad.kwargs(), out=out)
        functional = inkling_ops.rel_attn(*bad.args(), **bad.kwargs())
    assert functional.shape == case.q.shape
    if intact is not None:
        torch.testing.assert_close(out[intact], expected[intact], atol=0, rtol=0)
        torch.testing.assert_close(functional[intact], expected[intact], atol=0, rtol=0)


def test_checked_mode_ignores_unused_block_table_entries():
    """Garbage in block-table entries no request reads (past kv_len, or in a q_len-0 request's row)
    does not trip checked mode, and the result equals the unchecked one."""
    case = make_case(
        [3, 0, 2], [10, 7, 6], num_heads=4, num_kv_heads=2, head_dim=8, page_size=4, extra_table_cols=2,
        generator=torch.Generator().manual_seed(8),
    )  # fmt: skip
    table = case.block_table.clone()
    table[0, 3:] = -7  # request 0 uses ceil(10/4) = 3 pages
    table[1, :] = 1 << 30  # request 1 has no query rows: nothing of it is read
    table[2, 2:] = -(1 << 30)
    garbage = dataclasses.replace(case, block_table=table)
    assert (table < 0).any() and (table >= case.key_cache.shape[0]).any()
    with inkling_ops.checked_mode(False):
        expected = inkling_ops.rel_attn(*case.args(), **case.kwargs())
    with inkling_ops.checked_mode():
        got = inkling_ops.rel_attn(*garbage.args(), **garbage.kwargs())
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_checked_mode_switches():
    """Off unless asked; the context manager and set_checked_mode toggle it and restore it."""
    initial = inkling_ops.is_checked_mode()
    try:
        with inkling_ops.checked_mode():
            assert inkling_ops.is_checked_mode()
            with inkling_ops.checked_mode(False):
                assert not inkling_ops.is_checked_mode()
            assert inkling_ops.is_checked_mode()
        assert inkling_ops.is_checked_mode() == initial
        with pytest.raises(KeyError), inkling_ops.checked_mode():
            raise KeyError("boom")
        assert inkling_ops.is_checked_mode() == initial
        inkling_ops.set_checked_mode(True)
        assert inkling_ops.is_checked_mode()
        inkling_ops.set_checked_mode(False)
        assert not inkling_ops.is_checked_mode()
    finally:
        inkling_ops.set_checked_mode(initial)


def _run_with_env(env_value: str | None, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "INKLING_OPS_CHECKED"}
    if env_value is not None:
        env["INKLING_OPS_CHECKED"] = env_value
    env["PYTHONPATH"] = os.pathsep.join([_REPO_ROOT, env.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


# One bad call (a negative block id in a used page) in a fresh interpreter.
_ENV_PROBE = """
import inkling_ops
from inkling_ops.testing import make_case
c = make_case([2], [5])
c.block_table[0, 0] = -1
try:
    inkling_ops.rel_attn(*c.args(), **c.kwargs())
    print(inkling_ops.is_checked_mode(), "no-error")
except ValueError as e:
    print(inkling_ops.is_checked_mode(), "raised" if "'block_table'" in str(e) else "wrong-message")
"""


@pytest.mark.parametrize(
    "env_value,expected",
    [(None, "False no-error"), ("0", "False no-error"), ("1", "True raised")],
    ids=["unset_is_off", "0_is_off", "1_is_on"],
)
def test_checked_mode_env_var_read_at_import(env_value, expected):
    """INKLING_OPS_CHECKED is read at import; checked mode is off by default (bad values pass unchecked)."""
    assert _run_with_env(env_value, _ENV_PROBE) == expected


def test_a_zero_width_block_table_is_accepted_when_there_are_no_tokens():
    """Nothing is launched for a call without tokens, so its table may have no columns (a
    scheduler step with requests and no new tokens); with tokens it is refused (above)."""
    case = make_case(q_lens=[0, 0], kv_lens=[0, 0])
    out = inkling_ops.rel_attn(*case.args(), **(case.kwargs() | dict(block_table=case.block_table[:, :0])))
    assert out.shape == case.q.shape


@pytest.mark.parametrize("entry", ["api", "ops"])
def test_a_block_table_addressing_more_than_2_30_keys_is_refused(entry):
    """A block-table row that can address more than 2**30 keys (max_blocks_per_seq * block_size)
    is refused by name before any launch: the kernels index keys in int32, and near 2**31 a tile's
    key index wraps (the Triton kernel then read before the table). 2**30 itself is accepted."""
    case = make_case(q_lens=[2], kv_lens=[5], num_heads=1, num_kv_heads=1, head_dim=8, page_size=16)
    page = 2**20  # a tiny cache with huge pages keeps the table small
    key_cache = torch.zeros(1, page, 1, 8)
    value_cache = torch.zeros(1, page, 1, 8)
    kwargs = case.kwargs()

    def call(width):
        table = torch.zeros(1, width, dtype=torch.int32)
        if entry == "api":
            return inkling_ops.rel_attn(case.q, key_cache, value_cache, **(kwargs | dict(block_table=table)))
        return torch.ops.inkling.rel_attn(
            case.q, key_cache, value_cache, table, case.cache_seqlens, case.cu_seqlens_q, case.rel_logits,
            max_seqlen_q=case.max_seqlen_q, softmax_scale=case.softmax_scale,
        )  # fmt: skip

    with pytest.raises(ValueError, match=r"'block_table' is of shape \(1, 1025\) at block_size 1048576 .*<= 1073741824"):
        call(2**10 + 1)
    assert call(2**10).shape == case.q.shape
