"""Where a CuTe kernel's warps stall, by code region, from ncu's per-instruction source counters.

    python3 meta/tools/sass_stalls.py BUILD.csv.gz [OTHER.csv.gz] [--top N]

Each CSV is ``ncu -i REPORT --page source --csv --print-source sass`` of one call profiled with
``--section SourceCounters --section WarpStateStats`` (``meta/tools/cute_stalls_visit.sh`` and
``cute_schedule_visit.sh`` write them, gzipped, to ``meta/logs/cute_sass_*``). The SASS is cut
into basic blocks (at branch targets and after branches) and each block is given the region its
instructions say it belongs to:

- ``band scores``: at least 8 ``LDS.U16`` (the band tiles' staged bias reads);
- ``softmax``: at least 8 ``MUFU.EX2``;
- ``GEMM issue``: any ``HGMMA``;
- ``producer loads``: K/V gathers, bulk and TMA copies, the page-address shuffles;
- ``barriers/waits``: mbarrier (``SYNCS``) and named-barrier (``BAR``) blocks;
- ``other``: the rest (prologue, epilogue, address arithmetic).

For each region it prints the stall samples, their share, the warp instructions executed and
the top stall reasons; with a second CSV (e.g. the ``allplain`` variant), both side by side and
the difference. ``--top N`` lists the N instructions with the most samples (offset from the
kernel's first instruction, block, region, samples, executions, the two top reasons).

``--ranges`` adds the same table by code range instead of by block kind: the ``prologue``
(before the first ``USETMAXREG``, the warp-specialised branch), the ``producer`` (up to the
second, the consumers' ``setmaxnreg`` increase), the ``consumer loop`` (up to the last
``HGMMA``) and the ``epilogue`` (after it), with each range's ``no_inst`` (instruction fetch)
samples.

``--waits`` lists every mbarrier wait (``SYNCS...TRYWAIT`` followed by a branch to its retry
block): how often it ran, how often its first try failed and the warp went to the retry block
(``NANOSLEEP`` and ``TRYWAIT`` again), and the retry block's tries. ncu's PC sampling puts no
samples in those retry blocks (a sleeping warp is not sampled there), so the stall columns
under-count barrier waits; the execution counts do not. A wait whose first try fails on nearly
every execution is one the warp always sleeps on.

``--static`` reads ``nvdisasm`` text instead of CSVs (``meta/tools/cute_sass_cpu.py`` writes it on
the CPU, no GPU): each region's instruction count, and for every band-scores block its size per
staged bias load (``LDS.U16``: one a score) and its commonest opcodes. No samples there: it
counts code, not time.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Instruction:
    address: int
    offset: int  # from the kernel's first instruction
    source: str
    opcode: str
    samples: int
    executed: int
    stalls: Counter = field(default_factory=Counter)


def read_sass(path: str) -> list[Instruction]:
    """The instructions of the one kernel in ``path`` (a gzipped or plain ncu source CSV)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header = next(r for r in rows if "Address" in r and "Source" in r)
    col = {name: k for k, name in enumerate(header)}
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    out, first = [], None
    for row in rows[rows.index(header) + 1 :]:
        if len(row) < len(header) or not row[col["Address"]].startswith("0x"):
            continue
        address = int(row[col["Address"]], 16)
        first = address if first is None else first
        source = row[col["Source"]].strip()
        opcode = re.sub(r"^@!?U?P\w+\s+", "", source).split(" ")[0]
        stalls = Counter({c[len("stall_") :]: int(row[col[c]] or 0) for c in stall_cols})
        out.append(Instruction(address, address - first, source, opcode, int(row[col[ALL_SAMPLES]] or 0),
                               int(row[col[EXECUTED]] or 0), stalls))  # fmt: skip
    if not out:
        raise SystemExit(f"{path}: no SASS rows (expected ncu's --page source --csv --print-source sass)")
    return out


def read_disasm(text: str) -> list[Instruction]:
    """The instructions of ``nvdisasm`` output (``/*0040*/   OPCODE operands ;`` lines), without
    samples or execution counts."""
    out, first = [], None
    for line in text.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if not m:
            continue
        address = int(m.group(1), 16)
        first = address if first is None else first
        source = m.group(2).strip()
        out.append(Instruction(address, address - first, source, re.sub(r"^@!?U?P\w+\s+", "", source).split(" ")[0], 0, 0))
    if not out:
        raise SystemExit("no SASS lines (expected nvdisasm output: '/*0040*/  OPCODE ... ;')")
    return out


def static_report(instructions: list[Instruction]) -> list[str]:
    """``--static``'s lines: instructions per region, then each band-scores block (offset,
    instructions, ``LDS.U16`` loads, instructions a load, top opcodes)."""
    lines = [f"{len(instructions)} instructions"]
    per_region = Counter()
    band = []
    for block in blocks(instructions):
        name = region(block)
        per_region[name] += len(block)
        if name == "band scores":
            band.append(block)
    lines += [f"{name:16s} {count:6d}" for name, count in per_region.most_common()]
    lines.append("band-scores blocks (offset, instructions, LDS.U16, per load, top opcodes):")
    for block in band:
        ops = Counter(i.opcode.split(".")[0] for i in block)
        loads = sum(i.opcode == "LDS.U16" for i in block)
        top = ", ".join(f"{o} {n}" for o, n in ops.most_common(6))
        lines.append(f"{block[0].offset:6x} {len(block):5d} {loads:4d} {len(block) / loads:6.2f}  {top}")
    return lines


def blocks(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Basic blocks: a new block at each branch target and after each branch or exit."""
    targets = set()
    for i in instructions:
        m = re.search(r"BRA\s+0x([0-9a-f]+)", i.source)
        if m:
            targets.add(int(m.group(1), 16))
    out, cur = [], []
    for i in instructions:
        if cur and (i.address in targets or cur[-1].opcode.startswith(("BRA", "EXIT", "RET"))):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def region(block: list[Instruction]) -> str:
    """The region a basic block belongs to (the module docstring's list, in that order)."""
    ops = Counter(i.opcode for i in block)
    if ops["LDS.U16"] >= 8:
        return "band scores"
    if ops["MUFU.EX2"] >= 8:
        return "softmax"
    if any(o.startswith("HGMMA") for o in ops):
        return "GEMM issue"
    if any(o.startswith(("LDGSTS", "UBLKCP", "UTMALDG", "SHFL")) for o in ops):
        return "producer loads"
    if any(o.startswith(("SYNCS", "BAR")) for o in ops):
        return "barriers/waits"
    return "other"


def by_region(instructions: list[Instruction]) -> dict[str, tuple[int, int, Counter]]:
    """region -> (stall samples, warp instructions executed, stall reasons)."""
    agg: dict = defaultdict(lambda: [0, 0, Counter()])
    for block in blocks(instructions):
        entry = agg[region(block)]
        for i in block:
            entry[0] += i.samples
            entry[1] += i.executed
            entry[2].update(i.stalls)
    return {k: (s, e, c) for k, (s, e, c) in agg.items()}


RANGES = ("prologue", "producer", "consumer loop", "epilogue")


@dataclass
class Wait:
    offset: int  # of the first TRYWAIT
    barrier: str  # its shared-memory operand, e.g. "UR18+0x40"
    executed: int  # first tries
    retried: int  # first tries that failed: entries into the retry block
    retry_tries: int  # TRYWAITs executed in the retry block
    samples: int  # on the TRYWAIT and its branch (none land in the retry block)


def waits(instructions: list[Instruction]) -> list[Wait]:
    """The mbarrier waits of the module docstring's ``--waits``, in code order. A first try is a
    ``TRYWAIT`` (executed at least once) followed within 12 instructions by ``@!P BRA`` to a block
    further on that holds another ``TRYWAIT``; the retry block's unpredicated ``BRA`` back counts
    the entries."""
    by_address = {i.address: k for k, i in enumerate(instructions)}
    out = []
    for k, i in enumerate(instructions):
        if "TRYWAIT" not in i.opcode or not i.executed:
            continue
        for j in range(k + 1, min(k + 12, len(instructions))):
            m = re.match(r"@!U?P\d\s+BRA\s+0x([0-9a-f]+)", instructions[j].source)
            if not m:
                continue
            target = int(m.group(1), 16)
            start = by_address.get(target)
            if start is None or target <= i.address:  # a retry block's own loop, not a first try
                break
            block = instructions[start : start + 8]
            retry = next((r for r in block if "TRYWAIT" in r.opcode), None)
            back = next((r for r in block if re.match(r"BRA\s+0x", r.source)), None)
            if retry is not None and back is not None:
                barrier = re.search(r"\[([^\]]+)\]", i.source)
                out.append(Wait(i.offset, barrier.group(1) if barrier else "?", i.executed, back.executed,
                                retry.executed, i.samples + instructions[j].samples))  # fmt: skip
            break
    return out


def by_range(instructions: list[Instruction]) -> dict[str, tuple[int, int, Counter]]:
    """range (``RANGES``, the module docstring's ``--ranges``) -> (stall samples, warp
    instructions executed, stall reasons). A kernel without two ``USETMAXREG`` or without an
    ``HGMMA`` is refused (SystemExit): its code cannot be cut that way."""
    marks = [i.offset for i in instructions if i.opcode.startswith("USETMAXREG")]
    gemms = [i.offset for i in instructions if i.opcode.startswith("HGMMA")]
    if len(marks) < 2 or not gemms:
        raise SystemExit(f"--ranges: expected two USETMAXREG and an HGMMA, found {len(marks)} and {len(gemms)}")
    producer, consumer, last_gemm = marks[0], marks[1], max(gemms)
    agg: dict = {name: [0, 0, Counter()] for name in RANGES}
    for i in instructions:
        if i.offset < producer:
            name = "prologue"
        elif i.offset < consumer:
            name = "producer"
        elif i.offset <= last_gemm:
            name = "consumer loop"
        else:
            name = "epilogue"
        agg[name][0] += i.samples
        agg[name][1] += i.executed
        agg[name][2].update(i.stalls)
    return {k: (s, e, c) for k, (s, e, c) in agg.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", nargs="+", help="one or two ncu source CSVs (the second: the comparison); nvdisasm text with --static")
    p.add_argument("--top", type=int, default=0, help="list the N instructions with the most samples (first CSV)")
    p.add_argument("--ranges", action="store_true", help="also split by code range (prologue, producer, consumer loop, epilogue)")
    p.add_argument("--waits", action="store_true", help="also list each mbarrier wait with how often it went to sleep")
    p.add_argument("--static", action="store_true", help="the inputs are nvdisasm text: count code per region and band block")
    args = p.parse_args(argv)
    if args.static:
        for path in args.csv:
            print(f"{path}:")
            with open(path) as f:
                print("\n".join(static_report(read_disasm(f.read()))))
        return 0
    if len(args.csv) > 2:
        p.error("at most two CSVs")
    runs = [read_sass(path) for path in args.csv]
    tables = [by_region(r) for r in runs]
    totals = [sum(i.samples for i in r) for r in runs]
    for path, run, total in zip(args.csv, runs, totals):
        print(f"{path}: {len(run)} instructions, {total} samples, {sum(i.executed for i in run)} warp instructions")
    names = sorted({k for t in tables for k in t}, key=lambda k: -tables[0].get(k, (0, 0, None))[0])
    head = f"{'region':16s} {'samples':>8s} {'share':>6s} {'warp instr':>11s}"
    print(head + ("   | other: samples  share  warp instr | samples diff" if len(runs) == 2 else "   top stalls"))
    for name in names:
        s, e, reasons = tables[0].get(name, (0, 0, Counter()))
        line = f"{name:16s} {s:8d} {s / totals[0]:6.1%} {e:11d}"
        if len(runs) == 2:
            s2, e2, _ = tables[1].get(name, (0, 0, Counter()))
            line += f"   | {s2:14d} {s2 / totals[1]:6.1%} {e2:11d} | {s - s2:+12d}"
        else:
            line += "   " + ", ".join(f"{r} {v}" for r, v in reasons.most_common(4) if v)
        print(line)
    if args.ranges:
        spans = [by_range(r) for r in runs]
        print(f"\n{'range':16s} {'samples':>8s} {'share':>6s} {'warp instr':>11s} {'no_inst':>8s}"
              + ("   | other: samples  share  warp instr  no_inst" if len(runs) == 2 else ""))  # fmt: skip
        for name in RANGES:
            line = ""
            for k, (span, total) in enumerate(zip(spans, totals)):
                s, e, reasons = span[name]
                cells = f"{s:8d} {s / total:6.1%} {e:11d} {reasons['no_inst']:8d}"
                line += f"{name:16s} {cells}" if k == 0 else f"   | {cells:>37s}"
            print(line)
    if args.waits:
        for path, run in zip(args.csv, runs):
            print(f"\nmbarrier waits of {path} (offset, barrier, first tries, slept, retry tries, samples):")
            for w in waits(run):
                share = w.retried / w.executed
                print(f"{w.offset:6x} [{w.barrier:16s}] {w.executed:9d} {w.retried:9d} ({share:4.0%}) {w.retry_tries:9d} {w.samples:7d}")
    if args.top:
        where = {}
        for k, block in enumerate(blocks(runs[0])):
            for i in block:
                where[i.offset] = (k, region(block))
        print(f"\ntop {args.top} instructions of {args.csv[0]} by samples:")
        for i in sorted(runs[0], key=lambda i: -i.samples)[: args.top]:
            k, name = where[i.offset]
            reasons = ", ".join(f"{r} {v}" for r, v in i.stalls.most_common(2) if v)
            print(f"{i.offset:6x} block {k:3d} {name:15s} {i.samples:6d} {i.executed:10d}  {i.source[:58]:58s} {reasons}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
