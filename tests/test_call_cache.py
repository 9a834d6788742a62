"""The real implementations' call cache (inkling_ops.call_cache): a repeated call skips the checks
and the planning, and any change of what the checks read runs them again (so bad input still
raises)."""

from __future__ import annotations

import sys

import pytest
import torch

import inkling_ops
from inkling_ops import call_cache, validation
from inkling_ops.testing import make_case


def _call(case, **overrides):
    args = dict(zip(("q", "key_cache", "value_cache"), case.args())) | case.kwargs() | overrides
    q, k, v = args.pop("q"), args.pop("key_cache"), args.pop("value_cache")
    return inkling_ops.rel_attn(q, k, v, **args)


def _count_checks(monkeypatch) -> list:
    calls = []
    real = call_cache.check_call
    monkeypatch.setattr(call_cache, "check_call", lambda *a: calls.append(a) or real(*a))
    return calls


def test_a_repeated_call_skips_the_checks(monkeypatch):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    expected = _call(case)  # fills the cache
    calls = _count_checks(monkeypatch)
    torch.testing.assert_close(_call(case), expected, rtol=0, atol=0)
    assert calls == []
    _call(case, max_seqlen_q=4)  # another scalar: checked again
    assert len(calls) == 1


def test_new_tensors_with_the_same_metadata_reuse_the_entry(monkeypatch):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    first = _call(case)
    calls = _count_checks(monkeypatch)
    fresh = dict(q=case.q.clone() * 2, rel_logits=case.rel_logits.clone() * 3)
    got = _call(case, **fresh)
    assert calls == []
    assert not torch.allclose(got, first)  # the new tensors' values were used, not the old ones
    call_cache.clear()
    torch.testing.assert_close(got, _call(case, **fresh), rtol=0, atol=0)  # same as a cold call
    assert len(calls) == 1


def test_a_transposed_view_with_the_same_shape_is_checked_again(monkeypatch):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    _call(case)
    calls = _count_checks(monkeypatch)
    t, h, d = case.q.shape
    q_strided = case.q.transpose(0, 1).contiguous().transpose(0, 1)  # same shape, other strides
    assert q_strided.shape == case.q.shape and q_strided.stride() != case.q.stride()
    _call(case, q=q_strided)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda c: dict(rel_logits=c.rel_logits.double()), "argument 'rel_logits' is of dtype torch.float64"),
        (lambda c: dict(rel_logits=c.rel_logits[:, :, :-1]), None),  # E - 1: still valid, a new problem
        (lambda c: dict(block_table=c.block_table.long()), "argument 'block_table' is of dtype torch.int64"),
        (lambda c: dict(softmax_scale=float("nan")), "argument 'softmax_scale' is nan"),
        (lambda c: dict(window_size=(5, 1)), "argument 'window_size' is \\(5, 1\\)"),
        (lambda c: dict(max_seqlen_q=0), "argument 'max_seqlen_q' is 0"),
        (lambda c: dict(cache_seqlens=c.cache_seqlens[:1]), "argument 'cu_seqlens_q' is of shape \\(3,\\)"),
        # equal to the cached call's (-1, -1) as values, but not ints: refused on a repeat as on a cold call
        (lambda c: dict(window_size=(-1.0, -1)), "argument 'window_size' must hold two ints"),
        (lambda c: dict(window_size=(-1, -1.0)), "argument 'window_size' must hold two ints"),
    ],
)
def test_bad_input_after_a_cached_good_call_still_raises(change, match):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    _call(case)
    _call(case)
    if match is None:
        out = _call(case, **change(case))
        assert out.shape == case.q.shape
        return
    with pytest.raises((ValueError, TypeError), match=match):
        _call(case, **change(case))


def _misaligned(t: torch.Tensor, nbytes: int) -> torch.Tensor:
    """A copy of ``t`` with the same shape and strides whose data starts ``nbytes`` past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 32, dtype=t.dtype)
    start = (-flat.data_ptr() % 16 + nbytes) // t.element_size()
    moved = flat[start : start + t.numel()].view(t.shape).copy_(t)
    assert moved.data_ptr() % 16 == nbytes and moved.stride() == t.stride()
    return moved


def test_an_entry_is_kept_per_pointer_alignment_not_only_all_aligned_or_not(monkeypatch):
    """A backend's prepared launch may need some tensors aligned and not others (CuTe: q, K, V,
    rel_logits, out). A repeat where another tensor is the misaligned one is prepared again."""
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    cu = _misaligned(case.cu_seqlens_q, 4)
    first = _call(case, cu_seqlens_q=cu)
    calls = _count_checks(monkeypatch)
    _call(case, cu_seqlens_q=cu)
    assert calls == []
    got = _call(case, cu_seqlens_q=cu, key_cache=_misaligned(case.key_cache, 4))
    assert len(calls) == 1  # a new entry: validated, planned and prepared for this alignment
    torch.testing.assert_close(got, first, rtol=0, atol=0)


def test_grad_mode_is_checked_on_every_call():
    case = make_case(q_lens=[2], kv_lens=[5])
    _call(case)
    q = case.q.clone().requires_grad_(True)
    with pytest.raises(RuntimeError, match="inference-only"):
        _call(case, q=q)
    with torch.no_grad():
        _call(case, q=q)


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(call_cache, "MAX_ENTRIES", 3)
    call_cache.clear()
    for e in range(2, 9):
        case = make_case(q_lens=[2], kv_lens=[5], rel_extent=e)
        _call(case)
    assert sum(len(v) for v in call_cache._ENTRIES.values()) <= 3


def test_validation_errors_name_the_argument_without_a_cache_entry():
    case = make_case(q_lens=[2], kv_lens=[5])
    with pytest.raises(TypeError, match="argument 'max_seqlen_q' must be an int"):
        validation.check_call(*case.args(), case.block_table, case.cache_seqlens, case.cu_seqlens_q,
                              case.rel_logits, 2.5, 1.0, (-1, -1), True, 0, None)  # fmt: skip


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("with_out", [False, True])
def test_eager_api_calls_skip_the_dispatcher_but_modes_and_the_profiler_see_the_op(with_out, monkeypatch):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    out = torch.empty_like(case.q) if with_out else None
    direct = []
    real = call_cache.run_out
    monkeypatch.setattr(call_cache, "run_out", lambda *a: direct.append(sys._getframe(1).f_code.co_name) or real(*a))
    expected = _call(case, out=out)
    assert direct == ["rel_attn"]  # plain eager: called by the API itself, not the op's registered function
    op = "inkling.rel_attn_out.default" if with_out else "inkling.rel_attn.default"
    with _Recorder() as mode:
        got = _call(case, out=None if out is None else torch.empty_like(out))
    assert op in mode.ops
    with torch.profiler.profile() as prof:
        _call(case, out=None if out is None else torch.empty_like(out))
    assert any(e.name == op.removesuffix(".default").replace(".", "::") for e in prof.events())
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_jit_trace_of_the_api_records_the_op():
    """Under torch.jit.trace the API goes through the dispatcher (the direct call would read traced
    shapes as ints and fail); the op is in the traced graph and the trace follows new inputs."""
    import warnings

    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    q, k, v = case.args()
    kwargs = case.kwargs()

    def layer(q, k, v, rel_logits):
        return inkling_ops.rel_attn(q, k, v, **(kwargs | dict(rel_logits=rel_logits)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's own warnings about Python values
        traced = torch.jit.trace(layer, (q, k, v, case.rel_logits), check_trace=False)
    assert "inkling::rel_attn" in str(traced.graph)
    q2 = torch.randn_like(q)
    torch.testing.assert_close(traced(q2, k, v, case.rel_logits), layer(q2, k, v, case.rel_logits), rtol=0, atol=0)


def test_a_call_on_another_device_than_the_current_one_launches_with_its_device_current(monkeypatch):
    """A model spread over GPUs in one process calls layers whose tensors are not on the current
    device; the launch must run with the tensors' device current (its context and stream). CPU
    stand-in: q reports device 1 while device 0 is current."""
    import contextlib

    case = make_case(q_lens=[2], kv_lens=[5])
    entered, launched = [], []

    @contextlib.contextmanager
    def device_guard(index):
        entered.append(index)
        yield

    monkeypatch.setattr(call_cache, "_current_cuda_device", lambda: 0)
    monkeypatch.setattr(call_cache.torch.cuda, "device", device_guard)
    real_launch = call_cache._launch
    monkeypatch.setattr(call_cache, "_launch", lambda *a: launched.append(list(entered)) or real_launch(*a))
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 1)
    _call(case)
    assert entered == [1] and launched == [[1]]
    monkeypatch.setattr(torch.Tensor, "get_device", lambda t: 0)  # already current: no guard, launched directly
    got = _call(case)
    assert entered == [1] and launched == [[1]]
    torch.testing.assert_close(got, inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="reference"))


def test_an_out_that_overlaps_an_input_is_refused_on_every_call():
    """``out`` sharing memory with q, K, V or rel_logits would be read while written: refused by
    name before any launch, on the first call of a signature and on a cached repeat; an ``out``
    right next to q in one buffer is fine."""
    case = make_case(q_lens=[3, 2], kv_lens=[9, 6])
    t, h, d = case.q.shape
    want = _call(case)
    buf = torch.zeros(2 * t + 1, h, d, dtype=case.q.dtype)
    q_in_buf, beside = buf[:t], buf[t : 2 * t]
    q_in_buf.copy_(case.q)
    torch.testing.assert_close(_call(case, q=q_in_buf, out=beside), want, rtol=0, atol=0)  # adjacent: apart
    torch.testing.assert_close(_call(case, q=q_in_buf, out=beside), want, rtol=0, atol=0)  # (cached)
    shifted = buf[1 : t + 1]  # one row into q: the same shape and strides as the calls above
    k_view = case.key_cache.view(-1)[: t * h * d].view(t, h, d)
    v_view = case.value_cache.view(-1)[-t * h * d :].view(t, h, d)
    before = (case.q.clone(), case.key_cache.clone())
    for out, name, q in ((shifted, "q", q_in_buf), (case.q, "q", case.q), (k_view, "key_cache", case.q), (v_view, "value_cache", case.q)):
        with pytest.raises(ValueError, match=f"out overlaps {name} in memory"):
            _call(case, q=q, out=out)
    torch.testing.assert_close(q_in_buf, case.q, rtol=0, atol=0)  # nothing was written
    torch.testing.assert_close((case.q, case.key_cache), before, rtol=0, atol=0, equal_nan=True)  # (NaN: unused pages)
    n_rel = case.rel_logits.numel()  # rel_logits' last element shared with out's first
    assert case.rel_logits.dtype == case.q.dtype
    buf2 = torch.zeros(n_rel - 1 + t * h * d, dtype=case.q.dtype)
    rel = buf2[:n_rel].view_as(case.rel_logits)
    rel.copy_(case.rel_logits)
    with pytest.raises(ValueError, match="out overlaps rel_logits in memory"):
        _call(case, rel_logits=rel, out=buf2[n_rel - 1 :].view(t, h, d))


def test_an_out_that_overlaps_an_index_tensor_is_refused():
    """The kernels read block_table, cache_seqlens and cu_seqlens_q while others write ``out``:
    an ``out`` carved from the same workspace as one of them is refused by name, on the first call
    and on a cached repeat, and nothing is written."""
    case = make_case(q_lens=[3, 2], kv_lens=[9, 6])
    t, h, d = case.q.shape
    nbytes = t * h * d * case.q.element_size()
    for name in ("cu_seqlens_q", "cache_seqlens", "block_table"):
        index = getattr(case, name)
        buf = torch.zeros(nbytes + 4 * index.numel(), dtype=torch.uint8)  # one byte workspace
        shared = buf[nbytes - 4 :].view(torch.int32)[: index.numel()].view(index.shape)  # holds out's last bytes
        shared.copy_(index)
        out = buf[:nbytes].view(case.q.dtype).view(t, h, d)
        before = buf.clone()
        for _ in range(2):
            with pytest.raises(ValueError, match=f"out overlaps {name} in memory"):
                _call(case, **{name: shared}, out=out)
        assert torch.equal(buf, before)  # nothing written


def test_an_out_whose_elements_share_memory_is_refused():
    """An expanded ``out`` (stride 0), or one whose heads overlap, would be written by many
    programs at once: refused by name before any launch. A padded, non-contiguous ``out`` whose
    elements are apart is fine."""
    case = make_case(q_lens=[3, 2], kv_lens=[9, 6])
    t, h, d = case.q.shape
    want = _call(case)
    expanded = torch.zeros(1, h, d, dtype=case.q.dtype).expand(t, h, d)
    heads_overlap = torch.zeros(t * h * d, dtype=case.q.dtype).as_strided((t, h, d), (h * d // 2, d // 2, 1))
    for out in (expanded, heads_overlap):
        with pytest.raises(ValueError, match="out.*share memory"):
            _call(case, out=out)
    padded = torch.zeros(t, h + 1, d, dtype=case.q.dtype)[:, :h]
    torch.testing.assert_close(_call(case, out=padded), want, rtol=0, atol=0)


def test_a_call_that_needs_grad_fails_before_any_compile(monkeypatch):
    """The inference-only error comes before a new signature is validated, planned and compiled
    (a first call with a q that requires grad would otherwise compile for seconds, or raise the
    strict mode's error instead)."""
    case = make_case(q_lens=[4], kv_lens=[7])
    monkeypatch.setattr(call_cache, "_new_entry", lambda *a: pytest.fail("compiled before the grad check"))
    with pytest.raises(RuntimeError, match="inference-only"):
        _call(case, q=case.q.clone().requires_grad_(True))


def test_byte_extent_counts_strides():
    x = torch.zeros(4, 6, dtype=torch.bfloat16)
    assert validation.byte_extent(x) == 48
    assert validation.byte_extent(x[:, ::2]) == ((4 - 1) * 6 + (3 - 1) * 2 + 1) * 2
    assert validation.byte_extent(x.t()) == 48
    assert validation.byte_extent(x[:0]) == 0


def test_views_of_one_layout_overlap_exactly_when_they_share_an_element():
    """The element test behind an overlapping address range (views of one shape, strides and
    dtype), against the sets of elements the two views reach, over random layouts; strides that do
    not nest count as overlapping."""
    import random

    rng = random.Random(0)
    checked = 0
    for _ in range(3000):
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
        strides = tuple(rng.choice([0, 1, 2, 3, 5, 8, 13, 24]) for _ in shape)
        delta = rng.randint(-60, 60)

        def reach(offset):
            return {offset + sum(i * s for i, s in zip(idx, strides)) for idx in __import__("itertools").product(*map(range, shape))}

        truth = bool(reach(0) & reach(delta))
        got = validation._offset_reachable(shape, strides, delta)
        dims = sorted((s, n) for s, n in zip(strides, shape) if n > 1)
        nested = all(s > sum((n2 - 1) * s2 for s2, n2 in dims[:k]) for k, (s, n) in enumerate(dims))
        assert got == truth if nested else got, (shape, strides, delta)
        checked += nested
    assert checked > 1000


def test_q_and_out_interleaved_in_one_buffer_but_apart_are_allowed():
    case = make_case(q_lens=[3, 2], kv_lens=[9, 6])
    t, h, d = case.q.shape
    buf = torch.zeros(t, 2, h, d, dtype=case.q.dtype)
    q, out = buf[:, 0], buf[:, 1]  # ranges overlap, elements do not
    q.copy_(case.q)
    want = _call(case)
    for _ in range(2):  # a first call and a cached repeat
        torch.testing.assert_close(_call(case, q=q, out=out), want, rtol=0, atol=0)
    with pytest.raises(ValueError, match="out overlaps q in memory"):
        _call(case, q=q, out=buf.as_strided((t, h, d), q.stride(), storage_offset=d))  # q shifted by one head


def test_the_triton_backend_sizes_its_grid_by_the_token_count_at_most(monkeypatch):
    """A loose but legal max_seqlen_q (vLLM passes bucketed bounds; 2**40 here) reaches Triton's
    grid capped at the token count: no launch past CUDA's grid limits after validation passed."""
    pytest.importorskip("triton")
    from inkling_ops.backends import triton_backend

    case = make_case(q_lens=[3, 2], kv_lens=[9, 6])
    seen = []
    monkeypatch.setattr(triton_backend, "run_triton", lambda *a, **kw: seen.append(kw["max_seqlen_q"]))
    _call(case, max_seqlen_q=2**40, backend="triton")
    assert seen == [5]  # 5 tokens


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(max_seqlen_q=2**63), ValueError, "max_seqlen_q"),
        (dict(num_splits=2**63), ValueError, "num_splits"),
        (dict(window_size=(2**63, 0)), ValueError, "window_size"),
        (dict(window_size=iter((7, 0))), TypeError, "window_size"),
        (dict(window_size={7: "x", 0: "y"}), TypeError, "window_size"),
    ],
)
def test_scalars_the_schema_cannot_hold_are_refused_by_name_even_after_a_good_call(change, error, match):
    """Ints past 64 bits, and a window that is not a pair (an iterator or a dict would unpack in
    the lookup), get the checks' errors, also when a good call of the same shapes is cached."""
    case = make_case(q_lens=[3], kv_lens=[8], window_left=7)
    _call(case)  # (7, 0): cached
    with pytest.raises(error, match=match):
        _call(case, **change)


def test_the_default_scale_leaves_a_bad_q_to_the_checks():
    """With softmax_scale left out, a q that is not (T, Hq, D) with D > 0 gets the checks' error
    naming q, not an IndexError or ZeroDivisionError from computing 1 / D."""
    case = make_case(q_lens=[2], kv_lens=[4])
    args = case.kwargs()
    args.pop("softmax_scale", None)
    for q in (torch.tensor(1.0), torch.zeros(2, case.q.shape[1], 0)):
        with pytest.raises((ValueError, TypeError), match="'q'"):
            inkling_ops.rel_attn(q, case.key_cache, case.value_cache, **args)
