"""Ahead-of-time enumeration of every compile key a serving configuration can produce.

A serving engine calls :func:`enumerate_compile_keys` at start-up (and compiles each key in
its warmup), so a warmed process never compiles on the hot path. The enumeration walks the
same pure functions the dispatcher uses at run time over every bucket the runtime can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .compile_keys import STANDARD_LAYOUT, CompileKey, DeviceFacts, KVLayout, compile_key, split_count
from .heuristics import DEFAULT_SPLIT_POLICY, SplitPolicy, bucket_max_seqlen_q, bucket_pow2
from .problem import RelAttnProblem
from .validation import SUPPORTED_DTYPES


#: ServingConfig's fields that are counts or sizes (ints >= 1)
_POSITIVE_FIELDS = ("num_heads", "num_kv_heads", "head_dim", "rel_extent", "page_size", "max_num_seqs",
                    "max_num_batched_tokens", "max_model_len")  # fmt: skip


@dataclass(frozen=True)
class ServingConfig:
    """One attention layer type of a served model, plus the scheduler's limits. Refuses fields
    of the wrong type (``TypeError``) or range (``ValueError``), by name."""

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

    def __post_init__(self) -> None:
        for name in _POSITIVE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ServingConfig: {name} is {value!r} ({type(value).__name__}); expected an int")
            if value < 1:
                raise ValueError(f"ServingConfig: {name} is {value}; expected at least 1")
        if isinstance(self.window_left, bool) or not isinstance(self.window_left, int):
            raise TypeError(f"ServingConfig: window_left is {self.window_left!r}; expected an int (-1: no window)")
        if self.window_left < -1:
            raise ValueError(f"ServingConfig: window_left is {self.window_left}; expected -1 (no window) or at least 0")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"ServingConfig: num_heads is {self.num_heads} and num_kv_heads {self.num_kv_heads}; "
                             "expected num_heads a multiple of num_kv_heads")  # fmt: skip
        for name in ("dtype", "kv_dtype"):
            value = getattr(self, name)
            if not isinstance(value, torch.dtype) and not (name == "kv_dtype" and value is None):
                raise TypeError(f"ServingConfig: {name} is {value!r}; expected a torch.dtype such as torch.bfloat16")
        # the op's own rules (validation.check_call): a configuration outside them has no call to warm
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"ServingConfig: dtype is {self.dtype}; expected one of {list(SUPPORTED_DTYPES)}")
        if self.kv_dtype is not None and self.kv_dtype != self.dtype:
            raise ValueError(f"ServingConfig: kv_dtype is {self.kv_dtype} and dtype {self.dtype}; expected the "
                             "same dtype (the op takes K and V of q's dtype)")

    @property
    def max_blocks_per_seq(self) -> int:
        """Width of the block table: ``cdiv(max_model_len, page_size)``."""
        return -(-self.max_model_len // self.page_size)


def problem_for(
    config: ServingConfig,
    *,
    num_tokens: int,
    num_reqs: int,
    max_seqlen_q: int,
    num_blocks: int = 1,
    max_blocks_per_seq: int | None = None,
) -> RelAttnProblem:
    """The static problem of one runtime call of ``config`` (what ``check_call`` would return for
    its tensors). ``max_blocks_per_seq``: the block table's width (default the configuration's,
    ``cdiv(max_model_len, page_size)``; an engine may pass narrower tables)."""
    return RelAttnProblem(
        num_tokens=num_tokens,
        num_heads=config.num_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        rel_extent=config.rel_extent,
        num_reqs=num_reqs,
        page_size=config.page_size,
        num_blocks=num_blocks,
        max_blocks_per_seq=config.max_blocks_per_seq if max_blocks_per_seq is None else max_blocks_per_seq,
        max_seqlen_q=max_seqlen_q,
        softmax_scale=1.0 / config.head_dim,
        window_left=config.window_left,
        causal=True,
        num_splits=0,
        dtype=config.dtype,
        kv_dtype=config.kv_dtype or config.dtype,
        device_type="cuda",
    )


#: ``enumerate_compile_keys``'s default: the registered backend's own plan (and split policy)
_OWN_PLAN = object()


def config_layout(config: ServingConfig) -> KVLayout:
    """The :class:`~inkling_ops.compile_keys.KVLayout` of ``config``'s calls on contiguous tensors
    (what ``compile_keys.layout_of`` gives them): the standard layout, aligned when the strides
    ``layout_of`` tests are, in elements whatever the dtype: every stride of q, out, K and V a
    multiple of 16 (``head_dim`` one), those of ``rel_logits`` multiples of 8 (``rel_extent``
    one); else the same layout unaligned. Pure."""
    aligned = config.head_dim % 16 == 0 and config.rel_extent % 8 == 0
    return STANDARD_LAYOUT if aligned else STANDARD_LAYOUT._replace(aligned=False)


def enumerate_compile_keys(
    config: ServingConfig,
    *,
    facts: DeviceFacts,
    backend: str | None,
    policy: SplitPolicy | None | object = _OWN_PLAN,
) -> set[CompileKey]:
    """Every key a call of ``config`` can produce on a device with ``facts``, on ``backend``.

    By default each key comes from :func:`inkling_ops.planning.plan_for` on the registered backend
    of that name, the same function the dispatcher runs, for the calls that backend accepts (its
    ``why_not``). ``backend=None``: on the backend the dispatcher's default choice picks for each
    call (``planning.select_backend``; the keys then name more than one backend where a rule
    prefers one backend on some calls). ``policy``: a split policy (None: never split) to use
    instead, for a backend that is not registered. Covers every max_seqlen_q in
    [1, min(max_num_batched_tokens, max_model_len)] and every request count in [1, max_num_seqs],
    through their buckets, on the standard tensor layout of contiguous tensors
    (:func:`config_layout`: unaligned when ``rel_extent`` is not a multiple of 8 or ``head_dim``
    not one of 16).
    """
    from . import planning  # planning imports the backends; serving stays importable without them

    layout = config_layout(config)
    keys = set()
    registered = policy is _OWN_PLAN
    if not registered and backend is None:
        raise ValueError("enumerate_compile_keys: a split policy needs a backend name; got backend=None")
    chosen = planning.get_backend(backend) if registered and backend is not None else None
    for q_bucket, reqs, width in representative_calls(config):
        problem = problem_for(
            config, num_tokens=max(q_bucket, reqs), num_reqs=reqs, max_seqlen_q=q_bucket, max_blocks_per_seq=width
        )
        if registered:
            if chosen is None:
                target = problem._replace(device_type="cuda" if facts.arch.startswith("sm_") else "cpu")
                on, _ = planning.select_backend(target, facts, None, layout)
            elif chosen.why_not(problem, facts) is None:
                on = chosen
            else:
                continue
            keys.add(planning.plan_for(on, problem, facts, layout).key)
            continue
        splits = 1 if policy is None else split_count(problem, facts, policy)
        keys.add(compile_key(problem, arch=facts.arch, backend=backend, splits=splits, layout=layout))
    return keys


def representative_calls(config: ServingConfig) -> list[tuple[int, int, int]]:
    """``(max_seqlen_q bucket, request-count bucket, block-table width)`` triples covering every
    runtime call of ``config``.

    Every max_seqlen_q in [1, min(max_num_batched_tokens, max_model_len)], every request count in
    [1, max_num_seqs] and every block-table width in [1, max_blocks_per_seq] falls into the buckets
    of one triple (widths enter the split count only through the bucketed KV capacity
    ``bucket_pow2(width * page_size)``: one width per capacity bucket).
    """
    max_q = min(config.max_num_batched_tokens, config.max_model_len)
    q_buckets = sorted({bucket_max_seqlen_q(n) for n in _bucket_representatives(max_q)})
    req_buckets = sorted({bucket_pow2(n) for n in _bucket_representatives(config.max_num_seqs)})
    page, max_width = config.page_size, config.max_blocks_per_seq
    widths = []
    capacity = bucket_pow2(page)
    while capacity <= bucket_pow2(max_width * page):
        width = max(1, capacity // 2 // page + 1)  # the narrowest table whose capacity bucket is this one
        if width <= max_width and bucket_pow2(width * page) == capacity:
            widths.append(width)
        capacity *= 2
    return [(q, r, w) for q in q_buckets for r in req_buckets for w in widths]


def _bucket_representatives(limit: int) -> list[int]:
    """One value per power-of-two bucket of [1, limit] (the powers of two, then limit itself)."""
    reps = []
    n = 1
    while n < limit:
        reps.append(n)
        n *= 2
    reps.append(limit)
    return reps
