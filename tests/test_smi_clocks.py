"""CPU checks of meta/tools/smi_clocks.py (lab tool): nvidia-smi samples joined with the
benchmark records' measurement windows, throttle reasons named, refusals that name the file."""

from __future__ import annotations

import gzip
import json

import pytest
from lab_tools import load_tool

smi_clocks = load_tool("smi_clocks")

_HEADER = ("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
           "clocks_event_reasons.active")  # fmt: skip


def _smi(path, rows):
    lines = [_HEADER] + [f"2026/12/04 13:41:{sec}, {sm}, 3201, 300.00, 39, {mask}" for sec, sm, mask in rows]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def _records(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_each_window_gets_its_samples_and_reasons(tmp_path, capsys):
    _smi(tmp_path / "smi.csv.gz", [
        ("10.000", 1980, "0x0000000000000000"), ("10.500", 1980, "0x0000000000000000"),
        ("11.000", 1650, "0x0000000000000004"), ("11.500", 1950, "0x0000000000000000"),
        ("12.000", 345, "0x0000000000000001"),
    ])  # fmt: skip
    _records(tmp_path / "r.jsonl", [
        dict(case="prefill32k_global", page_size=16, peer="fa4_nobias", git_sha="abc", eager_ms=3.5, graph_ms=3.67,
             eager_window=["2026-12-04T13:41:09.900+00:00", "2026-12-04T13:41:10.600+00:00"],
             graph_window=["2026-12-04T13:41:10.900+00:00", "2026-12-04T13:41:11.600+00:00"]),
        dict(case="tiny", page_size=16, peer="ours", git_sha="abc", eager_ms=0.01, graph_ms=None,
             eager_window=["2026-12-04T13:41:10.100+00:00", "2026-12-04T13:41:10.200+00:00"], graph_window=None),
        dict(case="old", page_size=16, peer="ours", git_sha="other", eager_ms=1.0,
             eager_window=["2026-12-04T13:41:09.000+00:00", "2026-12-04T13:41:13.000+00:00"]),
    ])  # fmt: skip
    assert smi_clocks.main([str(tmp_path / "r.jsonl"), str(tmp_path / "smi.csv.gz"), "--git-sha", "abc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3  # two clocks of the first record, the eager one of the second; "old" filtered out
    eager, graph, tiny = out
    assert "eager" in eager and "2 samples" in eager and "min 1980" in eager and "reasons: none" in eager
    assert "graph" in graph and "2 samples" in graph and "min 1650 median 1800" in graph and "SwPowerCap" in graph
    assert "no sample in" in tiny


def test_offset_reasons_and_refusals(tmp_path, capsys):
    _smi(tmp_path / "smi.csv.gz", [("10.000", 1980, "0x0000000000000000")])
    samples = smi_clocks.read_smi(tmp_path / "smi.csv.gz", offset_s=3600)
    assert samples[0][0].hour == 14
    assert smi_clocks.reason_names(0x5) == ["GpuIdle", "SwPowerCap"]
    assert smi_clocks.reason_names(0x1000) == ["0x1000"]
    (tmp_path / "empty.csv").write_text(_HEADER + "\nFailed to initialize NVML\n")
    with pytest.raises(ValueError, match="empty.csv: no nvidia-smi samples"):
        smi_clocks.read_smi(tmp_path / "empty.csv")
    _records(tmp_path / "r.jsonl", [dict(case="x", page_size=16, peer="ours", eager_ms=1.0)])
    assert smi_clocks.main([str(tmp_path / "r.jsonl"), str(tmp_path / "smi.csv.gz")]) == 1
    assert "no record with an eager_window" in capsys.readouterr().err
