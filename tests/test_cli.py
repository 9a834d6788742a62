"""The command line: ``python -m inkling_ops {warmup,cache}`` and the warmup behind it (CPU)."""

from __future__ import annotations

import json

import pytest
import torch

import inkling_ops
from inkling_ops import kernel_cache, strict
from inkling_ops.__main__ import main
from inkling_ops.serving import ServingConfig, enumerate_compile_keys
from inkling_ops.warmup import representative_args, warmup

TINY = ServingConfig(
    num_heads=4, num_kv_heads=2, head_dim=32, rel_extent=16, page_size=16,
    max_num_seqs=4, max_num_batched_tokens=32, max_model_len=64, dtype=torch.float32,
)  # fmt: skip


def test_warmup_dry_run_lists_the_enumerated_keys(capsys):
    flags = ["--heads", "8", "--kv-heads", "1", "--page-size", "16", "--rel-extent", "1024",
             "--max-num-seqs", "256", "--max-num-batched-tokens", "8192", "--max-model-len", "131072"]  # fmt: skip
    assert main(["warmup", "--dry-run", "--device", "cpu", *flags]) == 0
    printed = capsys.readouterr().out
    config = ServingConfig(num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16,
                           max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072)  # fmt: skip
    facts = inkling_ops.device_facts(torch.device("cpu"))
    keys = enumerate_compile_keys(config, facts=facts, backend="reference", policy=None)
    assert f"{len(keys)} compile keys on cpu for backend 'reference'" in printed
    assert printed.count("CompileKey(") == len(keys)


def test_warmup_dry_run_with_no_key_says_why(capsys):
    """A dry run that finds no key (Triton on this CPU, no --arch) says what to pass, instead of
    printing a bare count of 0."""
    assert main(["warmup", "--dry-run", "--backend", "triton", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "0 compile keys on cpu" in out and "pass --arch and --num-sms" in out


def test_warmup_config_file_and_unknown_fields(tmp_path, capsys):
    path = tmp_path / "serving.json"
    path.write_text(json.dumps({"num_heads": 4, "num_kv_heads": 2, "window_left": 15, "rel_extent": 16}))
    assert main(["warmup", "--dry-run", "--device", "cpu", "--config", str(path)]) == 0
    assert "window_left=15" in capsys.readouterr().out
    path.write_text(json.dumps({"num_heads": 4, "heads_per_kv": 2}))
    assert main(["warmup", "--dry-run", "--device", "cpu", "--config", str(path)]) == 2
    assert "unknown fields ['heads_per_kv']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, flags, expected",
    [
        (None, [], "No such file or directory"),
        ("42", [], "holds a number; expected a JSON object"),
        ("[1]", [], "holds an array; expected a JSON object"),
        ("{bad", [], "is not JSON"),
        ('{"dtype": 5}', [], "dtype is 5; expected a torch dtype name"),
        ('{"head_dim": "128"}', [], "head_dim is '128' (str); expected an int"),
        ("{}", ["--page-size", "0"], "page_size is 0; expected at least 1"),
        ("{}", ["--kv-heads", "3"], "expected num_heads a multiple of num_kv_heads"),
        ("{}", ["--device", "nosuch"], "--device is 'nosuch'"),
        ("{}", ["--arch", "sm90a", "--num-sms", "132"], "--arch is 'sm90a'; expected a CUDA arch"),
        ("{}", ["--arch", "sm_90", "--num-sms", "132"], "reports 'sm_90a'"),
        ("{}", ["--arch", "sm_90a", "--num-sms", "0"], "--num-sms is 0"),
        ("{}", ["--arch", "sm_900", "--num-sms", "132"], "--arch is 'sm_900'; expected a CUDA arch"),
        ("{}", ["--device", "cuda:7"], "--device is 'cuda:7', but this machine has"),
        ('{"kv_dtype": "float16"}', [], "kv_dtype is torch.float16 and dtype torch.bfloat16; expected the same dtype"),
        ("{}", ["--dtype", "int32"], "dtype is torch.int32; expected one of"),
    ],
    ids=["missing-file", "json-number", "json-array", "not-json", "dtype-number", "head-dim-string", "page-size-0",
         "heads-not-a-multiple", "bad-device", "arch-spelling", "arch-without-a", "no-sms", "arch-typo",
         "absent-cuda-device", "kv-dtype-not-q-dtype", "dtype-not-taken"],
)
def test_warmup_refuses_bad_input_with_a_message_not_a_traceback(tmp_path, capsys, content, flags, expected):
    path = tmp_path / "serving.json"
    if content is not None:
        path.write_text(content)
    assert main(["warmup", "--dry-run", "--config", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


@pytest.mark.parametrize(
    "value, expected",
    [("sm_9", "CUTE_DSL_ARCH is 'sm_9'; expected a CUDA arch"), ("sm_90", "CUTE_DSL_ARCH is 'sm_90'; a device of that compute capability reports 'sm_90a'")],
    ids=["spelling", "without-a"],
)
def test_warmup_checks_cute_dsl_arch_as_it_checks_arch(tmp_path, capsys, monkeypatch, value, expected):
    """Without a GPU, ``--backend cute`` takes its target from the DSL's CUTE_DSL_ARCH: checked as
    ``--arch`` is, and the error names the variable."""
    if torch.cuda.is_available():
        pytest.skip("CUTE_DSL_ARCH stands in for --arch only without a GPU")
    monkeypatch.setenv("CUTE_DSL_ARCH", value)
    path = tmp_path / "serving.json"
    path.write_text("{}")
    assert main(["warmup", "--dry-run", "--config", str(path), "--backend", "cute"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


def test_representative_args_are_a_valid_call_of_the_config():
    args, out = representative_args(TINY, max_seqlen_q=20, num_reqs=3, device=torch.device("cpu"))
    assert args.cu_seqlens_q.tolist() == [0, 20, 21, 22]
    assert args.block_table.shape == (3, TINY.max_blocks_per_seq)
    got = inkling_ops.rel_attn(*args[:3], block_table=args.block_table, cache_seqlens=args.cache_seqlens,
                               cu_seqlens_q=args.cu_seqlens_q, rel_logits=args.rel_logits, max_seqlen_q=20)  # fmt: skip
    assert got.shape == out.shape and torch.isfinite(got).all()


def test_warmup_compiles_without_running_a_call(monkeypatch):
    """Warmup asks the backend to compile each key (the reference has nothing to compile) and
    launches nothing."""
    monkeypatch.setattr(torch.ops.inkling, "rel_attn_out", lambda *a, **k: pytest.fail("warmup ran a call"))
    monkeypatch.setattr(strict, "_warmed", {})
    summary = warmup(TINY, device="cpu", progress=False)
    facts = inkling_ops.device_facts(torch.device("cpu"))
    assert set(summary.keys) == enumerate_compile_keys(TINY, facts=facts, backend="reference", policy=None)
    assert summary.backend == "reference" and summary.compiled == summary.loaded == summary.launched == 0
    assert strict.warmed_keys("reference") >= set(summary.keys)


def test_cache_info_and_clear_count_our_store(tmp_path):
    store = kernel_cache.KernelStore("sm_90a", root=tmp_path)
    store.put("a", {"rel_attn_fwd_kernel.json": b"{}", "rel_attn_fwd_kernel.cubin": b"x" * 100})
    store.put("b", {"rel_attn_combine_kernel.json": b"{}", "rel_attn_combine_kernel.cubin": b"x" * 100})
    info = kernel_cache.info(tmp_path)
    assert info.entries == {store.directory.name: 2}
    assert kernel_cache.clear(tmp_path) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_command(action, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    kernel_cache.KernelStore("sm_90a", root=tmp_path).put("a", {"k.json": b"{}"})
    assert main(["cache", action]) == 0
    printed = capsys.readouterr().out
    assert str(tmp_path) in printed
    assert ("1 compiled variants" if action == "info" else "removed 1 compiled variants") in printed
