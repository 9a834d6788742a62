"""Checked mode: opt-in host validation of the values that live in device tensors.

Off by default, because it copies the metadata to the host (a device sync, which also makes
the call impossible to capture in a CUDA graph). Turn it on to debug a serving stack:

    inkling_ops.set_checked_mode(True)          # process-wide
    with inkling_ops.checked_mode():            # for a block
        ...
    INKLING_OPS_CHECKED=1 python serve.py       # from the environment, read at import

With it on, every call validates cu_seqlens_q, cache_seqlens, block_table and max_seqlen_q
before any kernel runs and raises ``ValueError`` naming the argument. With it off, invalid
values never cause an out-of-bounds access (see :mod:`inkling_ops.metadata`), but the
affected output rows are unspecified.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from .problem import RelAttnProblem
from .validation import OP_NAME

_enabled = os.environ.get("INKLING_OPS_CHECKED", "0").lower() not in ("", "0", "false", "no")


def is_checked_mode() -> bool:
    """Whether calls validate their device-resident metadata on the host."""
    return _enabled


def set_checked_mode(enabled: bool) -> None:
    """Turn checked mode on or off for the whole process."""
    global _enabled
    _enabled = bool(enabled)


@contextlib.contextmanager
def checked_mode(enabled: bool = True) -> Iterator[None]:
    """Turn checked mode on (or off) inside a ``with`` block."""
    global _enabled
    previous = _enabled
    _enabled = bool(enabled)
    try:
        yield
    finally:
        _enabled = previous


def _fail(arg: str, what: str) -> ValueError:
    return ValueError(f"{OP_NAME} (checked mode): argument '{arg}' {what}")


def check_device_values(
    problem: RelAttnProblem,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
) -> None:
    """Validate the metadata's values on the host; raise ``ValueError`` naming the argument."""
    cu = cu_seqlens_q.tolist()
    seqlens = cache_seqlens.tolist()
    if cu[0] != 0:
        raise _fail("cu_seqlens_q", f"starts at {cu[0]}; expected 0")
    for b in range(problem.num_reqs):
        if cu[b + 1] < cu[b]:
            raise _fail("cu_seqlens_q", f"decreases at index {b + 1} ({cu[b]} -> {cu[b + 1]}); expected non-decreasing")
    if cu[-1] > problem.num_tokens:
        raise _fail("cu_seqlens_q", f"ends at {cu[-1]}; expected <= q's {problem.num_tokens} tokens")
    q_lens = [cu[b + 1] - cu[b] for b in range(problem.num_reqs)]
    if q_lens and max(q_lens) > problem.max_seqlen_q:
        b = q_lens.index(max(q_lens))
        raise _fail(
            "max_seqlen_q",
            f"is {problem.max_seqlen_q} but request {b} has {q_lens[b]} query tokens; expected an upper bound",
        )
    capacity = problem.kv_capacity
    for b, (kv, ql) in enumerate(zip(seqlens, q_lens)):
        if kv < ql:
            raise _fail(
                "cache_seqlens",
                f"[{b}] is {kv}, fewer than the request's {ql} new tokens; "
                "expected cache_seqlens to include the new tokens",
            )
        if kv > capacity:
            raise _fail(
                "cache_seqlens",
                f"[{b}] is {kv}, more than its block_table row addresses "
                f"({problem.max_blocks_per_seq} blocks x {problem.page_size}); expected <= {capacity}",
            )
    for b, kv in enumerate(seqlens):
        if kv <= 0 or q_lens[b] == 0:
            continue
        used = block_table[b, : -(-kv // problem.page_size)]
        bad = ((used < 0) | (used >= problem.num_blocks)).nonzero()
        if bad.numel():
            p = int(bad[0, 0])
            raise _fail(
                "block_table",
                f"[{b}, {p}] is {int(used[p])}; expected a block id in [0, {problem.num_blocks})",
            )
