"""Issue 17's speed targets, read from benchmark records (lab tool, not the product).

    python3 meta/tools/targets.py [RECORDS.jsonl] [--git-sha SHA] [--gpu TEXT] [--all-runs]

``RECORDS.jsonl`` (default ``meta/bench/bench_records.jsonl``; ``.jsonl.gz`` too): the lines
``meta/bench/benchmark.py`` appends, read by ``plot_performance.read_records``. A *run* is a stretch of consecutive lines with the same git SHA, GPU and command (one
benchmark process). For each run that timed ``ours`` and ``fa4_nobias`` on a case a target names,
it prints one row a (case, page size): both clocks' ratio (flash-attn-4's time over ours, so above
1 ours is faster), the target, and on each clock whether it is met or by how many points it is
missed (``ours`` is the default backend's record, or ``ours[cute]`` in a run that named its
backends). Where the run also timed ``ours[triton]`` and that backend was not Triton, a row
checks the last target: the chosen backend never slower than our Triton.

Targets (issue 17; against flash-attn-4 without the bias, both clocks, in one run on the H200):
8K global prefill 0.90x; 32K global and 4 x 2K chunks on 16K 0.93x; 8K sliding 1.0x; the
serving-shaped batches 0.9x. A run on another GPU is printed with its GPU's name: read it as that
GPU's figures, not the H200's.

By default only the latest run with a target case is printed (``--all-runs``: every one;
``--git-sha`` / ``--gpu``: those runs only). Exit status 0 whether or not targets are met; 2 when
no run matches; 1 with a message naming the file (and line) when the records cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import plot_module  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RECORDS = ROOT / "meta" / "bench" / "bench_records.jsonl"
CLOCKS = ("eager", "graph")
PEER = "fa4_nobias"
TRITON = "ours[triton]"
OURS_CUTE = "ours[cute]"

#: (case-name prefix, the least ratio of flash-attn-4's time over ours), first match wins
TARGETS = (
    ("prefill8k_global", 0.90),
    ("prefill32k_global", 0.93),
    ("chunk2k_on16k_x4", 0.93),
    ("prefill8k_local", 1.0),
    ("serving_", 0.90),
)  # fmt: skip


def target_of(case: str) -> float | None:
    """The least ratio issue 17 asks of ``case`` against flash-attn-4 without the bias, or None
    (no target: decode cases, sweeps)."""
    for prefix, least in TARGETS:
        if case.startswith(prefix):
            return least
    return None


@dataclass(frozen=True)
class Row:
    """One (case, page size) of a run against one bar: ``ratios`` maps each clock with both
    times to the baseline's time over ours (above 1: ours faster)."""

    case: str
    page_size: int
    against: str  # "fa4_nobias" or "ours[triton]"
    least: float
    ours_ms: dict
    ratios: dict
    backend: str | None
    #: the baseline's eager time over its replayed one, when both were timed: far above 1, its
    #: eager clock timed its host launch (flash-attn-4 on 8K sliding), so read the graph clock
    base_eager_over_graph: float | None = None

    def verdict(self, clock: str) -> str:
        """``met (+N.N)`` or ``missed by N.N points`` on ``clock``; ``-`` when not timed."""
        ratio = self.ratios.get(clock)
        if ratio is None:
            return "-"
        points = round(100.0 * (ratio - self.least), 1)
        return f"met (+{abs(points):.1f})" if points >= 0 else f"missed by {-points:.1f} points"

    @property
    def met(self) -> bool | None:
        """Met on every clock timed; None when no clock was."""
        if not self.ratios:
            return None
        return all(round(100.0 * (r - self.least), 1) >= 0 for r in self.ratios.values())


def split_runs(records: list[dict]) -> list[list[dict]]:
    """Consecutive records with the same (git SHA, GPU, command), in file order."""
    runs, key = [], None
    for record in records:
        this = (record.get("git_sha"), record.get("gpu"), record.get("command"))
        if not runs or this != key:
            runs.append([])
            key = this
        runs[-1].append(record)
    return runs


def _ms(record: dict | None, clock: str) -> float | None:
    if record is None or record.get("status", "ok") != "ok":
        return None
    value = record.get(f"{clock}_ms")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


#: the baseline's eager / graph above which a row says its eager clock was its launch
LAUNCH_BOUND = 1.15


def _eager_over_graph(record: dict) -> float | None:
    eager, graph = _ms(record, "eager"), _ms(record, "graph")
    return eager / graph if eager is not None and graph is not None else None


def _ratios(ours: dict, base: dict | None) -> tuple[dict, dict]:
    times, ratios = {}, {}
    for clock in CLOCKS:
        mine, theirs = _ms(ours, clock), _ms(base, clock)
        if mine is not None:
            times[clock] = mine
            if theirs is not None:
                ratios[clock] = theirs / mine
    return times, ratios


def evaluate(run: list[dict]) -> list[Row]:
    """The target rows of one run, in the order its cases were timed."""
    by_key = {}
    for record in run:
        by_key[(record.get("case"), record.get("page_size"), record.get("peer"))] = record
    rows = []
    seen = []
    for record in run:
        key = (record.get("case"), record.get("page_size"))
        if key not in seen:
            seen.append(key)
    for case, page in seen:
        least = target_of(case or "")
        # the default backend's record; a run with --backends cute,... has ours[cute] instead
        ours = by_key.get((case, page, "ours")) or by_key.get((case, page, OURS_CUTE))
        if least is None or ours is None:
            continue
        backend = ours.get("backend")
        fa4 = by_key.get((case, page, PEER))
        if fa4 is not None:
            times, ratios = _ratios(ours, fa4)
            rows.append(Row(case, page, PEER, least, times, ratios, backend, _eager_over_graph(fa4)))
        triton = by_key.get((case, page, TRITON))
        if triton is not None and backend not in (None, "triton"):
            times, ratios = _ratios(ours, triton)
            rows.append(Row(case, page, TRITON, 1.0, times, ratios, backend, _eager_over_graph(triton)))
    return rows


def render(run: list[dict], rows: list[Row]) -> str:
    """A markdown table of ``rows`` under a line naming the run."""
    first = run[0]
    head = (f"{first.get('gpu', '?')}, git {first.get('git_sha', '?')}, {first.get('timestamp', '?')}: "
            f"{first.get('command', '?')}")  # fmt: skip
    lines = [head, "", "| case | page | against | ours eager / graph (backend) | ratio eager / graph | target | eager | graph | note |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        ours = " / ".join(f"{row.ours_ms[c]:.4g} ms" if c in row.ours_ms else "-" for c in CLOCKS)
        ratio = " / ".join(f"{row.ratios[c]:.3f}x" if c in row.ratios else "-" for c in CLOCKS)
        launch = row.base_eager_over_graph
        note = (f"{row.against} eager {launch:.2f}x its graph: its launch" if launch is not None and launch > LAUNCH_BOUND
                else "")  # fmt: skip
        lines.append(f"| {row.case} | {row.page_size} | {row.against} | {ours} ({row.backend}) | {ratio} | "
                     f"{row.least:.2f}x | {row.verdict('eager')} | {row.verdict('graph')} | {note} |")  # fmt: skip
    met = sum(1 for row in rows if row.met)
    lines += ["", f"{met} of {len(rows)} rows met on every clock timed"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="?", type=Path, default=DEFAULT_RECORDS)
    parser.add_argument("--git-sha", help="only runs of this commit (a prefix of it matches)")
    parser.add_argument("--gpu", help="only runs whose GPU name contains this text")
    parser.add_argument("--all-runs", action="store_true", help="every matching run, not the latest")
    args = parser.parse_args(argv)
    plot = plot_module()  # its records reader (gzip too) and SHA matching, as smi_clocks.py uses them
    records = plot.read_records(args.records)  # SystemExit naming the file (and line) when unreadable
    chosen = []
    for run in split_runs(records):
        gpu = str(run[0].get("gpu") or "")
        if args.git_sha and not plot.sha_matches(run[0].get("git_sha"), args.git_sha):
            continue
        if args.gpu and args.gpu.lower() not in gpu.lower():
            continue
        rows = evaluate(run)
        if rows:
            chosen.append((run, rows))
    if not chosen:
        print(f"no run in {args.records} timed ours and {PEER} on a target case"
              f"{' at git ' + args.git_sha if args.git_sha else ''}{' on ' + args.gpu if args.gpu else ''}")  # fmt: skip
        return 2
    for run, rows in chosen if args.all_runs else chosen[-1:]:
        print(render(run, rows))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
