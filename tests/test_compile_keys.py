"""Compile keys, bucketing and the split heuristic (contract section 3), all pure Python.

The central property: the set of kernels a serving configuration can ask for is finite and
``enumerate_compile_keys`` lists it, i.e. every runtime call the scheduler can produce gets a key
the warmup compiled. ``test_enumeration_covers_every_runtime_call`` checks that exhaustively for
small configurations, building each call's problem with the same ``check_call`` the op runs
(on meta tensors) and its key with the same ``dispatch.plan_call`` the dispatcher runs.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inkling_ops
from inkling_ops import compat, dispatch, planning
from inkling_ops.backends.base import Backend
from inkling_ops.backends.triton_backend import TRITON_SPLIT_POLICY
from inkling_ops.compile_keys import CompileKey, DeviceFacts, compile_key, split_count
from inkling_ops.heuristics import DEFAULT_SPLIT_POLICY, SplitPolicy, bucket_max_seqlen_q, bucket_pow2, num_splits
from inkling_ops.serving import ServingConfig, enumerate_compile_keys, problem_for
from inkling_ops.validation import check_call

# --------------------------------------------------------------------------------------------------
# Bucketing
# --------------------------------------------------------------------------------------------------


def test_bucket_max_seqlen_q_table():
    assert [bucket_max_seqlen_q(n) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert compat.bucket_max_seqlen_q is bucket_max_seqlen_q
    assert inkling_ops.bucket_max_seqlen_q is bucket_max_seqlen_q


@pytest.mark.parametrize("k", range(0, 25))
def test_bucket_powers_of_two_are_fixed_points(k):
    assert bucket_max_seqlen_q(1 << k) == 1 << k
    assert bucket_max_seqlen_q((1 << k) + 1) == 1 << (k + 1)


@given(st.integers(min_value=1, max_value=1 << 40))
def test_bucket_is_the_smallest_power_of_two_at_least_n(n):
    b = bucket_max_seqlen_q(n)
    assert b & (b - 1) == 0 and b >= n and (b == 1 or b // 2 < n)


def test_bucket_pow2_small_values():
    assert [bucket_pow2(n) for n in range(0, 6)] == [1, 1, 2, 4, 4, 8]


# --------------------------------------------------------------------------------------------------
# inkling_fa4_num_splits: vLLM's Blackwell arithmetic, values worked out by hand from its docstring/code
# --------------------------------------------------------------------------------------------------

FA4_CASES = {
    # id: (kwargs, expected)
    "local-never-splits": (dict(is_local=True, batch_size=1, max_query_len=1, num_heads=8, num_kv_heads=1, max_kv_len=1 << 20), 1),
    # q_rows 8, 1 tile, base 8 CTAs, single: target 256 -> 32, capped at 16 for 8 KV heads
    "b1-decode-64/8-capped-16": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=64, num_kv_heads=8, max_kv_len=100_000), 16),
    # base 2, target 256 -> 128; kv <= 8192 caps at 32; cdiv(4096, 128) = 32
    "b1-decode-16/2-kv4k": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=16, num_kv_heads=2, max_kv_len=4096), 32),
    # kv <= 65536 caps at 64
    "b1-decode-16/2-kv64k": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=16, num_kv_heads=2, max_kv_len=65536), 64),
    # kv > 65536: cap 128; 256 // 2 = 128
    "b1-decode-16/2-kv1m": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=16, num_kv_heads=2, max_kv_len=1 << 20), 128),
    # 4 KV heads caps at 32 (target 256 // 4 = 64)
    "b1-decode-16/4-kv1m": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=16, num_kv_heads=4, max_kv_len=1 << 20), 32),
    # short KV: cdiv(200, 128) = 2 wins
    "b1-decode-8/1-kv200": (dict(is_local=False, batch_size=1, max_query_len=1, num_heads=8, num_kv_heads=1, max_kv_len=200), 2),
    # batch 8: not single, target 128, base 8 -> 16
    "b8-decode-8/1": (dict(is_local=False, batch_size=8, max_query_len=1, num_heads=8, num_kv_heads=1, max_kv_len=1 << 20), 16),
    # q_rows 32 * 8 = 256: still 1 tile, single; 256 // 8 = 32, capped 16
    "b1-q32-64/8": (dict(is_local=False, batch_size=1, max_query_len=32, num_heads=64, num_kv_heads=8, max_kv_len=1 << 20), 16),
    # q_rows 264 -> 2 tiles: target 64, base 16 -> 4
    "b1-q33-64/8": (dict(is_local=False, batch_size=1, max_query_len=33, num_heads=64, num_kv_heads=8, max_kv_len=1 << 20), 4),
    # 1 request, 512 rows of 8 heads -> 16 tiles, target 64 // 16 = 4
    "b1-q512-8/1": (dict(is_local=False, batch_size=1, max_query_len=512, num_heads=8, num_kv_heads=1, max_kv_len=1 << 20), 4),
    # big prefill batch: 64 // (64 * 8 * 32) = 0 -> at least 1
    "b64-q1024-64/8": (dict(is_local=False, batch_size=64, max_query_len=1024, num_heads=64, num_kv_heads=8, max_kv_len=1 << 16), 1),
}


@pytest.mark.parametrize("case_id", list(FA4_CASES))
def test_inkling_fa4_num_splits_pinned(case_id):
    kwargs, expected = FA4_CASES[case_id]
    assert compat.inkling_fa4_num_splits(**kwargs) == expected


def test_inkling_fa4_num_splits_is_keyword_only():
    with pytest.raises(TypeError):
        compat.inkling_fa4_num_splits(False, 1, 1, 8, 1, 1024)  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# CompileKey
# --------------------------------------------------------------------------------------------------


def _key(**overrides) -> CompileKey:
    fields = dict(
        dtype="bfloat16", kv_dtype="bfloat16", head_dim=128, q_per_kv=8, page_size=16, rel_extent=1024,
        causal=True, window_left=-1, max_seqlen_q_bucket=1, num_splits=8, arch="sm_90a", backend="triton",
    )  # fmt: skip
    fields.update(overrides)
    return CompileKey(**fields)


def test_compile_keys_are_dict_keys_and_sort():
    """Warmup keeps compiled kernels in a dict by key and compiles them in sorted order."""
    key = _key()
    assert {key: "compiled"}[_key()] == "compiled"
    assert len({key, _key(), _key(arch="sm_80"), _key(num_splits=4), _key(window_left=511)}) == 4
    assert sorted([_key(num_splits=4), _key(num_splits=1)])[0].num_splits == 1  # warmup order is deterministic


# --------------------------------------------------------------------------------------------------
# num_splits heuristic: properties
# --------------------------------------------------------------------------------------------------

pow2 = st.integers(min_value=0, max_value=20).map(lambda e: 1 << e)
policies = st.builds(
    SplitPolicy,
    max_split_q=st.integers(min_value=0, max_value=6).map(lambda e: 1 << e),
    programs_per_sm=st.integers(min_value=1, max_value=8),
    min_keys_per_split=st.integers(min_value=1, max_value=4096),
    max_splits=st.integers(min_value=1, max_value=256),
    band_only_programs_per_sm=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
    band_only_min_keys_per_split=st.integers(min_value=1, max_value=4096),
)
heuristic_inputs = st.fixed_dictionaries(
    dict(
        max_seqlen_q_bucket=st.integers(min_value=0, max_value=15).map(lambda e: 1 << e),
        num_reqs_bucket=st.integers(min_value=0, max_value=12).map(lambda e: 1 << e),
        num_kv_heads=st.integers(min_value=1, max_value=64),
        kv_bound_bucket=st.integers(min_value=0, max_value=21).map(lambda e: 1 << e),
        window_left=st.one_of(st.just(-1), st.integers(min_value=0, max_value=8192)),
        num_sms=st.integers(min_value=1, max_value=264),
        policy=st.one_of(st.just(DEFAULT_SPLIT_POLICY), policies),
        rel_extent=st.integers(min_value=0, max_value=8192),
    )
)


@given(heuristic_inputs)
def test_num_splits_is_a_power_of_two_within_bounds(kw):
    s = num_splits(**kw)
    assert isinstance(s, int) and s >= 1 and s & (s - 1) == 0
    assert s <= kw["policy"].max_splits


@given(heuristic_inputs)
def test_num_splits_is_one_above_max_split_q(kw):
    if kw["max_seqlen_q_bucket"] > kw["policy"].max_split_q:
        assert num_splits(**kw) == 1


@given(heuristic_inputs, st.integers(min_value=0, max_value=8))
def test_num_splits_non_increasing_in_num_reqs(kw, shift):
    more = dict(kw, num_reqs_bucket=kw["num_reqs_bucket"] << shift)
    assert num_splits(**more) <= num_splits(**kw)


@given(heuristic_inputs, st.integers(min_value=0, max_value=8))
def test_num_splits_non_decreasing_in_kv_bound_and_sms(kw, shift):
    assert num_splits(**dict(kw, kv_bound_bucket=kw["kv_bound_bucket"] << shift)) >= num_splits(**kw)
    assert num_splits(**dict(kw, num_sms=kw["num_sms"] + shift)) >= num_splits(**kw)


HEURISTIC_CASES = {
    # id: (kwargs, expected), default policy on an H100-like 132-SM device
    # decode, 1 request, 2 KV heads, 64K-key bound: wanted ceil(264 / 2) = 132, allowed 256, cap 64
    "decode-b1-hkv2-64k": (dict(max_seqlen_q_bucket=1, num_reqs_bucket=1, num_kv_heads=2, kv_bound_bucket=1 << 16, window_left=-1), 64),
    # 8 requests: ceil(264 / 16) = 17 -> rounded down to 16
    "decode-b8-hkv2-64k": (dict(max_seqlen_q_bucket=1, num_reqs_bucket=8, num_kv_heads=2, kv_bound_bucket=1 << 16, window_left=-1), 16),
    # sliding window 511: at most 512 keys -> 512 // 256 = 2 splits
    "decode-b1-window511": (dict(max_seqlen_q_bucket=1, num_reqs_bucket=1, num_kv_heads=2, kv_bound_bucket=1 << 16, window_left=511), 2),
    # short KV bound: 256 keys -> 1 split
    "decode-b1-kv256": (dict(max_seqlen_q_bucket=1, num_reqs_bucket=1, num_kv_heads=2, kv_bound_bucket=256, window_left=-1), 1),
    # spec decode q <= 16 still splits; 64 requests x 2 heads = 128 programs -> ceil(264 / 128) = 3 -> 2
    "specdec-q16-b64": (dict(max_seqlen_q_bucket=16, num_reqs_bucket=64, num_kv_heads=2, kv_bound_bucket=1 << 16, window_left=-1), 2),
    # prefill never splits
    "prefill-q32": (dict(max_seqlen_q_bucket=32, num_reqs_bucket=1, num_kv_heads=2, kv_bound_bucket=1 << 16, window_left=-1), 1),
}


@pytest.mark.parametrize("case_id", list(HEURISTIC_CASES))
def test_num_splits_pinned(case_id):
    kwargs, expected = HEURISTIC_CASES[case_id]
    assert num_splits(**kwargs, num_sms=132) == expected


def _band_only(num_reqs_bucket: int, **kw) -> dict:
    """Single-token decode, 2 KV heads, window 511 inside E 512, 8K bound, on 132 SMs."""
    base = dict(max_seqlen_q_bucket=1, num_reqs_bucket=num_reqs_bucket, num_kv_heads=2, kv_bound_bucket=8192,
                window_left=511, rel_extent=512, num_sms=132, policy=TRITON_SPLIT_POLICY)  # fmt: skip
    return dict(base, **kw)


# (num_reqs_bucket, expected) under the Triton policy: one program per SM, rounded down, splits of
# at least 128 keys (512 // 128 = 4 at most); measured best or within 5% of it on the H200
BAND_ONLY_CASES = [(4, 4), (8, 4), (16, 4), (32, 2), (64, 1), (128, 1), (256, 1)]


@pytest.mark.parametrize(("num_reqs_bucket", "expected"), BAND_ONLY_CASES)
def test_num_splits_band_only_decode_pinned(num_reqs_bucket, expected):
    assert num_splits(**_band_only(num_reqs_bucket)) == expected


def test_num_splits_band_only_rule_needs_all_its_conditions():
    """The band-only rule takes single-token decode with the window inside E and a policy that
    sets it; anything else follows the general fields (64 requests x 2 heads: ceil(264 / 128) = 3,
    512 // 256 = 2 -> 2 splits)."""
    assert num_splits(**_band_only(64)) == 1
    assert num_splits(**_band_only(64, rel_extent=511)) == 2  # window 511 not inside E 511
    assert num_splits(**_band_only(64, window_left=-1, kv_bound_bucket=512)) == 2  # no window
    assert num_splits(**_band_only(64, max_seqlen_q_bucket=2)) == 2  # speculative verify
    assert num_splits(**_band_only(64, policy=DEFAULT_SPLIT_POLICY)) == 2  # policy without the rule


# --------------------------------------------------------------------------------------------------
# Enumeration covers every runtime call
# --------------------------------------------------------------------------------------------------

CONFIGS = {
    "global-16/2-E1024": ServingConfig(
        num_heads=16, num_kv_heads=2, head_dim=128, rel_extent=1024, page_size=16,
        max_num_seqs=64, max_num_batched_tokens=192, max_model_len=65536,
    ),
    "sliding-16/2-E512-w511": ServingConfig(
        num_heads=16, num_kv_heads=2, head_dim=128, rel_extent=512, page_size=16,
        max_num_seqs=64, max_num_batched_tokens=192, max_model_len=65536, window_left=511,
    ),
    "global-8/1-page64-short": ServingConfig(
        num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=64,
        max_num_seqs=48, max_num_batched_tokens=100, max_model_len=3000,
    ),
}  # fmt: skip

FACTS = {
    "sm_90a-132": DeviceFacts(arch="sm_90a", num_sms=132, capability=(9, 0)),
    "sm_80-108": DeviceFacts(arch="sm_80", num_sms=108, capability=(8, 0)),
    "sm_100a-148": DeviceFacts(arch="sm_100a", num_sms=148, capability=(10, 0)),
    "cpu-2": DeviceFacts(arch="cpu", num_sms=2),
}

#: "registered": whatever the dispatcher picks among the registered backends (the CUDA default, or
#: the reference on CPU). The others put a stand-in kernel backend with that split policy first.
BACKEND_CHOICES = {
    "registered": None,
    "split-default": DEFAULT_SPLIT_POLICY,
    "split-eager": SplitPolicy(max_split_q=8, programs_per_sm=4, min_keys_per_split=64, max_splits=32),
}


class _SplittingBackend(Backend):
    """Accepts every problem; only its name and split policy matter to ``dispatch.plan_call``."""

    device_types = ("cpu", "cuda")
    default_device_types = ("cpu", "cuda")

    def __init__(self, name: str, policy: SplitPolicy):
        self.name = name
        self.split_policy = policy

    def why_not(self, problem, facts):
        return None

    def run(self, *args):  # pragma: no cover - never launched here
        raise AssertionError("plan only")


def _use_backends(mp: pytest.MonkeyPatch, choice: str, facts: DeviceFacts) -> torch.device:
    """Point the dispatcher at ``facts`` (through its own device-facts cache) and at the chosen backends."""
    device = torch.device("cpu") if facts.arch == "cpu" else torch.device("cuda", 0)
    mp.setitem(dispatch._FACTS, (device.type, 0), facts)
    mp.setattr(dispatch, "_PLANS", {})  # plans cached under other facts or backends
    if BACKEND_CHOICES[choice] is not None:
        mp.setattr(planning, "_BACKENDS", [_SplittingBackend(choice, BACKEND_CHOICES[choice]), *planning._BACKENDS])
    return device


@functools.cache
def _meta_cache(config: ServingConfig, num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (num_blocks, config.page_size, config.num_kv_heads, config.head_dim)
    return torch.empty(shape, dtype=config.dtype, device="meta"), torch.empty(shape, dtype=config.dtype, device="meta")


def runtime_problem(
    config: ServingConfig, *, q_len: int, num_reqs: int, num_tokens: int | None = None, width: int | None = None
):
    """The problem ``check_call`` builds for a step with one request of q_len rows and num_reqs - 1 decode rows.

    The arguments are meta tensors (check_call reads metadata only), shaped as vLLM shapes them:
    a fixed cache and a block table of width cdiv(max_model_len, page_size), or ``width``.
    """
    if num_tokens is None:
        num_tokens = q_len + num_reqs - 1 if num_reqs else 0
    num_blocks = 4096
    key_cache, value_cache = _meta_cache(config, num_blocks)
    meta = dict(device="meta")
    return check_call(
        torch.empty(num_tokens, config.num_heads, config.head_dim, dtype=config.dtype, **meta),
        key_cache,
        value_cache,
        torch.empty(num_reqs, config.max_blocks_per_seq if width is None else width, dtype=torch.int32, **meta),
        torch.empty(num_reqs, dtype=torch.int32, **meta),
        torch.empty(num_reqs + 1, dtype=torch.int32, **meta),
        torch.empty(num_tokens, config.num_heads, config.rel_extent, dtype=config.dtype, **meta),
        q_len,
        1.0 / config.head_dim,
        (config.window_left, 0) if config.window_left >= 0 else (-1, -1),
        True,
        0,
        None,
    )


def _on(problem, device_type: str):
    """The same problem as seen on ``device_type`` (check_call ran on meta tensors)."""
    return problem._replace(device_type=device_type)  # RelAttnProblem is a NamedTuple


def runtime_pairs(config: ServingConfig):
    """Every (q_len, num_reqs) the scheduler can produce: one request of q_len plus decode requests."""
    budget = config.max_num_batched_tokens
    for q_len in range(1, budget + 1):
        for num_reqs in range(1, min(config.max_num_seqs, budget - q_len + 1) + 1):
            yield q_len, num_reqs


@functools.cache
def runtime_problems(config_id: str) -> tuple:
    config = CONFIGS[config_id]
    problems = [(q, r, runtime_problem(config, q_len=q, num_reqs=r)) for q, r in runtime_pairs(config)]
    # Narrower block tables (an engine may pass them): every power of two and its successor, up to
    # the configuration's width, for the short queries whose split count can depend on the width.
    full = config.max_blocks_per_seq
    widths = sorted({w for k in range(full.bit_length()) for w in (1 << k, (1 << k) + 1) if w < full})
    problems += [
        (q, r, runtime_problem(config, q_len=q, num_reqs=r, width=w))
        for q, r in runtime_pairs(config) if q <= 16 for w in widths
    ]
    # Edge steps: no tokens at all (an all-padding step), with and without requests.
    problems += [(0, r, runtime_problem(config, q_len=0, num_reqs=r, num_tokens=0)) for r in (0, 1, config.max_num_seqs)]
    return tuple(problems)


def test_runtime_problem_matches_problem_for():
    """serving.problem_for (what the enumeration uses) describes exactly what check_call builds."""
    config = CONFIGS["sliding-16/2-E512-w511"]
    for q_len, num_reqs in [(1, 1), (1, 64), (7, 3), (129, 64), (192, 1)]:
        problem = runtime_problem(config, q_len=q_len, num_reqs=num_reqs)
        expected = problem_for(
            config, num_tokens=q_len + num_reqs - 1, num_reqs=num_reqs, max_seqlen_q=q_len, num_blocks=4096
        )
        assert _on(problem, "cuda") == expected


def test_runtime_pair_sweep_is_exhaustive():
    config = CONFIGS["global-16/2-E1024"]
    pairs = list(runtime_pairs(config))
    assert len(pairs) == len(set(pairs)) == 129 * 64 + sum(range(1, 64))
    assert (192, 1) in pairs and (129, 64) in pairs and (130, 64) not in pairs


@pytest.mark.parametrize("choice", list(BACKEND_CHOICES))
@pytest.mark.parametrize("facts_id", list(FACTS))
@pytest.mark.parametrize("config_id", list(CONFIGS))
def test_enumeration_covers_every_runtime_call(config_id, facts_id, choice, monkeypatch):
    config, facts = CONFIGS[config_id], FACTS[facts_id]
    device = _use_backends(monkeypatch, choice, facts)

    enumerated: dict[str, set[CompileKey]] = {}  # per backend the dispatcher picked
    reached: dict[str, set[CompileKey]] = {}
    for q_len, num_reqs, problem in runtime_problems(config_id):
        problem = _on(problem, device.type)
        backend, plan = dispatch.plan_call(problem, device, None)  # exactly what dispatch.run computes
        splits, key = plan.num_splits, plan.key
        if choice != "registered":
            assert backend.name == choice
        policy = backend.split_policy
        assert splits == key.num_splits == (1 if policy is None else split_count(problem, facts, policy))
        assert key.compact_grid == backend.compact_grid(problem)
        assert key == compile_key(
            problem, arch=facts.arch, backend=backend.name, splits=splits, compact_grid=key.compact_grid
        )
        if not enumerated:
            if choice == "registered":  # the dispatcher's choice per call (a rule may prefer cute on some)
                for k in enumerate_compile_keys(config, facts=facts, backend=None):
                    enumerated.setdefault(k.backend, set()).add(k)
            else:
                enumerated[backend.name] = enumerate_compile_keys(config, facts=facts, backend=backend.name, policy=policy)
            for keys in enumerated.values():
                assert 1 <= len(keys) < 64, sorted(keys)
        width = problem.max_blocks_per_seq
        assert key in enumerated[backend.name], f"q_len={q_len} num_reqs={num_reqs} width={width}: {key} was not enumerated"
        reached.setdefault(backend.name, set()).add(key)
    # Tight as well as complete: warmup compiles nothing that no call can use.
    for name, keys in enumerated.items():
        assert reached[name] == keys, sorted(keys - reached[name])


def test_enumeration_sizes():
    """Few kernels per layer type: the numbers a warmup pays for (printed with -s)."""
    policies = {"never-splits": None, **{k: v for k, v in BACKEND_CHOICES.items() if v is not None}}
    policies.update({f"{b.name}-policy": b.split_policy for b in planning._BACKENDS if b.split_policy is not None})
    sizes = {}
    for config_id, config in CONFIGS.items():
        for facts_id, facts in FACTS.items():
            for policy_id, policy in policies.items():
                keys = enumerate_compile_keys(config, facts=facts, backend="b", policy=policy)
                sizes[config_id, facts_id, policy_id] = len(keys)
    print("\n".join(f"{k}: {v}" for k, v in sizes.items()))
    assert max(sizes.values()) < 64
    # Without splitting, keys differ only by the max_seqlen_q bucket: 1, 2, 4, ..., 256 for 192 tokens.
    assert sizes["global-16/2-E1024", "sm_90a-132", "never-splits"] == 9
    assert sizes["global-8/1-page64-short", "cpu-2", "never-splits"] == 8  # 1 ... 128 for 100 tokens


# --------------------------------------------------------------------------------------------------
# Shapes varying inside one bucket never add a key
# --------------------------------------------------------------------------------------------------


@st.composite
def within_bucket(draw, lo_exp: int, hi_exp: int, pair_size: int = 2):
    """A bucket 2^e and `pair_size` values of (2^(e-1), 2^e] (or {1} for e == 0)."""
    e = draw(st.integers(min_value=lo_exp, max_value=hi_exp))
    lo = (1 << (e - 1)) + 1 if e > 0 else 1
    return [draw(st.integers(min_value=lo, max_value=1 << e)) for _ in range(pair_size)]


@st.composite
def bucket_mates(draw):
    """A layer shape, then two calls whose varying quantities share every bucket."""
    page_size = draw(st.sampled_from([16, 64, 128]))
    num_kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    layer = dict(
        num_heads=num_kv_heads * draw(st.sampled_from([1, 2, 4, 8])),
        num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from([64, 128])),
        rel_extent=draw(st.sampled_from([16, 512, 1024])),
        page_size=page_size,
        window_left=draw(st.sampled_from([-1, 0, 127, 511])),
    )
    q_lens = draw(within_bucket(0, 14))
    reqs = draw(within_bucket(0, 10))
    # Block-table widths whose capacity (width * page_size) shares a power-of-two bucket.
    cap_exp = draw(st.integers(min_value=page_size.bit_length() - 1, max_value=21))
    w_lo = max(1, (1 << (cap_exp - 1)) // page_size + 1)
    widths = [draw(st.integers(min_value=w_lo, max_value=(1 << cap_exp) // page_size)) for _ in range(2)]
    calls = [
        dict(
            q_len=q_lens[i],
            num_reqs=reqs[i],
            width=widths[i],
            num_tokens=draw(st.integers(min_value=q_lens[i], max_value=q_lens[i] + 4096)),
            num_blocks=draw(st.integers(min_value=1, max_value=1 << 16)),
        )
        for i in range(2)
    ]
    return layer, calls


def _problem(layer: dict, call: dict, dtype=torch.bfloat16):
    meta = dict(device="meta", dtype=dtype)
    cache = (call["num_blocks"], layer["page_size"], layer["num_kv_heads"], layer["head_dim"])
    window = (layer["window_left"], 0) if layer["window_left"] >= 0 else (-1, -1)
    return check_call(
        torch.empty(call["num_tokens"], layer["num_heads"], layer["head_dim"], **meta),
        torch.empty(cache, **meta),
        torch.empty(cache, **meta),
        torch.empty(call["num_reqs"], call["width"], dtype=torch.int32, device="meta"),
        torch.empty(call["num_reqs"], dtype=torch.int32, device="meta"),
        torch.empty(call["num_reqs"] + 1, dtype=torch.int32, device="meta"),
        torch.empty(call["num_tokens"], layer["num_heads"], layer["rel_extent"], **meta),
        call["q_len"],
        1.0 / layer["head_dim"],
        window,
        True,
        0,
        None,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bucket_mates(), st.sampled_from(list(FACTS)), st.sampled_from(list(BACKEND_CHOICES)))
def test_shapes_within_one_bucket_share_a_key(mates, facts_id, choice):
    layer, calls = mates
    first, second = (_problem(layer, c) for c in calls)
    assert bucket_max_seqlen_q(first.max_seqlen_q) == bucket_max_seqlen_q(second.max_seqlen_q)
    assert bucket_pow2(first.num_reqs) == bucket_pow2(second.num_reqs)
    assert bucket_pow2(first.kv_capacity) == bucket_pow2(second.kv_capacity)
    with pytest.MonkeyPatch.context() as mp:
        device = _use_backends(mp, choice, FACTS[facts_id])
        plans = [dispatch.plan_call(_on(p, device.type), device, None) for p in (first, second)]
    assert plans[0][0] is plans[1][0]  # same backend
    assert plans[0][1].key == plans[1][1].key  # same key


def test_arch_names_and_capabilities_round_trip_through_one_parser():
    from inkling_ops.kernels.arch import arch_capability, cuda_arch
    from inkling_ops.kernels.triton_launch import cuda_target

    for capability, name in (((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"), ((10, 0), "sm_100"), ((12, 0), "sm_120")):
        assert cuda_arch(capability) == name
        assert arch_capability(name) == capability
        assert DeviceFacts(arch=name, num_sms=1).capability == capability
        assert cuda_target(name) == 10 * capability[0] + capability[1]
    assert arch_capability("sm_100a") == arch_capability("sm_100f") == (10, 0)
    assert DeviceFacts(arch="cpu", num_sms=1).capability == (0, 0)
    for bad in ("sm90a", "sm_", "sm_9", "sm_9x", "cuda", "sm_90aa", "sm_9\u00b2", "sm_\u0669\u0660a"):
        with pytest.raises(ValueError, match=f"arch is '{bad}'; expected a CUDA architecture"):
            arch_capability(bad)
    with pytest.raises(ValueError, match="arch is 'sm_x'"):
        DeviceFacts(arch="sm_x", num_sms=1)


def test_plan_on_a_device_no_backend_runs_says_which_devices_do():
    """A problem on a device type no backend runs (only the dispatcher's fake implementation
    takes meta tensors) is refused with the device types that are run, not an empty reason."""
    from inkling_ops.testing import make_case

    problem = make_case([2], [5]).problem()._replace(device_type="meta")
    with pytest.raises(ValueError, match=r"no backend runs calls on device type 'meta'; .* one of \['cpu', 'cuda'\]"):
        planning.plan(problem, DeviceFacts(arch="cpu", num_sms=2))
