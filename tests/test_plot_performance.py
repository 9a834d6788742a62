"""CPU checks of meta/bench/plot_performance.py (lab tool): the newest-record selection, and that main
writes every figure from a synthetic records file and skips the sweeps it has no records of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_tools import load_lab_module

_BENCH_DIR = Path(__file__).resolve().parents[1] / "meta" / "bench"
_SCRIPT = _BENCH_DIR / "plot_performance.py"
_PEERS = ("ours", "fa4_scoremod", "flex", "sdpa_nobias")
_OLD, _NEW = "2026-11-30T09:00:00+00:00", "2026-12-01T16:00:00+00:00"




plot_performance = load_lab_module("plot_performance", _SCRIPT)


def _record(case, spec, page, peer, ms, timestamp, sha, status="ok"):
    timed = status == "ok"
    return dict(
        timestamp=timestamp, gpu="NVIDIA H200", git_sha=sha, case=case, case_spec=dict(name=case, d=128, **spec),
        page_size=page, peer=peer, status=status, eager_ms=ms * 1.2 if timed else None, graph_ms=ms if timed else None,
        flops=4 * 128 * spec["hq"] * spec["q_len"] * spec["kv_len"] // 2, bytes=2 * 128 * spec["kv_len"] * spec["num_reqs"] * 4,
    )  # fmt: skip


def _run(timestamp, sha, scale, sweeps=True):
    """One benchmark run's records: 2 anchor cases, and (with ``sweeps``) 2 points of each sweep and layer kind."""
    glob = dict(hq=8, hkv=1, rel_extent=1024, window_left=-1)
    slide = dict(hq=8, hkv=2, rel_extent=512, window_left=511)
    cases = [
        ("prefill8k_global", dict(num_reqs=1, q_len=8192, kv_len=8192, **glob)),
        ("decode_b64_8k_local", dict(num_reqs=64, q_len=1, kv_len=8192, **slide)),
    ]
    if sweeps:
        for kind, layer in (("global", glob), ("sliding", slide)):
            cases += [(f"seqlen_{kind}_{n}k", dict(num_reqs=1, q_len=n * 1024, kv_len=n * 1024, **layer)) for n in (1, 4)]
            cases += [(f"batch_{kind}_b{b}_8k", dict(num_reqs=b, q_len=1, kv_len=8192, **layer)) for b in (1, 16)]
    records = []
    for case, spec in cases:
        for page in (16, 128):
            for k, peer in enumerate(_PEERS):
                skipped = peer == "sdpa_nobias" and spec["window_left"] >= 0
                records.append(_record(case, spec, page, peer, scale * (1 + k) * spec["kv_len"] / 8192, timestamp, sha, "skipped" if skipped else "ok"))
    records.append(dict(timestamp=timestamp, git_sha=sha, case=plot_performance.HOST_CASE, page_size=16, peer="noop", status="ok"))
    return records


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_select_latest_keeps_the_newest_record_per_case_page_peer():
    old, new = _run(_OLD, "aaaaaaa", scale=9.0), _run(_NEW, "bbbbbbb", scale=1.0)
    # The newer run comes first in the file: selection goes by timestamp, not by position.
    chosen = plot_performance.select_latest(new + old)
    assert chosen and {r["git_sha"] for r in chosen} == {"bbbbbbb"}
    assert len(chosen) == len(new) - 1  # one per (case, page, peer); the host-overhead record left out
    assert all(r["case"] != plot_performance.HOST_CASE for r in chosen)
    # A case only the old run has is kept from the old run.
    extra = _record("decode_b1_128k", dict(num_reqs=1, q_len=1, kv_len=131072, hq=8, hkv=1, rel_extent=1024, window_left=-1), 16, "ours", 0.1, _OLD, "aaaaaaa")
    chosen = plot_performance.select_latest([*old, extra, *new])
    assert [r["git_sha"] for r in chosen if r["case"] == "decode_b1_128k"] == ["aaaaaaa"]
    # --git-sha picks that commit's records, by prefix, whatever is newer.
    assert {r["git_sha"] for r in plot_performance.select_latest(new + old, git_sha="aaaa")} == {"aaaaaaa"}
    # several commits: the newest of theirs per (case, page, peer), a third commit's left out
    third = _run(_NEW, "ccccccc", scale=5.0)
    picked = plot_performance.select_latest([*old, extra, *third], git_sha="aaaa,ccc")
    assert {(r["case"], r["git_sha"]) for r in picked if r["case"] == "decode_b1_128k"} == {("decode_b1_128k", "aaaaaaa")}
    assert {r["git_sha"] for r in picked if r["case"] != "decode_b1_128k"} == {"ccccccc"}
    assert not plot_performance.select_latest([*old, *third], git_sha="bbbb,dddd")


def test_select_latest_breaks_timestamp_ties_by_file_order():
    first = _record("prefill8k_global", dict(num_reqs=1, q_len=8192, kv_len=8192, hq=8, hkv=1, rel_extent=1024, window_left=-1), 16, "ours", 1.0, _NEW, "ccccccc")
    second = dict(first, graph_ms=2.0)
    assert plot_performance.select_latest([first, second]) == [second]


def test_main_writes_every_figure_from_the_newest_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    records = _write(tmp_path / "records.jsonl", _run(_NEW, "bbbbbbb", scale=1.0) + _run(_OLD, "aaaaaaa", scale=9.0))
    out = tmp_path / "img"
    assert plot_performance.main(["--records", str(records), "--out-dir", str(out)]) == 0
    names = ["perf_anchor_ratios.png"] + [s.png_name(k) for s in plot_performance.SWEEPS for k in plot_performance.LAYER_KINDS]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    for name in names:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert (out / name).stat().st_size > 10_000, name
    text = capsys.readouterr().out
    assert "git bbbbbbb" in text and "aaaaaaa" not in text
    # Same records, same bytes.
    first = {n: (out / n).read_bytes() for n in names}
    assert plot_performance.main(["--records", str(records), "--out-dir", str(out)]) == 0
    assert {n: (out / n).read_bytes() for n in names} == first


def test_main_reads_an_archive_then_the_live_file(tmp_path, capsys):
    """--records takes several files, gzip-compressed ones by their .gz name, read in order: the
    figures are those of the same records in one plain file (the newest per case still wins)."""
    pytest.importorskip("matplotlib")
    import gzip

    old, new = _run(_OLD, "aaaaaaa", scale=9.0), _run(_NEW, "bbbbbbb", scale=1.0)
    archive = tmp_path / "archive.jsonl.gz"
    with gzip.open(archive, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in old))
    live = _write(tmp_path / "live.jsonl", new)
    both = _write(tmp_path / "both.jsonl", old + new)
    assert plot_performance.read_records(archive) == old
    assert plot_performance.main(["--records", str(archive), str(live), "--out-dir", str(tmp_path / "split")]) == 0
    assert plot_performance.main(["--records", str(both), "--out-dir", str(tmp_path / "one")]) == 0
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names and names == sorted(p.name for p in (tmp_path / "split").iterdir())
    for name in names:
        assert (tmp_path / "split" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert "aaaaaaa" not in capsys.readouterr().out


def test_main_skips_sweeps_without_records(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    records = _write(tmp_path / "records.jsonl", _run(_NEW, "bbbbbbb", scale=1.0, sweeps=False))
    out = tmp_path / "img"
    assert plot_performance.main(["--records", str(records), "--out-dir", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["perf_anchor_ratios.png"]
    text = capsys.readouterr().out
    for sweep in plot_performance.SWEEPS:
        for kind in plot_performance.LAYER_KINDS:
            assert f"skipped {sweep.png_name(kind)}" in text


def test_main_says_so_when_no_record_matches(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    records = _write(tmp_path / "records.jsonl", _run(_NEW, "bbbbbbb", scale=1.0))
    assert plot_performance.main(["--records", str(records), "--out-dir", str(tmp_path / "img"), "--git-sha", "ddddddd"]) == 1
    assert "no records of git ddddddd" in capsys.readouterr().out
    assert not (tmp_path / "img").exists()


def test_sweep_cases_file_holds_every_sweep_the_script_draws():
    """meta/bench/sweep_cases.json parses with benchmark.py's load_cases, and its names are the script's sweeps."""
    benchmark = load_lab_module("inkling_lab_benchmark", _BENCH_DIR / "benchmark.py")
    cases, _ = benchmark.load_cases(_BENCH_DIR / "sweep_cases.json")
    by_sweep = {}
    for case in cases:
        sweep = plot_performance.sweep_of({"case": case.name})
        assert sweep is not None, case.name
        assert (sweep[1] == "sliding") == case.is_local, case.name
        by_sweep.setdefault(sweep, []).append(case)
    assert sorted(by_sweep) == sorted((s.prefix, k) for s in plot_performance.SWEEPS for k in plot_performance.LAYER_KINDS)
    for (prefix, kind), members in by_sweep.items():
        assert all(c.is_decode == (prefix == "batch") for c in members), (prefix, kind)
        x_key = next(s.x_key for s in plot_performance.SWEEPS if s.prefix == prefix)
        xs = [getattr(c, x_key) for c in members]
        assert len(set(xs)) == len(xs) >= 3, (prefix, kind, xs)
    anchors, _ = benchmark.load_cases(None)
    assert all(plot_performance.sweep_of({"case": c.name}) is None for c in anchors)


def test_anchor_baseline_is_ours_or_a_backend_of_ours():
    """A run with ``--backends triton,cute`` records ``ours[triton]`` and ``ours[cute]`` and no
    ``ours``: the ratios divide by ``ours[cute]`` (the figure drew no bar before this)."""
    spec = dict(num_reqs=1, q_len=8192, kv_len=8192, hq=8, hkv=1, rel_extent=1024, window_left=-1)
    rows = [_record("prefill8k_global", spec, 16, peer, 1.0, _NEW, "abc") for peer in ("ours[triton]", "ours[cute]", "fa4_nobias")]
    assert plot_performance.baseline_of(rows) == "ours[cute]"
    assert plot_performance.baseline_of(rows + [_record("prefill8k_global", spec, 16, "ours", 1.0, _NEW, "abc")]) == "ours"
    assert plot_performance.baseline_of(rows[:1]) == "ours[triton]"
    # the fallbacks' order, not the names' sort: triton ahead of an unlisted backend of ours
    reference = _record("prefill8k_global", spec, 16, "ours[reference]", 1.0, _NEW, "abc")
    assert plot_performance.baseline_of([reference] + rows[:1]) == "ours[triton]"
    assert plot_performance.baseline_of([reference]) == "ours[reference]"
    with pytest.raises(ValueError, match="no peer of ours"):
        plot_performance.baseline_of(rows[2:])


def test_main_draws_bars_for_a_run_of_two_backends(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    spec = dict(num_reqs=1, q_len=8192, kv_len=8192, hq=8, hkv=1, rel_extent=1024, window_left=-1)
    rows = [_record("prefill8k_global", spec, 16, peer, ms, _NEW, "abc") for peer, ms in
            (("ours[triton]", 1.2), ("ours[cute]", 1.0), ("fa4_nobias", 0.7))]  # fmt: skip
    drawn = []
    real = plot_performance.plot_anchor_ratios

    def spy(plt, records, path):
        fig_bars = []
        orig_bar = plt.Axes.bar
        monkeypatch.setattr(plt.Axes, "bar", lambda self, *a, **k: fig_bars.append(a[1]) or orig_bar(self, *a, **k))
        real(plt, records, path)
        drawn.extend(fig_bars)

    monkeypatch.setattr(plot_performance, "plot_anchor_ratios", spy)
    path = _write(tmp_path / "records.jsonl", rows)
    assert plot_performance.main(["--records", str(path), "--out-dir", str(tmp_path), "--anchor-png", "a.png"]) == 0
    assert (tmp_path / "a.png").exists()
    ratios = sorted(round(y, 3) for ys in drawn for y in ys)
    assert ratios == [0.7, 0.7, 1.2, 1.2], ratios  # triton and fa4 over cute, on both clocks


def test_provenance_keeps_a_runs_label():
    """A figure's title names the commit in short form and keeps a run's label after "+" (a peer
    run of a schedule option under trial is recorded as "SHA+adopted")."""
    records = [dict(gpu="NVIDIA H200", git_sha="30b99b8ffff+adopted", timestamp="2026-12-04T05:45:13"),
               dict(gpu="NVIDIA H200", git_sha="c56296a0123456", timestamp="2026-12-04T01:00:00")]  # fmt: skip
    assert plot_performance.provenance(records) == "NVIDIA H200, git 30b99b8+adopted, c56296a, 2026-12-04"
