"""Smoke tests of the lab tools under meta/tools/ (the tuner's record keeping); the peer
benchmark's own are in test_benchmark_smoke.py, the kernel report's in test_kernel_report.py."""

from __future__ import annotations

import json

from lab_tools import load_tool

tuning = load_tool("tuning")


def test_tuning_records_name_the_command_that_made_them():
    assert tuning.command_line(["/repo/meta/tools/tuning.py", "--quick", "--out", "X"]) == (
        "python3 meta/tools/tuning.py --quick --out X"
    )
    assert tuning.command_line(["other.py", "a"]) == "python3 other.py a"


def test_write_records_appends_or_replaces_json_lines(tmp_path):
    path = tmp_path / "sub" / "records.jsonl"
    tuning.write_records(path, [{"a": 1}])
    tuning.write_records(path, [{"b": 2}])
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"a": 1}, {"b": 2}]
    tuning.write_records(path, [{"c": 3}], append=False)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"c": 3}]


def test_candidates_are_distinct_and_cover_both_kinds():
    candidates = tuning.candidates()
    assert len(candidates) == len(set(candidates))
    assert {kind for kind, _ in candidates} == {"prefill", "decode"}


def test_graph_gap_probe_refuses_negative_rounds_and_reps(capsys):
    """``graph_gap_probe.py`` exits with a usage error naming the flag for ``--rounds`` below 0 and
    ``--reps`` below 1, before it touches a GPU."""
    import pytest

    probe = load_tool("graph_gap_probe")
    for argv, message in ((["--rounds", "-2"], "--rounds is -2"), (["--reps", "0"], "argument --reps")):
        with pytest.raises(SystemExit) as exit_info:
            probe.main(argv)
        assert exit_info.value.code == 2, argv
        assert message in capsys.readouterr().err, argv
