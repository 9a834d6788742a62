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


def _brute_walk(window, rel_extent, tokens, group):
    """Tile counts of a causal sliding prefill by testing every (row, key) pair: a CTA walks the
    tiles holding a key some row sees; a tile is masked unless every row sees every key; it is a
    band tile when some row sees some key at a distance below ``rel_extent``."""
    rows_per_tok, tile = 128 // group, 128
    blocks = tokens // rows_per_tok
    tiles = band = masked = 0
    for m in range(blocks):
        qs = range(m * rows_per_tok, (m + 1) * rows_per_tok)
        for n in range(tokens // tile):
            keys = range(n * tile, (n + 1) * tile)
            seen = [(q, k) for q in qs for k in keys if 0 <= q - k <= window]
            if not seen:
                continue
            tiles += 1
            masked += len(seen) < len(qs) * len(keys)
            band += any(q - k < rel_extent for q, k in seen)
    return tiles / blocks, band / blocks, masked / blocks


def test_window_fit_walk_matches_a_pair_by_pair_count():
    """``window_fit.walk`` (the kernel's tile ranges) against a brute-force count on a 2K layer,
    and the 8K sliding layer's 4.84 tiles a CTA, 1.94 of them masked (meta/TUNING.md)."""
    import pytest

    window_fit = load_tool("window_fit")
    for window, extent in ((255, 256), (511, 512), (1023, 512), (300, 128)):
        got = window_fit.walk(window, extent, tokens=2048)
        assert (got.tiles, got.band, got.masked) == pytest.approx(_brute_walk(window, extent, 2048, 4)), (window, extent)
    layer = window_fit.walk(511, 512)
    assert (layer.ctas, round(layer.tiles, 2), round(layer.masked, 2)) == (512, 4.84, 1.94)


def test_window_fit_recovers_a_linear_cost(tmp_path, capsys):
    """Times made from a per-CTA and a per-tile cost come back out of the fit."""
    window_fit = load_tool("window_fit")
    rows = []
    for name in ("prefill8k_sliding_page128", "sliding_w255e256_page128", "sliding_w1023e1024_page128"):
        tiles = window_fit.case_walk(name).tiles
        rows.append({"case": name, "cute_ms": 512 / 132 * (3.0 + 1.5 * tiles) / 1000})
    path = tmp_path / "cute_ws_bench.json"
    path.write_text(json.dumps(rows))
    assert window_fit.main([str(path)]) == 0
    assert "cute_ms: per CTA 3.00 us, per tile 1.500 us" in capsys.readouterr().out
