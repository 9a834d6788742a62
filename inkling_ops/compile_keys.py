"""Compile keys: everything that selects a distinct compiled kernel, and nothing else.

A :class:`CompileKey` is derived from a :class:`~inkling_ops.problem.RelAttnProblem` by pure
functions (no tensors, no device queries: device facts are passed in). Quantities that vary
from step to step (token count, number of requests, KV lengths) enter only through buckets
or through the split count, which is itself a function of buckets, so a serving
configuration produces a finite set of keys that :mod:`inkling_ops.serving` enumerates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .heuristics import DEFAULT_SPLIT_POLICY, SplitPolicy, bucket_max_seqlen_q, bucket_pow2, num_splits
from .problem import RelAttnProblem


@dataclass(frozen=True, order=True)
class CompileKey:
    """Identity of one compiled kernel variant (a dataclass, so it hashes and prints)."""

    dtype: str
    kv_dtype: str
    head_dim: int
    q_per_kv: int
    page_size: int
    rel_extent: int
    causal: bool
    window_left: int
    max_seqlen_q_bucket: int
    num_splits: int
    arch: str
    backend: str


@dataclass(frozen=True)
class DeviceFacts:
    """What the heuristics may know about the device; queried once by the dispatcher."""

    arch: str  # "sm_90a", "sm_80", ..., or "cpu"
    num_sms: int
    capability: tuple[int, int] | None = None  # CUDA compute capability; None: read from arch

    def __post_init__(self) -> None:
        if self.capability is None:  # "sm_90a" -> (9, 0), "sm_100" -> (10, 0); off CUDA (0, 0)
            digits = self.arch.removeprefix("sm_").rstrip("a")
            cap = (int(digits[:-1]), int(digits[-1])) if self.arch.startswith("sm_") and digits.isdigit() else (0, 0)
            object.__setattr__(self, "capability", cap)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def split_count(
    problem: RelAttnProblem, facts: DeviceFacts, policy: SplitPolicy = DEFAULT_SPLIT_POLICY
) -> int:
    """The split count a call runs with: the caller's if given (> 0), else the heuristic's."""
    if problem.num_splits > 0:
        return problem.num_splits
    return num_splits(
        max_seqlen_q_bucket=bucket_max_seqlen_q(problem.max_seqlen_q),
        num_reqs_bucket=bucket_pow2(problem.num_reqs),
        num_kv_heads=problem.num_kv_heads,
        kv_bound_bucket=bucket_pow2(problem.kv_capacity),
        window_left=problem.window_left,
        num_sms=facts.num_sms,
        policy=policy,
        rel_extent=problem.rel_extent,
    )


def compile_key(problem: RelAttnProblem, *, arch: str, backend: str, splits: int) -> CompileKey:
    """The key of the kernel that runs ``problem`` with ``splits`` KV splits."""
    return CompileKey(
        dtype=dtype_name(problem.dtype),
        kv_dtype=dtype_name(problem.kv_dtype),
        head_dim=problem.head_dim,
        q_per_kv=problem.q_per_kv,
        page_size=problem.page_size,
        rel_extent=problem.rel_extent,
        causal=problem.causal,
        window_left=problem.window_left,
        max_seqlen_q_bucket=bucket_max_seqlen_q(problem.max_seqlen_q),
        num_splits=splits,
        arch=arch,
        backend=backend,
    )
