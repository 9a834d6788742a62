"""Figures of docs/performance.md from the peer benchmark's records (lab tool, not the product).

Run from the repository root (no GPU, no network; needs matplotlib, the ``[bench]`` extra)::

    python meta/bench/plot_performance.py [--records FILE ...] [--out-dir docs/img] [--git-sha SHA]

It reads ``--records`` (default: meta/bench/bench_records_archive.jsonl.gz, the records up to
2026-12-05 00:00 UTC, then meta/bench/bench_records.jsonl) and takes, for every (case, page size, peer), the
record with the newest ``timestamp`` (only records of ``--git-sha`` when given) and writes these
PNGs to ``--out-dir``:

- ``perf_anchor_ratios.png``: the anchor cases (every case that is not a sweep case), peer time
  over ours per (case, page size), one panel per clock (eager: do_bench, launches included;
  graph: CUDA-graph replay);
- ``perf_seqlen_global.png``, ``perf_seqlen_sliding.png``: prefill TFLOP/s over sequence length
  (cases ``seqlen_<kind>_*`` of meta/bench/sweep_cases.json; x = ``case_spec["kv_len"]``);
- ``perf_batch_global.png``, ``perf_batch_sliding.png``: decode GB/s over batch size (cases
  ``batch_<kind>_*``; x = ``case_spec["num_reqs"]``).

Each sweep figure has one panel per (clock, page size): rows eager and graph, columns page 16 and
128, a line per peer. A sweep without records is reported and skipped. TFLOP/s and GB/s use the
records' ``flops`` and ``bytes``, the same count for every peer of a case (see benchmark.py), so a
peer without the bias is credited with the bias's work too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECORDS = REPO_ROOT / "meta" / "bench" / "bench_records.jsonl"
#: the records up to 2026-12-04, gzip-compressed (the working tree travels to the GPU machine
#: under a size limit); read before DEFAULT_RECORDS by default
ARCHIVED_RECORDS = REPO_ROOT / "meta" / "bench" / "bench_records_archive.jsonl.gz"
DEFAULT_OUT_DIR = REPO_ROOT / "docs" / "img"

CLOCKS = ("eager", "graph")
CLOCK_TITLES = {"eager": "eager (do_bench, launches included)", "graph": "graph (CUDA-graph replay)"}
PAGE_SIZES = (16, 128)
#: Plotting order and colours of the peers; peers not listed follow in order of appearance.
PEER_ORDER = ("ours", "fa4_scoremod", "fa4_nobias", "flex", "sdpa_nobias")
PEER_COLORS = {"ours": "tab:red", "ours[cute]": "tab:red", "ours[triton]": "tab:orange", "fa4_scoremod": "tab:blue",
               "fa4_nobias": "tab:cyan", "flex": "tab:green", "sdpa_nobias": "tab:gray"}  # fmt: skip
#: the peer the anchor ratios divide by: "ours" (the dispatcher's choice), else the first of these
#: that the records hold (a run with ``--backends triton,cute`` records ``ours[triton]`` and ``ours[cute]``)
BASELINE = "ours"
BASELINE_FALLBACKS = ("ours[cute]", "ours[triton]")


def baseline_of(records: Sequence[dict]) -> str:
    """The peer the anchor ratios divide by (:data:`BASELINE`, else the first fallback present,
    else the first ``ours[...]`` peer); ValueError when the records hold none of ours."""
    peers = {r["peer"] for r in records}
    for name in (BASELINE, *BASELINE_FALLBACKS):
        if name in peers:
            return name
    ours = sorted(p for p in peers if p.startswith("ours["))
    if not ours:
        raise ValueError(f"records hold no peer of ours (peers: {sorted(peers)}); expected 'ours' or 'ours[<backend>]'")
    return ours[0]
#: benchmark.py's pseudo-case of the host-overhead measurement (no times to plot).
HOST_CASE = "host_overhead_tiny_decode"
LAYER_KINDS = ("global", "sliding")


class Sweep:
    """One sweep of sweep_cases.json: cases named ``<prefix>_<kind>_...``, x read from ``case_spec``."""

    def __init__(self, prefix: str, x_key: str, x_label: str, metric: str, title: str):
        self.prefix, self.x_key, self.x_label, self.metric, self.title = prefix, x_key, x_label, metric, title

    def png_name(self, kind: str) -> str:
        return f"perf_{self.prefix}_{kind}.png"


SWEEPS = (
    Sweep("seqlen", "kv_len", "sequence length (q_len = kv_len, one request)", "tflops", "prefill over sequence length"),
    Sweep("batch", "num_reqs", "batch size (requests of q_len 1, {kv} of KV each)", "gbps", "decode over batch size"),
)
ANCHOR_PNG = "perf_anchor_ratios.png"


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


def read_records(path: str | Path) -> list[dict]:
    """The JSON lines of ``path``, gzip-compressed when its name ends in ``.gz`` (blank lines
    skipped); SystemExit naming the file and line if one is bad."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt") as f:
                lines = f.read().splitlines()
        else:
            lines = path.read_text().splitlines()
    except OSError as exc:
        raise SystemExit(f"--records {path}: cannot read it: {exc}") from exc
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--records {path}: line {number} is not JSON: {exc}") from exc
    return records


def sha_matches(record_sha: str | None, wanted: str) -> bool:
    """True when one SHA is a prefix of the other (records hold short or full SHAs)."""
    if not record_sha:
        return False
    a, b = record_sha.lower(), wanted.lower()
    return a.startswith(b) or b.startswith(a)


def select_latest(records: Sequence[dict], git_sha: str | None = None) -> list[dict]:
    """The newest record per (case, page_size, peer), by ``timestamp`` (the run's start); later in the file wins a tie.

    With ``git_sha``, only records of that commit count (comma-separated: of any of those commits;
    the newest still wins per case, page and peer). The host-overhead pseudo-case is left out.
    Whatever the newest record's status, it is the one kept (a peer that failed last shows as missing).
    """
    chosen: dict[tuple, tuple[str, int, dict]] = {}
    for index, record in enumerate(records):
        if record.get("case") == HOST_CASE:
            continue
        if git_sha is not None and not any(sha_matches(record.get("git_sha"), sha) for sha in git_sha.split(",")):
            continue
        key = (record.get("case"), record.get("page_size"), record.get("peer"))
        rank = (str(record.get("timestamp") or ""), index)
        if key not in chosen or rank >= chosen[key][:2]:
            chosen[key] = (*rank, record)
    return [entry[2] for entry in sorted(chosen.values(), key=lambda e: e[1])]


def clock_ms(record: dict, clock: str) -> float | None:
    """A record's median time on ``clock``, as benchmark.py's ``clock_ms`` reads it (old single-clock records too)."""
    if record.get("status") != "ok":
        return None
    if "eager_ms" in record or "graph_ms" in record:
        return record.get(f"{clock}_ms")
    old_clock = "graph" if str(record.get("timing") or "").startswith("CUDA graph") else "eager"
    return record.get("median_ms") if clock == old_clock else None


def metric_value(record: dict, clock: str, metric: str) -> float | None:
    """TFLOP/s (``metric="tflops"``) or GB/s (``"gbps"``) of a record on ``clock``, from its flops/bytes."""
    ms = clock_ms(record, clock)
    if not ms:
        return None
    if metric == "tflops":
        return record["flops"] / (ms * 1e9)
    if metric == "gbps":
        return record["bytes"] / (ms * 1e6)
    raise ValueError(f"metric is {metric!r}; expected 'tflops' or 'gbps'")


def sweep_of(record: dict) -> tuple[str, str] | None:
    """(sweep prefix, layer kind) of a sweep case's record, e.g. ("seqlen", "global"); None for other cases."""
    words = str(record.get("case") or "").split("_")
    prefixes = {s.prefix for s in SWEEPS}
    if len(words) >= 3 and words[0] in prefixes and words[1] in LAYER_KINDS:
        return words[0], words[1]
    return None


def ordered_peers(records: Sequence[dict]) -> list[str]:
    seen = list(dict.fromkeys(r["peer"] for r in records))
    order = PEER_ORDER[:1] + BASELINE_FALLBACKS + PEER_ORDER[1:]
    return [p for p in order if p in seen] + [p for p in seen if p not in order]


def _short_sha(sha: str) -> str:
    head, plus, label = sha.partition("+")
    return head[:7] + plus + label


def provenance(records: Sequence[dict]) -> str:
    """'NVIDIA H200, git 0530e62, 2026-12-01' from the records a figure draws (every distinct value, sorted)."""

    def joined(values) -> str:
        values = sorted({str(v) for v in values if v})
        return ", ".join(values) if values else "?"

    gpus = joined(r.get("gpu") for r in records)
    # a commit's short form, with a run's label after "+" kept ("30b99b8+adopted")
    shas = joined(_short_sha(str(r.get("git_sha"))) for r in records if r.get("git_sha"))
    dates = joined(str(r.get("timestamp"))[:10] for r in records if r.get("timestamp"))
    return f"{gpus}, git {shas}, {dates}"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def import_pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: same records, same bytes
    fig.clear()


def plot_sweep(plt, records: Sequence[dict], sweep: Sweep, kind: str, path: Path) -> None:
    """One sweep and layer kind: rows = clocks, columns = page sizes, a line per peer."""
    peers = ordered_peers(records)
    xs_all = sorted({r["case_spec"][sweep.x_key] for r in records})
    unit = "TFLOP/s" if sweep.metric == "tflops" else "GB/s"
    fig, axes = plt.subplots(len(CLOCKS), len(PAGE_SIZES), figsize=(12, 8.5), sharex=True, squeeze=False)
    for row, clock in enumerate(CLOCKS):
        for col, page in enumerate(PAGE_SIZES):
            ax = axes[row, col]
            for peer in peers:
                points = sorted(
                    (r["case_spec"][sweep.x_key], metric_value(r, clock, sweep.metric))
                    for r in records
                    if r["peer"] == peer and r["page_size"] == page
                )
                points = [(x, y) for x, y in points if y is not None]
                if not points:
                    continue
                ax.plot(
                    [x for x, _ in points], [y for _, y in points], marker="o",
                    color=PEER_COLORS.get(peer), linewidth=2.5 if peer == BASELINE else 1.5, label=peer,
                )  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs_all)
            ax.set_xticklabels([_short(x) for x in xs_all])
            ax.minorticks_off()
            if sweep.metric == "gbps":
                ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{CLOCK_TITLES[clock]}, page {page}", fontsize=10)
            ax.set_ylabel(f"{unit} ({clock})")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "no records", transform=ax.transAxes, ha="center")
    spec = records[0]["case_spec"]
    layer = f"{kind}: heads {spec['hq']}/{spec['hkv']}, E {spec['rel_extent']}" + (f", window {spec['window_left']}" if spec["window_left"] >= 0 else "")
    x_label = sweep.x_label.format(kv=_joined_short(r["case_spec"]["kv_len"] for r in records))
    for ax in axes[-1]:
        ax.set_xlabel(x_label)
    fig.suptitle(f"rel_attn {sweep.title} ({layer}) vs peers\n{provenance(records)}; same {unit} accounting for every peer", fontsize=11)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def plot_anchor_ratios(plt, records: Sequence[dict], path: Path) -> None:
    """Peer time / ours per anchor (case, page size) on each clock; >1 means ours is faster."""
    baseline = baseline_of(records)
    peers = [p for p in ordered_peers(records) if p != baseline]
    groups = list(dict.fromkeys((r["case"], r["page_size"]) for r in records))
    by_key = {(r["case"], r["page_size"], r["peer"]): r for r in records}
    width = 0.8 / max(1, len(peers))
    fig, axes = plt.subplots(len(CLOCKS), 1, figsize=(14, 9), squeeze=False)
    for row, clock in enumerate(CLOCKS):
        ax = axes[row, 0]
        for k, peer in enumerate(peers):
            xs, ys = [], []
            for g, (case, page) in enumerate(groups):
                base = by_key.get((case, page, baseline))
                other = by_key.get((case, page, peer))
                base_ms = clock_ms(base, clock) if base else None
                peer_ms = clock_ms(other, clock) if other else None
                if base_ms and peer_ms:
                    xs.append(g - 0.4 + width * (k + 0.5))
                    ys.append(peer_ms / base_ms)
            if xs:
                bars = ax.bar(xs, ys, width=width, color=PEER_COLORS.get(peer), label=peer)
                ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=6, rotation=90, padding=2)
        ax.axhline(1.0, color=PEER_COLORS.get(baseline, "tab:red"), linewidth=1.5, label=f"{baseline} (= 1)")
        ax.set_yscale("log")
        ax.set_ylabel(f"{clock}: peer ms / {baseline} ms (log)")
        ax.set_title(f"{CLOCK_TITLES[clock]}; above 1: {baseline} faster", fontsize=10)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{c}\npage {p}" for c, p in groups], rotation=45, ha="right", fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8, ncol=len(peers) + 1, loc="upper left")
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 1.6)  # room for the bar labels
    fig.suptitle(f"rel_attn vs peers on the anchor cases: time ratio per clock\n{provenance(records)}", fontsize=11)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def _joined_short(values) -> str:
    return "/".join(_short(v) for v in sorted(set(values)))


def _short(x: int) -> str:
    return f"{x // 1024}K" if x >= 1024 and x % 1024 == 0 else str(x)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python meta/bench/plot_performance.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", nargs="+", default=[str(ARCHIVED_RECORDS), str(DEFAULT_RECORDS)],
                   help="benchmark records, JSON lines, .gz for gzip-compressed ones, read in order (default "
                        "meta/bench/bench_records_archive.jsonl.gz, then meta/bench/bench_records.jsonl)")  # fmt: skip
    p.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR), help="where the PNGs go (default docs/img)")
    p.add_argument("--anchor-png", default=ANCHOR_PNG, help=f"file name of the anchor-ratio figure (default {ANCHOR_PNG})")
    p.add_argument("--git-sha", default=None, help="only records of this commit (prefix match; comma-separated: of any of these commits); default: the newest record per case, page and peer")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plt = import_pyplot()
    except ImportError as exc:
        print(f"matplotlib is not importable ({exc}); install the [bench] extra (pip install matplotlib) and rerun.")
        return 1
    records = select_latest([r for path in args.records for r in read_records(path)], args.git_sha)
    out_dir = Path(args.out_dir)
    which = f" of git {args.git_sha}" if args.git_sha else ""
    if not records:
        print(f"{' '.join(args.records)}: no records{which}; nothing written")
        return 1
    written = 0
    anchors = [r for r in records if sweep_of(r) is None and "case_spec" in r]
    if any(clock_ms(r, c) for r in anchors for c in CLOCKS):
        plot_anchor_ratios(plt, anchors, out_dir / args.anchor_png)
        print(f"wrote {out_dir / args.anchor_png} ({len({r['case'] for r in anchors})} anchor cases; {provenance(anchors)})")
        written += 1
    else:
        print(f"no timed anchor-case records{which}; skipped {args.anchor_png}")
    for sweep in SWEEPS:
        for kind in LAYER_KINDS:
            chosen = [r for r in records if sweep_of(r) == (sweep.prefix, kind)]
            path = out_dir / sweep.png_name(kind)
            if not any(clock_ms(r, c) for r in chosen for c in CLOCKS):
                print(
                    f"no timed records of the {sweep.prefix}_{kind}_* cases{which}; skipped {path.name} "
                    "(run: python meta/bench/benchmark.py --cases meta/bench/sweep_cases.json --quick)"
                )
                continue
            plot_sweep(plt, chosen, sweep, kind, path)
            print(f"wrote {path} ({len({r['case'] for r in chosen})} cases; {provenance(chosen)})")
            written += 1
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
