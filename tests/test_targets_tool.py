"""CPU checks of meta/tools/targets.py (lab tool): issue 17's targets read from benchmark records,
one run at a time, with the margin of each miss and the Triton check."""

from __future__ import annotations

import json

import pytest
from lab_tools import load_tool

targets = load_tool("targets")
plot_performance = targets.plot_module()  # the records reader targets.py calls


def _record(case, page, peer, eager, graph, *, sha="abc", command="bench A", backend=None, status="ok"):
    return dict(case=case, page_size=page, peer=peer, eager_ms=eager, graph_ms=graph, git_sha=sha, gpu="NVIDIA H200",
                command=command, backend=backend, status=status, timestamp="2026-12-05T12:00:00+00:00")  # fmt: skip


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_each_target_case_gets_its_bar_and_others_none():
    assert targets.target_of("prefill8k_global") == 0.90
    assert targets.target_of("prefill32k_global") == 0.93
    assert targets.target_of("chunk2k_on16k_x4") == 0.93
    assert targets.target_of("prefill8k_local") == 1.0
    assert targets.target_of("serving_chunk2k_decodes63_sliding") == 0.90
    assert targets.target_of("decode_b64_8k") is None


def test_ratios_margins_and_the_triton_row():
    run = [
        _record("prefill8k_global", 128, "ours", 0.25, 0.20, backend="cute"),
        _record("prefill8k_global", 128, "fa4_nobias", 0.2, 0.19),
        _record("prefill8k_global", 128, "ours[triton]", 0.40, 0.15, backend="triton"),
        _record("decode_b64_8k", 16, "ours", 0.08, 0.08, backend="triton"),
        _record("decode_b64_8k", 16, "fa4_nobias", 0.1, 0.1),
    ]  # fmt: skip
    rows = targets.evaluate(run)
    assert [(r.case, r.against) for r in rows] == [("prefill8k_global", "fa4_nobias"), ("prefill8k_global", "ours[triton]")]
    fa4, triton = rows
    assert fa4.ratios == pytest.approx({"eager": 0.8, "graph": 0.95})
    assert fa4.verdict("eager") == "missed by 10.0 points"
    assert fa4.verdict("graph") == "met (+5.0)"
    assert fa4.met is False
    assert triton.ratios == pytest.approx({"eager": 1.6, "graph": 0.75})
    assert triton.verdict("graph") == "missed by 25.0 points"


def test_no_triton_row_when_triton_is_the_default_and_a_failed_peer_gives_no_ratio():
    run = [
        _record("serving_x", 16, "ours", 0.1, 0.1, backend="triton"),
        _record("serving_x", 16, "ours[triton]", 0.1, 0.1, backend="triton"),
        _record("serving_x", 16, "fa4_nobias", None, None, status="skipped"),
    ]  # fmt: skip
    (row,) = targets.evaluate(run)
    assert row.against == "fa4_nobias" and row.ratios == {} and row.met is None
    assert row.verdict("eager") == "-"


def test_a_run_that_named_its_backends_is_read_through_ours_cute():
    run = [
        _record("chunk2k_on16k_x4", 128, "ours[cute]", 0.8, 0.8, backend="cute"),
        _record("chunk2k_on16k_x4", 128, "ours[triton]", 1.2, 1.2, backend="triton"),
        _record("chunk2k_on16k_x4", 128, "fa4_nobias", 0.76, 0.74),
    ]  # fmt: skip
    fa4, triton = targets.evaluate(run)
    assert fa4.ratios == pytest.approx({"eager": 0.95, "graph": 0.925}) and fa4.verdict("graph") == "missed by 0.5 points"
    assert triton.against == "ours[triton]" and triton.met


def test_a_ratio_that_rounds_to_the_bar_is_met_and_never_prints_a_negative_zero():
    row = targets.Row("prefill8k_global", 16, "fa4_nobias", 0.90, {"eager": 1.0}, {"eager": 0.8996}, "cute")
    assert row.verdict("eager") == "met (+0.0)" and row.met


def test_runs_split_on_command_and_the_latest_is_printed(tmp_path, capsys):
    path = _write(tmp_path / "r.jsonl", [
        _record("prefill8k_global", 16, "ours", 0.25, 0.25, command="first", backend="cute"),
        _record("prefill8k_global", 16, "fa4_nobias", 0.2, 0.2, command="first"),
        _record("prefill8k_local", 128, "ours", 0.07, 0.07, command="second", sha="def", backend="cute"),
        _record("prefill8k_local", 128, "fa4_nobias", 0.14, 0.056, command="second", sha="def"),
    ])  # fmt: skip
    assert len(targets.split_runs(plot_performance.read_records(path))) == 2
    assert targets.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "git def" in out and "prefill8k_local" in out and "prefill8k_global" not in out
    assert "missed by 20.0 points" in out and "its launch" in out
    assert targets.main([str(path), "--git-sha", "abc"]) == 0
    out = capsys.readouterr().out
    assert "prefill8k_global" in out and "missed by 10.0 points" in out and "prefill8k_local" not in out
    assert targets.main([str(path), "--all-runs"]) == 0
    assert capsys.readouterr().out.count("| case |") == 2


def test_no_matching_run_and_bad_files_say_so(tmp_path, capsys):
    path = _write(tmp_path / "r.jsonl", [_record("prefill8k_global", 16, "ours", 0.25, 0.25)])
    assert targets.main([str(path)]) == 2
    assert "no run" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case": 1}\nnot json\n')
    with pytest.raises(SystemExit, match=r"line 2 is not JSON"):
        targets.main([str(bad)])
    with pytest.raises(SystemExit, match=r"No such file"):
        targets.main([str(tmp_path / "missing.jsonl")])
