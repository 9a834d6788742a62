"""How every backend reads the device-resident metadata (cu_seqlens_q, cache_seqlens).

These values cannot be validated without a host sync, so backends never trust them: each
clamps them the same way before use, which keeps every memory access in bounds whatever the
tensors hold. For valid metadata the clamps change nothing. :mod:`inkling_ops.checked` raises
instead, when checked mode is on.

Clamping rules, for request ``b`` with ``T`` tokens in q and ``capacity`` keys addressable
through one block-table row:

    start_b  = clamp(cu_seqlens_q[b], 0, T)
    end_b    = clamp(cu_seqlens_q[b + 1], start_b, T)     # q_len_b = end_b - start_b >= 0
    kv_len_b = clamp(cache_seqlens[b], 0, capacity)
    page ids = clamp(block_table[b, p], 0, num_blocks - 1)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestSpan:
    """One request as the kernels see it: rows [start, start + q_len) of q, kv_len keys."""

    start: int
    q_len: int
    kv_len: int


def request_spans(cu_seqlens_q: list[int], cache_seqlens: list[int], num_tokens: int, capacity: int) -> list[RequestSpan]:
    """Clamp host copies of the metadata into spans (see the module docstring).

    Equivalent PyTorch: ``start = cu.clamp(0, T)[:-1]``, ``end = max(start, cu[1:].clamp(0, T))``,
    ``kv = cache_seqlens.clamp(0, capacity)``.
    """
    spans = []
    for b, kv in enumerate(cache_seqlens):
        start = min(max(cu_seqlens_q[b], 0), num_tokens)
        end = min(max(cu_seqlens_q[b + 1], start), num_tokens)
        spans.append(RequestSpan(start=start, q_len=end - start, kv_len=min(max(kv, 0), capacity)))
    return spans
