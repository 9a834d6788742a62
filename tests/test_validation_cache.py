"""The real implementations' validation cache (validation.check_call_cached): a repeated call skips
the checks, and any change of what the checks read runs them again (so bad input still raises)."""

from __future__ import annotations

import pytest
import torch

import inkling_ops
from inkling_ops import validation
from inkling_ops.testing import make_case


def _call(case, **overrides):
    args = dict(zip(("q", "key_cache", "value_cache"), case.args())) | case.kwargs() | overrides
    q, k, v = args.pop("q"), args.pop("key_cache"), args.pop("value_cache")
    return inkling_ops.rel_attn(q, k, v, **args)


def test_a_repeated_call_skips_the_checks(monkeypatch):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    _call(case)  # fills the cache
    calls = []
    real = validation.check_call
    monkeypatch.setattr(validation, "check_call", lambda *a: calls.append(a) or real(*a))
    _call(case)
    assert calls == []
    _call(case, max_seqlen_q=4)  # another scalar: checked again
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
    ],
)
def test_bad_input_after_a_cached_good_call_still_raises(change, match):
    case = make_case(q_lens=[3, 1], kv_lens=[20, 9])
    _call(case)
    _call(case)
    if match is None:
        problem = validation.check_call_cached(*case.args(), case.block_table, case.cache_seqlens, case.cu_seqlens_q,
                                               change(case)["rel_logits"], 3, case.softmax_scale, (-1, -1), True, 0, None)  # fmt: skip
        assert problem.rel_extent == case.rel_logits.shape[2] - 1
        return
    with pytest.raises((ValueError, TypeError), match=match):
        _call(case, **change(case))


def test_a_non_tensor_argument_gets_the_checks_error():
    case = make_case(q_lens=[2], kv_lens=[5])
    with pytest.raises(TypeError, match="argument 'rel_logits' must be a torch.Tensor"):
        validation.check_call_cached(*case.args(), case.block_table, case.cache_seqlens, case.cu_seqlens_q,
                                     [1.0], 2, 1.0, (-1, -1), True, 0, None)  # fmt: skip
