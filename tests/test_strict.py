"""Strict mode (inkling_ops.strict), and the CPU half of its guarantee: random serving calls of a
configuration, through the dispatcher's own plan function, land on enumerated (warmed) keys."""

from __future__ import annotations

import random

import pytest
import torch

import inkling_ops
from inkling_ops import dispatch, strict
from inkling_ops.compile_keys import DeviceFacts, compile_key
from inkling_ops.serving import ServingConfig, enumerate_compile_keys
from inkling_ops.validation import check_call

H200 = DeviceFacts(arch="sm_90a", num_sms=132)
#: Inkling at TP8 on an H200 engine: 8/1 global and 8/2 sliding layers, page 16
GLOBAL = ServingConfig(num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16,
                       max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072)  # fmt: skip
SLIDING = ServingConfig(num_heads=8, num_kv_heads=2, head_dim=128, rel_extent=512, window_left=511, page_size=16,
                        max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072)  # fmt: skip


def test_strict_compiles_restores_the_previous_setting():
    assert not strict.is_strict()
    with strict.strict_compiles():
        assert strict.is_strict()
        with strict.strict_compiles(False):
            assert not strict.is_strict()
        assert strict.is_strict()
    assert not strict.is_strict()
    with pytest.raises(TypeError, match="'enabled' must be a bool"):
        strict.set_strict(1)


def test_check_compile_names_the_key_and_the_configuration_field(monkeypatch):
    warmed = compile_key(inkling_ops.problem_for(GLOBAL, num_tokens=64, num_reqs=64, max_seqlen_q=1),
                         arch="sm_90a", backend="demo", splits=4)  # fmt: skip
    monkeypatch.setattr(strict, "_warmed", {})
    strict.note_warmed("demo", [warmed])
    missing = compile_key(inkling_ops.problem_for(GLOBAL, num_tokens=64, num_reqs=64, max_seqlen_q=1),
                          arch="sm_90a", backend="demo", splits=8)  # fmt: skip
    strict.check_compile("demo", missing)  # strict mode off: nothing happens
    with strict.strict_compiles(), pytest.raises(strict.StrictCompileError) as info:
        strict.check_compile("demo", missing, lambda: "64 tokens")
    message = str(info.value)
    assert "num_splits=8 (warmed: 4; configuration field: max_num_seqs and max_model_len" in message
    assert str(missing) in message and "the call: 64 tokens" in message
    assert "max_seqlen_q_bucket=1 (warmed" not in message  # only the fields that differ


def test_a_warmed_key_whose_kernel_left_the_store_says_so(monkeypatch):
    """A key that was warmed (here, or recorded in the store) but must compile again has lost its
    kernel from the store: the message says that, rather than listing no difference."""
    key = compile_key(inkling_ops.problem_for(GLOBAL, num_tokens=64, num_reqs=64, max_seqlen_q=1),
                      arch="sm_90a", backend="demo", splits=4)  # fmt: skip
    monkeypatch.setattr(strict, "_warmed", {})
    strict.note_warmed("demo", [key])
    with strict.strict_compiles(), pytest.raises(strict.StrictCompileError) as info:
        strict.check_compile("demo", key)
    assert "Warmed, but its compiled kernel is no longer in the kernel store" in str(info.value)


def test_environment_variable_turns_strict_mode_on():
    import subprocess
    import sys

    code = "import inkling_ops.strict as s; print(s.is_strict())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"INKLING_OPS_STRICT": "1", "PATH": ""})
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"INKLING_OPS_STRICT": "0", "PATH": ""})
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False"), on.stderr + off.stderr


@pytest.mark.parametrize("value, want", [("1", True), ("2", True), ("true", True), ("On", True), ("yes", True), ("", False),
                                         ("0", False), ("00", False), ("false", False), ("OFF", False), ("no", False),
                                         (None, False)])  # fmt: skip
def test_environment_values_read_as_words(value, want):
    assert strict._strict_from_environment(value) is want


def test_an_unreadable_environment_value_is_refused_by_name():
    with pytest.raises(ValueError, match="INKLING_OPS_STRICT is .maybe.; expected an integer"):
        strict._strict_from_environment("maybe")


def test_the_message_names_the_field_against_keys_warmed_in_another_process(tmp_path, monkeypatch):
    """The build-machine flow: the serving process loads every kernel from a store another
    machine warmed, so it warmed nothing itself; the keys that warmup recorded in the store still
    name the field a missing key differs in."""
    from inkling_ops.backends.triton_backend import TritonBackend

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(strict, "_warmed", {})
    problem = inkling_ops.problem_for(GLOBAL, num_tokens=64, num_reqs=64, max_seqlen_q=1)
    warmed = compile_key(problem, arch="sm_90a", backend="triton", splits=4)
    builder = TritonBackend()
    builder.store("sm_90a").directory.mkdir(parents=True)  # as after a warmup that compiled into it
    builder.record_warmed([warmed])
    server = TritonBackend()  # another process: nothing warmed in it
    assert server.stored_warm_keys("sm_90a") == [warmed]
    from inkling_ops import kernel_cache

    assert sum(kernel_cache.info(tmp_path).entries.values()) == 0  # the record is not a compiled entry
    missing = compile_key(problem, arch="sm_90a", backend="triton", splits=8)
    with strict.strict_compiles(), pytest.raises(strict.StrictCompileError) as info:
        strict.check_compile("triton", missing, stored=lambda: server.stored_warm_keys("sm_90a"))
    assert "num_splits=8 (warmed: 4; configuration field: max_num_seqs and max_model_len" in str(info.value)
    assert "--num-sms" in str(info.value)
    with strict.strict_compiles(), pytest.raises(strict.StrictCompileError, match="nor recorded|or recorded in the kernel store"):
        strict.check_compile("triton", missing)  # without the store's keys: nothing to compare with


def _random_call(config: ServingConfig, rng: random.Random):
    """check_call's problem for one random scheduler step of ``config`` (meta tensors): a few prefill
    chunks and decodes mixed, lengths up to max_model_len, a block table of random width."""
    num_reqs = rng.choice([rng.randint(1, 4), rng.randint(1, config.max_num_seqs)])  # few requests: long splits
    budget = config.max_num_batched_tokens
    q_lens = [1] * num_reqs
    for i in range(rng.randint(0, min(3, num_reqs))):  # some requests are prefill chunks
        q_lens[i] = rng.randint(1, max(1, (budget - num_reqs) // 3))
    num_tokens = sum(q_lens)
    width = rng.choice([config.max_blocks_per_seq, rng.randint(1, config.max_blocks_per_seq), rng.randint(1, 64)])
    meta = dict(device="meta")
    cache = torch.empty(4096, config.page_size, config.num_kv_heads, config.head_dim, dtype=config.dtype, **meta)
    return check_call(
        torch.empty(num_tokens, config.num_heads, config.head_dim, dtype=config.dtype, **meta), cache, cache,
        torch.empty(num_reqs, width, dtype=torch.int32, **meta), torch.empty(num_reqs, dtype=torch.int32, **meta),
        torch.empty(num_reqs + 1, dtype=torch.int32, **meta),
        torch.empty(num_tokens, config.num_heads, config.rel_extent, dtype=config.dtype, **meta),
        max(q_lens), 1.0 / config.head_dim, (config.window_left, 0) if config.window_left >= 0 else (-1, -1),
        True, 0, None,
    )  # fmt: skip


@pytest.mark.parametrize("config", [GLOBAL, SLIDING], ids=["global_8_1", "sliding_8_2"])
def test_random_serving_calls_land_on_enumerated_keys(config, monkeypatch):
    """>= 200 random calls (token and request counts, block-table widths, chunks mixed with decodes)
    planned by the dispatcher for an H200 all have keys the enumeration (what warmup compiles) holds."""
    monkeypatch.setitem(dispatch._FACTS, ("cuda", 0), H200)
    monkeypatch.setattr(dispatch, "_PLANS", {})
    enumerated = enumerate_compile_keys(config, facts=H200, backend=None)  # per call, the dispatcher's choice
    rng = random.Random(0)
    reached = set()
    for _ in range(250):
        problem = _random_call(config, rng)._replace(device_type="cuda")
        backend, plan = dispatch.plan_call(problem, torch.device("cuda", 0), None)
        assert backend.name == plan.key.backend in ("triton", "cute")
        assert plan.key in enumerated, f"{problem}: {plan.key} is not enumerated"
        reached.add(plan.key)
    assert len(reached) > 5  # the sweep reached several buckets, not one


@pytest.mark.parametrize("rel_extent, head_dim, dtype", [
    (12, 128, torch.bfloat16), (100, 128, torch.bfloat16), (1024, 128, torch.bfloat16), (100, 128, torch.float32),
    (12, 128, torch.float32), (1024, 128, torch.float32), (16, 8, torch.float32), (16, 24, torch.bfloat16),
])  # fmt: skip
def test_contiguous_calls_land_on_enumerated_keys_for_any_rel_extent(rel_extent, head_dim, dtype):
    """A contiguous call's layout (``layout_of``) is unaligned when E is not a multiple of 8 or
    head_dim not one of 16 (strides in elements, whatever the dtype); the enumeration (what warmup
    compiles) holds that layout's keys, so such a call does not compile on the run path (or fail
    in strict mode)."""
    from inkling_ops import planning
    from inkling_ops.compile_keys import layout_of
    from inkling_ops.serving import config_layout
    from inkling_ops.warmup import representative_args

    config = ServingConfig(num_heads=8, num_kv_heads=1, head_dim=head_dim, rel_extent=rel_extent, page_size=16,
                           max_num_seqs=8, max_num_batched_tokens=512, max_model_len=4096, dtype=dtype)  # fmt: skip
    enumerated = enumerate_compile_keys(config, facts=H200, backend=None)
    for max_q, reqs in ((1, 8), (300, 3), (512, 1)):
        args, out = representative_args(config, max_seqlen_q=max_q, num_reqs=reqs, device=torch.device("cpu"))
        layout = layout_of(args, out)
        assert layout.aligned == config_layout(config).aligned == (rel_extent % 8 == 0 and head_dim % 16 == 0)
        problem = check_call(*args, max_q, 1.0 / head_dim, (-1, -1), True, 0, out)._replace(device_type="cuda")
        key = planning.plan(problem, H200, None, layout=layout).key
        assert key in enumerated, f"E {rel_extent}, max_seqlen_q {max_q}, {reqs} requests: {key} is not enumerated"
