"""The SM clock and throttle reasons during each timed measurement (lab tool, not the product).

    python3 meta/tools/smi_clocks.py RECORDS.jsonl SMI.csv[.gz] [--git-sha SHA] [--smi-offset-s S]

``RECORDS.jsonl``: benchmark records (``meta/bench/benchmark.py``) that carry ``eager_window`` /
``graph_window``, the UTC start and end of each clock's measurement. ``SMI.csv``: the log
``meta/tools/gpu_visit.sh`` writes with ``SMI_MS`` set (``nvidia-smi --query-gpu=timestamp,
clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits
-lms N``). nvidia-smi writes its timestamps in the machine's local time; the H200 machine's is UTC
(``--smi-offset-s``: seconds to add to them otherwise).

For every record and clock with a window it prints the samples inside it: how many, the SM
clock's minimum and median, and the throttle reasons set in any of them, so a slow reading can
be told from a clock that dropped under it (the 32K graph clock at 924f3b7; meta/TUNING.md,
"seventh day"). nvidia-smi refreshes some fields about every 100 ms, so a window shorter than
that may hold no sample; it says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import plot_module  # noqa: E402

#: nvidia-smi's clocks_event_reasons bits (nvmlClocksEventReasons)
REASONS = {
    0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap", 0x8: "HwSlowdown",
    0x10: "SyncBoost", 0x20: "SwThermalSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}  # fmt: skip
CLOCKS = ("eager", "graph")


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in ``mask`` (unknown bits as hex)."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return names + ([hex(rest)] if rest else [])


def read_smi(path: Path, offset_s: float = 0.0) -> list[tuple[datetime.datetime, int, int]]:
    """(UTC time, SM clock MHz, reason mask) per sample of an nvidia-smi CSV log. Rows that are
    not samples (the header, error lines) are skipped; a log with no sample at all is an error
    that names the file."""
    samples = []
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        for row in csv.reader(f):
            if len(row) < 2:
                continue
            try:
                when = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                sm = int(row[1].strip())
            except ValueError:
                continue
            mask = int(row[5].strip(), 16) if len(row) > 5 and row[5].strip().startswith("0x") else 0
            when = when.replace(tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=offset_s)
            samples.append((when, sm, mask))
    if not samples:
        raise ValueError(f"{path}: no nvidia-smi samples (expected 'YYYY/MM/DD HH:MM:SS.fff, <sm MHz>, ...' rows)")
    return samples


def in_window(samples, window: list[str]) -> list[tuple[datetime.datetime, int, int]]:
    """The samples inside ``window`` (``[start, end]``, ISO 8601 with a UTC offset)."""
    start, end = (datetime.datetime.fromisoformat(w) for w in window)
    return [s for s in samples if start <= s[0] <= end]


def summarize(records: list[dict], samples) -> list[str]:
    """One line per record and clock with a window."""
    lines = []
    for rec in records:
        for clock in CLOCKS:
            window = rec.get(f"{clock}_window")
            if not window:
                continue
            inside = in_window(samples, window)
            label = f"{rec.get('case', '?'):<24} p{rec.get('page_size', '?'):<4} {rec.get('peer', '?'):<16} {clock:<5}"
            ms = rec.get(f"{clock}_ms")
            label += f" {ms:9.4f} ms" if isinstance(ms, (int, float)) else f" {'-':>9}   "
            if not inside:
                lines.append(f"{label} | no sample in {window[0]} .. {window[1]}")
                continue
            clocks = [s[1] for s in inside]
            mask = 0
            for s in inside:
                mask |= s[2]
            reasons = ", ".join(reason_names(mask)) or "none"
            lines.append(f"{label} | {len(inside):3d} samples, SM clock min {min(clocks)} median "
                         f"{statistics.median(clocks):.0f} MHz | reasons: {reasons}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", type=Path)
    p.add_argument("smi", type=Path)
    p.add_argument("--git-sha", default=None, help="only the records of this commit (a prefix of it matches)")
    p.add_argument("--smi-offset-s", type=float, default=0.0, help="seconds to add to nvidia-smi's timestamps (0: UTC)")
    args = p.parse_args(argv)
    plot = plot_module()
    records = [r for r in plot.read_records(args.records) if args.git_sha is None or plot.sha_matches(r.get("git_sha"), args.git_sha)]
    windowed = [r for r in records if any(r.get(f"{c}_window") for c in CLOCKS)]
    if not windowed:
        print(f"{args.records}: no record with an eager_window or graph_window (benchmark.py before 2026-12-04?)",
              file=sys.stderr)  # fmt: skip
        return 1
    for line in summarize(windowed, read_smi(args.smi, args.smi_offset_s)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
