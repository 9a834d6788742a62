"""CPU smoke checks of the lab's peer benchmark (meta/bench/benchmark.py, not part of the package):
accounting, inputs, the correctness check, both clocks, the smoke run end to end (records, log,
table), the plot and the dry run.

The GPU-only parts (flash-attn-4, compiled FlexAttention, do_bench, CUDA graphs, memory) cannot
run here; the smoke run shows that they report themselves unavailable instead of failing.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path

import pytest
import torch
from brute_force import rel_attn_brute_force
from lab_tools import load_lab_module, load_tool

_BENCHMARK = Path(__file__).resolve().parents[1] / "meta" / "bench" / "benchmark.py"


def _load_benchmark():
    """meta/bench/benchmark.py, under the name the lab tools use for it too."""
    return load_lab_module("inkling_lab_benchmark", _BENCHMARK)


bm = _load_benchmark()

CPU = torch.device("cpu")


def _case(name: str) -> bm.BenchCase:
    return next(bm.case_from_dict(dict(c)) for c in bm.EMBEDDED_CASES if c["name"] == name)


def _brute_pairs(q_len: int, kv_len: int, window_left: int) -> int:
    total = 0
    for i in range(q_len):
        a = kv_len - q_len + i
        total += sum(1 for j in range(kv_len) if 0 <= a - j and (window_left < 0 or a - j <= window_left))
    return total


def _brute_keys_read(q_len: int, kv_len: int, window_left: int) -> int:
    seen = set()
    for i in range(q_len):
        a = kv_len - q_len + i
        seen.update(j for j in range(kv_len) if 0 <= a - j and (window_left < 0 or a - j <= window_left))
    return len(seen)


# --- accounting ---------------------------------------------------------------------------------


def test_visible_pairs_of_the_anchor_cases():
    assert bm.visible_pairs(_case("prefill8k_global")) == 8192 * 8193 // 2
    assert bm.visible_pairs(_case("prefill32k_global")) == 32768 * 32769 // 2
    # 4 requests, queries at positions 14336..16383 see 14337..16384 keys
    assert bm.visible_pairs(_case("chunk2k_on16k_x4")) == 4 * sum(range(14337, 16385))
    assert bm.visible_pairs(_case("prefill8k_local")) == 512 * 513 // 2 + (8192 - 512) * 512
    assert bm.visible_pairs(_case("decode_b64_8k")) == 64 * 8192
    assert bm.visible_pairs(_case("decode_b64_8k_local")) == 64 * 512
    assert bm.visible_pairs(_case("decode_b1_128k")) == 131072


@pytest.mark.parametrize("q_len,kv_len", [(1, 1), (1, 9), (5, 5), (3, 17), (17, 17), (16, 40), (40, 40)])
@pytest.mark.parametrize("window_left", [-1, 0, 1, 4, 15, 16, 100])
def test_pairs_and_keys_read_match_brute_force(q_len, kv_len, window_left):
    assert bm.visible_pairs_per_request(q_len, kv_len, window_left) == _brute_pairs(q_len, kv_len, window_left)
    assert bm.kv_positions_read_per_request(q_len, kv_len, window_left) == _brute_keys_read(q_len, kv_len, window_left)


def test_byte_counts():
    # 64 x 8K decode: K+V 64*8192*1*128*2 B each, q and out 64*8*128*2 B each, rel 64*8*1024*2 B
    assert bm.byte_count(_case("decode_b64_8k")) == 269_746_176
    assert bm.byte_count(_case("decode_b1_128k")) == 67_108_864 + 2 * 2048 + 16384
    # sliding decode reads only the 512-key window of its 2 KV heads
    local = _case("decode_b64_8k_local")
    assert bm.byte_count(local) == 2 * (2 * 64 * 512 * 2 * 128 + 2 * 64 * 8 * 128 + 64 * 8 * 512)
    assert bm.flop_count(_case("prefill8k_global")) == 4 * 128 * 8 * (8192 * 8193 // 2)


def test_throughput_reproduces_anchor_figures():
    """anchors.md: fa4_scoremod 0.606 ms = 227 TFLOP/s (8K prefill), 0.314 ms = 858 GB/s (64 x 8K decode)."""
    assert bm.tflops(_case("prefill8k_global"), 0.606) == pytest.approx(227, abs=1)
    assert bm.tflops(_case("prefill8k_local"), 0.130) == pytest.approx(128, abs=1)
    assert bm.tflops(_case("prefill32k_global"), 9.02) == pytest.approx(244, abs=1)
    assert bm.gbps(_case("decode_b64_8k"), 0.314) == pytest.approx(858, abs=2)
    assert bm.gbps(_case("decode_b1_128k"), 4.61) == pytest.approx(14.6, abs=0.1)
    assert bm.headline_metric(_case("decode_b1_128k")) == "GB/s"
    assert bm.headline_metric(_case("chunk2k_on16k_x4")) == "TFLOP/s"


# --- cases ---------------------------------------------------------------------------------------


def test_embedded_cases_match_the_shared_file():
    if not bm.SHARED_CASES.is_file():
        pytest.skip(f"{bm.SHARED_CASES} is not on this machine")
    shared = json.loads(bm.SHARED_CASES.read_text())["cases"]
    assert [dict(c) for c in bm.EMBEDDED_CASES] == shared


def test_case_file_override_and_errors(tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"cases": [dict(bm.EMBEDDED_CASES[0], name="mine")]}))
    cases, source = bm.load_cases(path)
    assert [c.name for c in cases] == ["mine"] and source == str(path)
    path.write_text(json.dumps([dict(bm.EMBEDDED_CASES[0], heads=3)]))
    with pytest.raises(ValueError, match="unknown keys"):
        bm.load_cases(path)
    with pytest.raises(ValueError, match="multiple of hkv"):
        bm.BenchCase("bad", 1, 4, 4, hq=6, hkv=4, d=128, rel_extent=16)
    assert [c.name for c in bm.filter_cases(cases, "min,zzz")] == ["mine"]
    assert bm.filter_cases(cases, "zzz") == []


def test_smoke_cases_keep_the_structure():
    for entry in bm.EMBEDDED_CASES:
        case, small = bm.case_from_dict(dict(entry)), bm.smoke_case(bm.case_from_dict(dict(entry)))
        assert small.name.endswith("@smoke")
        assert (small.q_len == 1) == (case.q_len == 1)
        assert (small.q_len == small.kv_len) == (case.q_len == case.kv_len)
        assert small.is_local == case.is_local and (small.hq, small.hkv, small.d) == (case.hq, case.hkv, case.d)
        if small.is_local:
            assert small.window_left == small.rel_extent - 1


# --- inputs and the correctness check -------------------------------------------------------------


@pytest.mark.parametrize("page_size", [16, 128])
def test_paged_inputs_hold_the_dense_kv(page_size):
    case = dataclasses.replace(_case("chunk2k_on16k_x4"), q_len=8, kv_len=200, name="t")
    inputs = bm.make_inputs(case, CPU, seed=1)
    paged = bm.make_paged(inputs, page_size)
    pages = -(-case.kv_len // page_size)
    assert paged.block_table.dtype == torch.int32 and paged.block_table.shape == (case.num_reqs, pages)
    used = paged.block_table.flatten().long()
    assert len(set(used.tolist())) == used.numel()  # distinct blocks
    spare = sorted(set(range(paged.key_cache.shape[0])) - set(used.tolist()))
    assert len(spare) == bm.SPARE_BLOCKS and paged.key_cache[spare].isnan().all()
    for b in range(case.num_reqs):
        k = paged.key_cache[paged.block_table[b].long()].reshape(-1, case.hkv, case.d)
        v = paged.value_cache[paged.block_table[b].long()].reshape(-1, case.hkv, case.d)
        assert torch.equal(k[: case.kv_len], inputs.k_dense[b]) and torch.equal(v[: case.kv_len], inputs.v_dense[b])
        assert k.isfinite().all() and v.isfinite().all()  # the last page's tail is finite
    assert (inputs.q != 0).all() and (inputs.rel_logits != 0).all()


def _serving_case(name: str) -> bm.BenchCase:
    cases, _ = bm.load_cases(bm.BENCH_DIR / "serving_cases.json")
    return next(c for c in cases if c.name == name)


def _any_case(name: str) -> bm.BenchCase:
    return _serving_case(name) if name.startswith("serving") else _case(name)


@pytest.mark.parametrize(
    "name",
    [pytest.param("chunk2k_on16k_x4", marks=pytest.mark.slow), "prefill8k_local", "decode_b64_8k_local",
     "serving_chunk2k_decodes63_global", "serving_chunk2k_decodes63_sliding"],
)  # fmt: skip
@pytest.mark.parametrize("with_bias", [True, False])
def test_reference_rows_match_the_brute_force_oracle(name, with_bias):
    case = bm.smoke_case(_any_case(name))
    inputs = bm.make_inputs(case, CPU, seed=2, dtype=torch.bfloat16)
    paged = bm.make_paged(inputs, 16)
    rel = inputs.rel_logits if with_bias else torch.zeros_like(inputs.rel_logits)
    oracle = rel_attn_brute_force(
        inputs.q, paged.key_cache, paged.value_cache, paged.block_table, inputs.cache_seqlens, inputs.cu_seqlens_q, rel,
        softmax_scale=case.softmax_scale, window_size=case.window_size,
    )  # fmt: skip
    rows = bm.check_rows(case)
    ref = bm.reference_rows(inputs, rows, with_bias=with_bias)
    assert bm.relative_l2(oracle, rows, ref, case) < 1e-12
    assert bm.relative_l2(oracle.flip(0), rows, ref, case) > 1e-2  # the check does notice wrong rows


def test_check_rows_cover_first_and_last_request():
    rows = bm.check_rows(_case("chunk2k_on16k_x4"))
    assert {b for b, _ in rows} == {0, 3} and {i for _, i in rows} == {0, 1, 1024, 2046, 2047}
    assert bm.check_rows(_case("decode_b1_128k")) == [(0, 0)]


# --- mixed batches (a chunk and decodes) ---------------------------------------------------------


def test_serving_cases_are_a_chunk_and_decodes():
    case = _serving_case("serving_chunk2k_decodes63_global")
    assert case.mixed and case.total_reqs == 64 and case.num_tokens == 2048 + 63
    assert case.q_lens == (2048,) + (1,) * 63
    # the chunk's rows see 6145..8192 keys, each decode all 8192
    assert bm.visible_pairs(case) == sum(range(6145, 8193)) + 63 * 8192
    kv = 2 * (8192 + 63 * 8192) * 1 * 128
    assert bm.byte_count(case) == 2 * (kv + 2 * 2111 * 8 * 128 + 2111 * 8 * 1024)
    assert bm.headline_metric(case) == "TFLOP/s"
    assert [case.row(b, i) for b, i in [(0, 0), (0, 2047), (1, 0), (63, 0)]] == [0, 2047, 2048, 2110]
    rows = bm.check_rows(case)
    assert {b for b, _ in rows} == {0, 1, 63} and (0, 2047) in rows and (63, 0) in rows
    sliding = _serving_case("serving_chunk2k_decodes63_sliding")
    assert bm.visible_pairs(sliding) == 2048 * 512 + 63 * 512
    small = bm.smoke_case(case)
    assert small.decodes == 3 and small.mixed and small.num_reqs == 1


def test_mixed_inputs_pack_the_decodes_after_the_chunk():
    case = bm.smoke_case(_serving_case("serving_chunk2k_decodes63_sliding"))
    inputs = bm.make_inputs(case, CPU, seed=3)
    assert inputs.cu_seqlens_q.tolist() == [0, case.q_len, case.q_len + 1, case.q_len + 2, case.q_len + 3]
    assert inputs.q.shape[0] == case.num_tokens and inputs.cache_seqlens.tolist() == [case.kv_len] * 4
    paged = bm.make_paged(inputs, 16)
    assert paged.block_table.shape[0] == case.total_reqs
    with pytest.raises(bm.Unavailable, match="mixed batch"):
        bm.make_dense(inputs)
    assert bm.SdpaPeer().skipped(_serving_case("serving_chunk2k_decodes63_global")) == bm.MIXED_DENSE_REASON
    assert bm.FlexPeer().skipped(case) == bm.MIXED_DENSE_REASON and bm.FlexPeer().skipped(_case("prefill8k_local")) is None
    with pytest.raises(ValueError, match="decodes"):
        dataclasses.replace(case, decodes=-1)


# --- table ----------------------------------------------------------------------------------------


def test_table_ratio_is_peer_time_over_ours_per_clock():
    case = _case("prefill8k_global")
    env = {"timestamp": "t", "git_sha": "s"}
    recs = [
        bm.make_record(env, case, 128, "ours", eager_ms=0.4, graph_ms=0.3, err_flag=False),
        bm.make_record(env, case, 128, "fa4_scoremod", eager_ms=1.2, graph_ms=0.6, err_flag=True),
        bm.make_record(env, case, 128, "flex", eager_ms=0.8, graph_timing="capture failed: RuntimeError: x", err_flag=False),
        bm.make_record(env, case, 128, "sdpa_nobias", status="unavailable", reason="x"),
    ]
    table = bm.format_table(recs)
    header = next(line for line in table.splitlines() if line.startswith("case"))
    assert "ours eager" in header and "ours graph" in header and header.index("fa4_scoremod eager") < header.index("fa4_scoremod graph")
    assert "0.4ms 344T 1.00x" in table and "0.3ms 458T 1.00x" in table  # ours on each clock
    assert "1.2ms 115T 3.00x!" in table and "0.6ms 229T 2.00x!" in table  # ratios per clock
    assert "0.8ms 172T 2.00x" in table and "capture failed" in table and "n/a" in table


def test_table_and_clock_ms_read_old_single_clock_records():
    """Records before issue 15 hold one ``median_ms`` on the clock their ``timing`` names."""
    case = _case("decode_b64_8k")
    old = dict(bm.make_record({}, case, 16, "ours"), median_ms=0.1, timing="CUDA graph replay median of 20")
    for key in ("eager_ms", "graph_ms"):
        old.pop(key)
    eager_old = dict(old, peer="flex", median_ms=0.2, timing="triton do_bench median (L2 flushed)")
    assert (bm.clock_ms(old, "graph"), bm.clock_ms(old, "eager")) == (0.1, None)
    assert (bm.clock_ms(eager_old, "graph"), bm.clock_ms(eager_old, "eager")) == (None, 0.2)
    table = bm.format_table([old, eager_old])
    row = next(line for line in table.splitlines() if line.startswith("decode_b64_8k"))
    assert row.split(" | ")[1:] == ["-         ", "0.1ms 2697G 1.00x", "0.2ms 1349G", "-"]


# --- end to end -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One CPU smoke run over two cases (sliding prefill, long decode) at both page sizes."""
    out = tmp_path_factory.mktemp("bench")
    argv = ["--smoke", "--device", "cpu", "--cases-filter", "prefill8k_local,decode_b1", "--out", str(out), "--git-sha", "abc123", "--no-progress"]
    assert bm.main(argv) == 0
    records = [json.loads(line) for line in (out / "bench_records.jsonl").read_text().splitlines()]
    return out, records


def test_smoke_run_writes_one_record_per_case_page_peer(smoke_run, capsys):
    out, records = smoke_run
    timed = [r for r in records if r["case"] != bm.HOST_CASE]
    assert len(timed) == 2 * 2 * len(bm.ALL_PEERS)
    assert {(r["case"], r["page_size"]) for r in timed} == {
        (f"{c}@smoke", p) for c in ("prefill8k_local", "decode_b1_128k") for p in (16, 128)
    }
    for r in records:
        assert r["git_sha"] == "abc123" and r["device"] == "cpu" and r["smoke"] is True
        assert r["command"].startswith("python meta/bench/benchmark.py --smoke")
        assert {"torch", "triton", "cutlass_dsl", "flash_attn_4"} <= set(r["versions"])
    by = {(r["case"].split("@")[0], r["page_size"], r["peer"]): r for r in timed}
    for (case, _page, peer), r in by.items():
        if peer.startswith("fa4"):
            assert r["status"] == "unavailable" and "CUDA" in r["reason"]
        elif peer == "sdpa_nobias" and case == "prefill8k_local":
            assert r["status"] == "skipped" and "sliding" in r["reason"]
        else:
            assert r["status"] == "ok", r
            assert r["rel_err"] < bm.DEFAULT_TOL and r["err_flag"] is False
            assert r["eager_ms"] > 0 and r["first_call_s"] >= 0
            assert r["graph_ms"] is None and r["graph_timing"] == "n/a (cpu)"  # CPU: eager only
            assert r["eager_tflops"] == pytest.approx(bm.flop_count(bm.BenchCase(**r["case_spec"])) / (r["eager_ms"] * 1e9))
    assert by[("decode_b1_128k", 16, "ours")]["backend"] == "reference"
    assert "measured once" in by[("decode_b1_128k", 128, "flex")]["note"]
    host = {r["peer"]: r for r in records if r["case"] == bm.HOST_CASE}
    assert {"noop", "ours", "sdpa_nobias"} <= set(host) and host["ours"]["host_us_per_call"] > 0
    assert "wall time / N" in host["ours"]["note"]
    log = (out / "bench.log").read_text()
    assert log.count("\n") > 20 and "ours graph" in log and "n/a (cpu)" in log


def test_plot_draws_the_latest_run(smoke_run, tmp_path):
    pytest.importorskip("matplotlib")
    out, _ = smoke_run
    png = tmp_path / "bench.png"
    assert bm.main(["--plot", str(out / "bench_records.jsonl"), "--png", str(png)]) == 0
    assert png.stat().st_size > 1000


def test_plot_says_so_without_matplotlib(smoke_run, tmp_path, monkeypatch, capsys):
    out, _ = smoke_run
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert bm.main(["--plot", str(out / "bench_records.jsonl"), "--png", str(tmp_path / "x.png")]) == 1
    assert "matplotlib is not importable" in capsys.readouterr().out


def test_latest_run_groups_by_sha_and_timestamp():
    recs = [{"git_sha": "a", "timestamp": "1", "i": 0}, {"git_sha": "b", "timestamp": "2", "i": 1}, {"git_sha": "b", "timestamp": "2", "i": 2}]
    assert [r["i"] for r in bm.latest_run(recs)] == [1, 2]


def test_dry_run_lists_peer_availability(capsys):
    assert bm.main(["--dry-run", "--device", "cpu", "--cases-filter", "decode_b64_8k_local"]) == 0
    text = capsys.readouterr().out
    assert "pairs 32,768" in text and "flash-attn-4 runs on CUDA only" in text and "skipped: SDPA has no sliding-window" in text


@pytest.mark.slow
def test_fa4_score_mod_compiles_for_sm90_without_a_gpu():
    """``benchmark.py --check-fa4-compile`` compiles flash-attn-4's calls (with vLLM's score_mod and
    without the bias) for SM90 on fake tensors. In a process of its own: the DSL reads
    ``CUTE_DSL_ARCH`` when cutlass is first imported, which another test of this run may have done.
    Needs flash_attn.cute and nvidia-cutlass-dsl importable (e.g. PYTHONPATH to a staged site)."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("cutlass") is None or importlib.util.find_spec("flash_attn") is None:
        pytest.skip("needs nvidia-cutlass-dsl and flash_attn.cute importable")
    argv = [sys.executable, str(_BENCHMARK), "--check-fa4-compile", "--cases-filter", "decode_b64_8k_local", "--page-sizes", "16"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    text = result.stdout + result.stderr
    if "fa4 compile check:" in text:  # flash_attn.cute itself did not import
        pytest.skip(text.strip().splitlines()[-1])
    assert result.returncode == 0, text[-3000:]
    assert text.count("compiled  decode_b64_8k_local page 16") == 2, text[-3000:]


def test_git_state_dirty_flag_only_for_a_checkout_of_that_sha():
    """Records name the code they measured: the SHA given on the command line wins, and the dirty
    flag is reported only when the working tree is a checkout of that SHA (on the GPU machine the
    copied tree is not, and the flag is unknown)."""
    git_state = bm.git_state
    head, _ = git_state(None)
    if head is None:
        pytest.skip("not a git checkout")
    sha, dirty = git_state(head[:7])
    assert sha == head[:7] and dirty in (True, False)
    assert git_state("0000000") == ("0000000", None)


def _fake_clocks(monkeypatch, graph=lambda fn, cfg, device: 1.0):
    monkeypatch.setattr(bm, "time_cuda_graph", graph)
    monkeypatch.setattr(bm, "time_do_bench", lambda fn, cfg: 2.0)
    monkeypatch.setattr(bm, "synchronize", lambda device: None)


def test_both_clocks_for_every_case(monkeypatch):
    """A capturable peer gets the eager (do_bench) and the graph-replay time, each with its window.
    time_clocks sees only the prepared peer, never the case, so prefill and decode alike get both
    (the clocks are faked here: no GPU to prepare a capturable peer of a real case on)."""
    def slow(ms):  # each fake measurement takes a few ms of wall time, so the windows have an order
        def measure(*args):
            time.sleep(0.005)
            return ms

        return measure

    _fake_clocks(monkeypatch, graph=slow(1.0))
    monkeypatch.setattr(bm, "time_do_bench", slow(2.0))
    clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), bm.TimingConfig(), torch.device("cuda"))
    assert (clocks["eager_ms"], clocks["graph_ms"]) == (2.0, 1.0)
    assert clocks["eager_timing"].startswith("triton do_bench") and clocks["graph_timing"].startswith("CUDA graph replay")
    # each clock's measurement window (UTC), eager's before graph's (meta/tools/smi_clocks.py joins them)
    windows = [datetime.datetime.fromisoformat(t) for clock in ("eager", "graph") for t in clocks[f"{clock}_window"]]
    assert windows == sorted(windows) and windows[0] < windows[1] < windows[3] and all(w.utcoffset() == datetime.timedelta(0) for w in windows)


def test_clock_rounds_alternate_the_order_and_take_each_clocks_median(monkeypatch):
    """``--clock-rounds 3``: eager, graph; graph, eager; eager, graph. Each clock's figure is the
    median of its three rounds, which the result lists in measurement order."""
    order = []

    def fake(clock, values):
        values = iter(values)

        def measure(*args):
            order.append(clock)
            time.sleep(0.002)
            return next(values)

        return measure

    _fake_clocks(monkeypatch, graph=fake("graph", [1.0, 5.0, 3.0]))
    monkeypatch.setattr(bm, "time_do_bench", fake("eager", [2.0, 9.0, 4.0]))
    cfg = bm.timing_config(bm.build_parser().parse_args(["--clock-rounds", "3"]))
    assert cfg.clock_rounds == 3 and bm.timing_config(bm.build_parser().parse_args([])).clock_rounds == 1
    clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), cfg, torch.device("cuda"))
    assert order == ["eager", "graph", "graph", "eager", "eager", "graph"]
    assert (clocks["eager_ms"], clocks["graph_ms"]) == (4.0, 3.0)
    assert clocks["eager_rounds"] == [2.0, 9.0, 4.0] and clocks["graph_rounds"] == [1.0, 5.0, 3.0]
    assert clocks["graph_timing"].endswith("median of 3 rounds, orders alternating")
    windows = {c: [datetime.datetime.fromisoformat(t) for t in clocks[f"{c}_window"]] for c in ("eager", "graph")}
    assert windows["eager"][0] < windows["graph"][0] and windows["graph"][1] > windows["eager"][0]
    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            bm.build_parser().parse_args(["--clock-rounds", bad])


@pytest.mark.parametrize("rounds", [0, -1, True, 1.5])
def test_clock_rounds_below_one_or_not_an_int_are_refused(rounds):
    with pytest.raises(ValueError, match=rf"clock_rounds={rounds!r}; expected an int >= 1"):
        bm.TimingConfig(clock_rounds=rounds)


def test_clock_rounds_stop_timing_a_graph_that_failed_to_capture(monkeypatch):
    calls = []

    def broken(fn, cfg, device):
        calls.append("graph")
        raise RuntimeError("operation not permitted when stream is capturing")

    _fake_clocks(monkeypatch, graph=broken)
    clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), bm.TimingConfig(clock_rounds=4), torch.device("cuda"))
    assert calls == ["graph"] and clocks["eager_ms"] == 2.0 and clocks["eager_rounds"] == [2.0] * 4
    assert clocks["graph_ms"] is None and clocks["graph_timing"].startswith("capture failed")


def test_a_peer_that_cannot_be_captured_says_so(monkeypatch):
    _fake_clocks(monkeypatch)
    prepared = bm.Prepared(fn=lambda: None, capturable=False, uncapturable_reason="reads metadata on the host")
    clocks = bm.time_clocks(prepared, bm.TimingConfig(), torch.device("cuda"))
    assert clocks["eager_ms"] == 2.0 and clocks["graph_ms"] is None
    assert clocks["graph_timing"] == "not capturable: reads metadata on the host"

    def broken(fn, cfg, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    _fake_clocks(monkeypatch, graph=broken)
    clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), bm.TimingConfig(), torch.device("cuda"))
    assert clocks["eager_ms"] == 2.0 and clocks["graph_ms"] is None
    assert clocks["graph_timing"].startswith("capture failed: RuntimeError: operation not permitted")


def test_clocks_option_narrows_the_measurement(monkeypatch):
    _fake_clocks(monkeypatch)
    cfg = bm.timing_config(bm.build_parser().parse_args(["--clocks", "graph"]))
    assert cfg.clocks == ("graph",)
    clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), cfg, torch.device("cuda"))
    assert clocks["eager_ms"] is None and clocks["graph_ms"] == 1.0
    assert clocks["eager_window"] is None and len(clocks["graph_window"]) == 2
    assert bm.timing_config(bm.build_parser().parse_args([])).clocks == ("eager", "graph")
    with pytest.raises(SystemExit):
        bm.parse_clocks("eager,wall")


def test_l2_flush_option_reaches_the_timing_config_and_the_method():
    """``--l2-flush read`` is carried into TimingConfig and named in the recorded method; an
    unknown kind is refused by the parser and by ``l2_flusher``."""
    args = bm.build_parser().parse_args(["--l2-flush", "read"])
    cfg = bm.timing_config(args)
    assert cfg.l2_flush == "read"
    assert bm.timing_config(bm.build_parser().parse_args([])).l2_flush == "zero"
    with pytest.raises(SystemExit):
        bm.build_parser().parse_args(["--l2-flush", "clean"])
    with pytest.raises(ValueError, match="l2_flush='clean'"):
        bm.l2_flusher("clean", torch.device("cpu"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zero", "read"])
def test_l2_flusher_touches_the_whole_buffer(kind):
    flush = bm.l2_flusher(kind, torch.device("cpu"))
    result = flush()
    if kind == "zero":
        assert result.numel() == 256 << 20 and not result.any()
    else:
        assert int(result) == 0


def test_graph_method_names_a_read_flush(monkeypatch):
    _fake_clocks(monkeypatch)
    for kind, expected in (("zero", "(L2 flushed)"), ("read", "(L2 flushed by read)")):
        cfg = bm.TimingConfig(l2_flush=kind)
        clocks = bm.time_clocks(bm.Prepared(fn=lambda: None), cfg, torch.device("cuda"))
        assert clocks["graph_timing"].endswith(expected)


def test_fa4_peer_uses_the_vllm_score_mod_and_imports_no_cutlass():
    """The fa4_scoremod peer's score_mod is the vLLM one; building the module needs no CuTe DSL."""
    import inspect

    source = inspect.getsource(bm.call_fa4)
    assert "vllm_inkling_score_mod(case.rel_extent)" in source
    assert not hasattr(bm, "fa4_rel_bias_score_mod")
    body = inspect.getsource(bm.vllm_inkling_score_mod)
    for step in ("d0 = distance[0]", "column = d0 if d0 >= 0 else 0", "column = column if column < rel_extent else rel_extent - 1",
                 "bias = bias_table[row[0], h_idx[0], column]", "cutlass.Float32(bias) if d0 == column else cutlass.Float32(0.0)"):  # fmt: skip
        assert step in body, step
    assert "make_rmem_tensor" not in body and "cute.where" not in body


# --- the host-overhead probe (meta/tools/host_overhead.py) ------------------------------------------


def _load_host_overhead():
    return load_tool("host_overhead")


def test_host_overhead_probe_leaves_the_dispatcher_as_it_was():
    """The kernel-less measurement patches the chosen backend's ``run`` only inside its block:
    the op writes nothing there, and afterwards the backend list and the method are unchanged."""
    from inkling_ops import dispatch
    from inkling_ops.testing import make_case

    ho = _load_host_overhead()
    names = dispatch.backend_names()
    case = make_case([1, 1], [40, 9], num_heads=8, num_kv_heads=1, head_dim=32, rel_extent=16)
    out = torch.zeros_like(case.q)
    args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q, case.rel_logits)
    options = dict(max_seqlen_q=1, softmax_scale=case.softmax_scale, window_size=[-1, -1], out=out)
    with torch.inference_mode():
        with ho.backend_without_kernels(args, options) as name:
            torch.ops.inkling.rel_attn_out.default(*args, **options)
            assert not out.any()  # run() launched nothing
            assert "run" in vars(dispatch.get_backend(name))  # the instance attribute shadows the method
        assert dispatch.backend_names() == names and "run" not in vars(dispatch.get_backend(name))
        torch.ops.inkling.rel_attn_out.default(*args, **options)
    assert out.abs().sum() > 0  # the real backend runs again


def test_host_overhead_record_has_the_old_fields_and_the_new(tmp_path, capsys):
    ho = _load_host_overhead()
    record = tmp_path / "host.jsonl"
    assert ho.main(["--device", "cpu", "--calls", "2", "--record", str(record)]) == 0
    (line,) = record.read_text().splitlines()
    fields = json.loads(line)
    for key in ("library_define_empty_us", "custom_op_empty_us", "rel_attn_out_null_backend_us", "rel_attn_out_default_backend_us",
                "vllm_entry_point_us", "sdpa_us", "rel_attn_out_one_launch_us", "api_out_split_combined_us"):  # fmt: skip
        assert fields[key] > 0, key
    assert fields["rounds"] == 7  # rows 3-6 in rotated rounds
    assert fields["command"].startswith("python meta/tools/host_overhead.py --device cpu")


def test_host_overhead_with_a_requested_backend(tmp_path):
    """``--backend NAME``: every call asks for that backend (the CuTe one on the H200); the vLLM
    entry point, which takes no backend, is left out."""
    ho = _load_host_overhead()
    record = tmp_path / "host.jsonl"
    assert ho.main(["--device", "cpu", "--calls", "2", "--backend", "reference", "--record", str(record)]) == 0
    fields = json.loads(record.read_text())
    assert fields["requested_backend"] == fields["default_backend"] == "reference"
    assert fields["vllm_entry_point_us"] is None and fields["rel_attn_out_default_backend_us"] > 0
    assert "--backend reference" in fields["command"]


def test_host_overhead_dispatcher_rows_record_and_leave_no_probe_op(tmp_path):
    """``--dispatcher-rows``: one record of the per-registration rows (each with its difference to
    the empty op registered our way) in both grad contexts; the probe namespace is gone afterwards
    and the real op still runs its backend."""
    ho = _load_host_overhead()
    record = tmp_path / "host.jsonl"
    for _ in range(2):  # the probe library is destroyed after each run, so a second run can define it again
        assert ho.main(["--device", "cpu", "--dispatcher-rows", "--calls", "2", "--rounds", "2", "--record", str(record)]) == 0
    fields = json.loads(record.read_text().splitlines()[-1])
    assert fields["probe"] == "dispatcher_rows" and fields["rounds"] == 2
    for context in ("inference_mode", "no_grad"):
        for name in ho._REGISTRATIONS:
            assert fields[f"{context}_empty_{name}_us"] > 0, (context, name)
        assert f"{context}_empty_ours_minus_ours_us" not in fields
        assert isinstance(fields[f"{context}_empty_autograd_fallthrough_minus_ours_us"], float)
        assert fields[f"{context}_rel_attn_out_null_backend_us"] > 0
    with pytest.raises(RuntimeError, match="does not exist"):
        torch._C._dispatch_has_kernel_for_dispatch_key("inkling_dispatcher_probe::ours", "CPU")
