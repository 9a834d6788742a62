"""Pure heuristics: bucketing and the split-KV count.

No tensors and no device queries here: every input is an int (or a small frozen policy), so
the same function serves the runtime dispatcher and the ahead-of-time enumeration of compile
keys, and the two can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


def bucket_pow2(n: int) -> int:
    """Round ``n`` up to a power of two; 0 and 1 map to 1.

    Equivalent Python: ``1 << max(0, n - 1).bit_length()``.
    """
    return 1 << max(0, n - 1).bit_length()


def bucket_max_seqlen_q(max_seqlen_q: int) -> int:
    """Bucket the scheduler's bound on per-request query length to a power of two.

    ``[bucket_max_seqlen_q(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]``; this is
    what enters a compile key, so every max_seqlen_q in (2^(k-1), 2^k] shares one kernel.
    """
    return bucket_pow2(max_seqlen_q)


@dataclass(frozen=True)
class SplitPolicy:
    """How a backend wants the KV range of short-query calls split across programs.

    A split-KV launch runs ``num_reqs * num_kv_heads * num_splits`` programs, each over a
    contiguous share of one request's keys, then combines the partial results.
    """

    #: calls whose bucketed max_seqlen_q exceeds this never split (prefill has enough programs).
    max_split_q: int = 16
    #: aim for this many programs per streaming multiprocessor.
    programs_per_sm: int = 2
    #: do not split below this many keys per split (static bound).
    min_keys_per_split: int = 256
    #: hard cap; also bounds the workspace.
    max_splits: int = 64
    #: single-token decode on a layer whose window lies inside the bias extent (``0 <= window_left
    #: < rel_extent``: a short key range, every tile a bias-band tile): aim for this many programs
    #: per SM, rounding the split count down, and allow splits down to
    #: ``band_only_min_keys_per_split`` keys. None: such calls follow the fields above.
    band_only_programs_per_sm: int | None = None
    band_only_min_keys_per_split: int = 128


#: The policy used when a backend declares none.
DEFAULT_SPLIT_POLICY = SplitPolicy()


def num_splits(
    *,
    max_seqlen_q_bucket: int,
    num_reqs_bucket: int,
    num_kv_heads: int,
    kv_bound_bucket: int,
    window_left: int,
    num_sms: int,
    policy: SplitPolicy = DEFAULT_SPLIT_POLICY,
    rel_extent: int = 0,
) -> int:
    """Split-KV count for one call, a power of two in ``[1, policy.max_splits]``.

    Inputs are bucketed (powers of two) or static per configuration, so the result takes
    finitely many values per serving configuration. ``kv_bound_bucket`` is a static bound on
    any request's KV length (the block table's width times the page size, bucketed), never a
    device value. With a window, a query needs at most ``window_left + max_seqlen_q`` keys.
    Single-token decode with the window inside ``rel_extent`` follows the policy's
    ``band_only_*`` fields when it sets them.
    """
    if max_seqlen_q_bucket > policy.max_split_q:
        return 1
    keys = kv_bound_bucket if window_left < 0 else min(kv_bound_bucket, window_left + max_seqlen_q_bucket)
    programs = max(1, num_reqs_bucket * num_kv_heads)
    band_only = max_seqlen_q_bucket == 1 and 0 <= window_left < rel_extent
    if band_only and policy.band_only_programs_per_sm is not None:
        wanted = max(1, policy.band_only_programs_per_sm * num_sms // programs)  # floor
        allowed = max(1, keys // policy.band_only_min_keys_per_split)
    else:
        wanted = -(-policy.programs_per_sm * num_sms // programs)  # ceil
        allowed = max(1, keys // policy.min_keys_per_split)
    splits = max(1, min(wanted, allowed, policy.max_splits))
    return 1 << (splits.bit_length() - 1)  # round down to a power of two
