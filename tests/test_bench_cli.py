"""CPU checks of the user-facing benchmark (inkling_ops/bench.py): the smoke run prints both clocks
for every case, the accounting matches a brute-force count, and bad flags name themselves."""

from __future__ import annotations

import sys

import pytest

from inkling_ops import bench


def test_smoke_run_prints_a_row_per_case_with_both_clocks(capsys):
    assert bench.main(["--device", "cpu", "--smoke", "--no-progress"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("case"))
    assert header.split() == ["case", "shape", "eager", "ms", "graph", "ms", "eager", "graph"]
    for name in bench.CASES:
        (row,) = [line for line in lines if line.startswith(name + " ")]
        assert "n/a (cpu)" in row  # no graph clock on CPU
        eager_ms = float(row.split()[row.split().index("n/a") - 1])
        assert eager_ms > 0
        assert ("GB/s" if "decode" in name else "TFLOP/s") in row
    assert "tiny shapes (smoke)" in lines[0] and "window 31" in text


def test_flags_narrow_the_cases_and_set_heads_and_pages(capsys):
    assert bench.main(["--device", "cpu", "--cases", "decode64x8k_sliding", "--heads", "4/4", "--page-size", "128", "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "page size 128" in lines[0]
    rows = [line for line in lines if line.startswith("decode")]
    assert len(rows) == 1 and "h4/4" in rows[0]


def test_progress_falls_back_to_plain_lines_without_tqdm(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    assert bench.main(["--device", "cpu", "--cases", "decode64x8k_global"]) == 0
    assert "[1/1] decode64x8k_global" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--cases", "prefill9k"], "unknown case(s) ['prefill9k']"),
        (["--heads", "8/3"], "--heads is '8/3'"),
        (["--heads", "eight"], "--heads is 'eight'"),
        (["--page-size", "0"], "--page-size is 0"),
        (["--device", "tpu"], "--device is 'tpu'"),
    ],
)
def test_bad_flags_name_themselves(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", *argv] if "--device" not in argv else argv)
    assert message in capsys.readouterr().err


def _brute_pairs(case: bench.BenchCase) -> int:
    total = 0
    for a in range(case.kv_len - case.q_len, case.kv_len):
        total += sum(1 for j in range(case.kv_len) if j <= a and (case.window_left < 0 or a - j <= case.window_left))
    return case.num_reqs * total


@pytest.mark.parametrize("name", list(bench.CASES))
def test_accounting_of_the_cases(name):
    case = bench.CASES[name]
    assert bench.visible_pairs(bench.smoke_case(case)) == _brute_pairs(bench.smoke_case(case))
    expected = {
        "prefill8k_global": 8192 * 8193 // 2,
        "prefill8k_sliding": 512 * 513 // 2 + (8192 - 512) * 512,
        "decode64x8k_global": 64 * 8192,
        "decode64x8k_sliding": 64 * 512,
    }[name]
    assert bench.visible_pairs(case) == expected
    if name == "decode64x8k_global":  # K+V 2*64*8192*128, q and out 2*64*8*128, rel 64*8*1024; bf16
        assert bench.byte_count(case, 2) == 269_746_176
