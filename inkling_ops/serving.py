"""Ahead-of-time enumeration of every compile key a serving configuration can produce.

A serving engine calls :func:`enumerate_compile_keys` at start-up (and compiles each key in
its warmup), so a warmed process never compiles on the hot path. The enumeration walks the
same pure functions the dispatcher uses at run time over every bucket the runtime can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .compile_keys import CompileKey, DeviceFacts, compile_key, split_count
from .heuristics import DEFAULT_SPLIT_POLICY, SplitPolicy, bucket_max_seqlen_q, bucket_pow2
from .problem import RelAttnProblem


@dataclass(frozen=True)
class ServingConfig:
    """One attention layer type of a served model, plus the scheduler's limits."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    rel_extent: int
    page_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    window_left: int = -1
    dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype | None = None  # None: same as dtype

    @property
    def max_blocks_per_seq(self) -> int:
        """Width of the block table: ``cdiv(max_model_len, page_size)``."""
        return -(-self.max_model_len // self.page_size)


def problem_for(config: ServingConfig, *, num_tokens: int, num_reqs: int, max_seqlen_q: int, num_blocks: int = 1) -> RelAttnProblem:
    """The static problem of one runtime call of ``config`` (what ``check_call`` would return)."""
    return RelAttnProblem(
        num_tokens=num_tokens,
        num_heads=config.num_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        rel_extent=config.rel_extent,
        num_reqs=num_reqs,
        page_size=config.page_size,
        num_blocks=num_blocks,
        max_blocks_per_seq=config.max_blocks_per_seq,
        max_seqlen_q=max_seqlen_q,
        softmax_scale=1.0 / config.head_dim,
        window_left=config.window_left,
        causal=True,
        num_splits=0,
        dtype=config.dtype,
        kv_dtype=config.kv_dtype or config.dtype,
        device_type="cuda",
    )


def enumerate_compile_keys(
    config: ServingConfig,
    *,
    facts: DeviceFacts,
    backend: str,
    policy: SplitPolicy | None = DEFAULT_SPLIT_POLICY,
) -> set[CompileKey]:
    """Every key a call of ``config`` can produce on a device with ``facts``.

    ``policy`` is the backend's split policy (None for a backend that never splits). Covers
    every max_seqlen_q in [1, min(max_num_batched_tokens, max_model_len)] and every request
    count in [1, max_num_seqs], through their buckets.
    """
    keys = set()
    for q_bucket, reqs in representative_calls(config):
        problem = problem_for(config, num_tokens=max(q_bucket, reqs), num_reqs=reqs, max_seqlen_q=q_bucket)
        splits = 1 if policy is None else split_count(problem, facts, policy)
        keys.add(compile_key(problem, arch=facts.arch, backend=backend, splits=splits))
    return keys


def representative_calls(config: ServingConfig) -> list[tuple[int, int]]:
    """``(max_seqlen_q bucket, request-count bucket)`` pairs covering every runtime call of ``config``.

    Every max_seqlen_q in [1, min(max_num_batched_tokens, max_model_len)] and every request count in
    [1, max_num_seqs] falls into one of these pairs' buckets.
    """
    max_q = min(config.max_num_batched_tokens, config.max_model_len)
    q_buckets = sorted({bucket_max_seqlen_q(n) for n in _bucket_representatives(max_q)})
    req_buckets = sorted({bucket_pow2(n) for n in _bucket_representatives(config.max_num_seqs)})
    return [(q, r) for q in q_buckets for r in req_buckets]


def _bucket_representatives(limit: int) -> list[int]:
    """One value per power-of-two bucket of [1, limit] (the powers of two, then limit itself)."""
    reps = []
    n = 1
    while n < limit:
        reps.append(n)
        n *= 2
    reps.append(limit)
    return reps
