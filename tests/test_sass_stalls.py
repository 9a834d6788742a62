"""CPU checks of meta/tools/sass_stalls.py (lab tool): basic blocks, regions and the per-region
sums from a synthetic ncu source CSV, and its refusal of a CSV without SASS rows."""

from __future__ import annotations

import csv
import gzip

import pytest
from lab_tools import load_tool

sass_stalls = load_tool("sass_stalls")

_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_wait",
           "stall_long_sb", "stall_wait (Not Issued)"]  # fmt: skip


def _csv(path, rows, *, gz=True):
    opener = gzip.open if gz else open
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "kernel_x"])
        w.writerow(_HEADER)
        for address, source, samples, executed, wait, long_sb in rows:
            w.writerow([hex(address), source, samples, executed, wait, long_sb, 99])
    return str(path)


def _program():
    """A wait loop (branch back to 0x10), a band block (8 LDS.U16), a softmax block (8 MUFU.EX2)
    and a GEMM block, 16 bytes an instruction."""
    rows = [(0x00, "MOV R1, R2", 1, 10, 1, 0), (0x10, "SYNCS.PHASECHK.TRANS64 P0, [UR4], R3", 5, 40, 0, 5),
            (0x20, "@!P0 BRA 0x10", 7, 40, 0, 7)]  # fmt: skip
    address = 0x30
    for op, count, samples in (("LDS.U16 R4, [R5]", 8, 2), ("MUFU.EX2 R6, R6", 8, 3)):
        for _ in range(count):
            rows.append((address, op, samples, 100, samples, 0))
            address += 0x10
        rows.append((address, f"BRA 0x{address + 0x10:x}", 0, 100, 0, 0))
        address += 0x10
    rows.append((address, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24", 4, 50, 1, 0))
    rows.append((address + 0x10, "EXIT", 0, 1, 0, 0))
    return rows


def test_regions_of_a_synthetic_kernel(tmp_path):
    run = sass_stalls.read_sass(_csv(tmp_path / "k.csv.gz", _program()))
    assert run[0].offset == 0 and run[2].opcode == "BRA" and run[2].stalls["long_sb"] == 7
    assert "wait (Not Issued)" not in run[0].stalls  # only the all-samples reasons
    blocks = sass_stalls.blocks(run)
    # [MOV] [SYNCS, BRA] (the loop's target starts a block) [8 LDS, BRA] [8 MUFU, BRA] [HGMMA, EXIT]
    assert [len(b) for b in blocks] == [1, 2, 9, 9, 2]
    assert [sass_stalls.region(b) for b in blocks] == ["other", "barriers/waits", "band scores", "softmax", "GEMM issue"]
    table = sass_stalls.by_region(run)
    assert table["band scores"][:2] == (16, 900) and table["softmax"][:2] == (24, 900)
    assert table["barriers/waits"][0] == 12 and table["barriers/waits"][2]["long_sb"] == 12


def test_main_compares_two_runs_and_refuses_a_csv_without_sass(tmp_path, capsys):
    a = _csv(tmp_path / "a.csv.gz", _program())
    b = _csv(tmp_path / "b.csv", [r for r in _program() if not r[1].startswith("LDS")], gz=False)
    assert sass_stalls.main([a, b, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "band scores" in out and "samples diff" in out and "+16" in out and "top 2 instructions" in out
    empty = _csv(tmp_path / "empty.csv.gz", [])
    with pytest.raises(SystemExit, match="no SASS rows"):
        sass_stalls.main([empty])


def test_ranges_cut_at_the_register_handoffs_and_the_last_gemm(tmp_path, capsys):
    """``--ranges``: prologue before the first USETMAXREG, producer up to the second, consumer
    loop through the last HGMMA, epilogue after it; a kernel without the marks is refused."""
    rows = [(0x00, "MOV R1, R2", 1, 10, 1, 0), (0x10, "USETMAXREG.DEALLOC.CTAPOOL 0x20", 2, 10, 0, 0),
            (0x20, "UBLKCP.S.G [UR12], [UR10], UR8", 3, 20, 3, 0), (0x30, "EXIT", 0, 4, 0, 0),
            (0x40, "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8", 4, 10, 0, 4),
            (0x50, "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24", 5, 30, 5, 0),
            (0x60, "MUFU.EX2 R6, R6", 6, 30, 6, 0), (0x70, "HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR4], R88", 7, 30, 0, 7),
            (0x80, "STSM.16.M88.4 [R44], R24", 8, 10, 8, 0), (0x90, "EXIT", 0, 10, 0, 0)]  # fmt: skip
    path = _csv(tmp_path / "r.csv.gz", rows)
    spans = sass_stalls.by_range(sass_stalls.read_sass(path))
    assert {k: v[:2] for k, v in spans.items()} == {
        "prologue": (1, 10), "producer": (5, 34), "consumer loop": (22, 100), "epilogue": (8, 20)
    }  # fmt: skip
    assert sass_stalls.main([path, path, "--ranges"]) == 0
    out = capsys.readouterr().out
    assert "consumer loop" in out and "no_inst" in out
    with pytest.raises(SystemExit, match="expected two USETMAXREG"):
        sass_stalls.by_range(sass_stalls.read_sass(_csv(tmp_path / "p.csv.gz", _program())))


def test_waits_count_the_first_tries_that_went_to_sleep(tmp_path, capsys):
    """``--waits``: a first TRYWAIT and its branch forward to a retry block (TRYWAIT, NANOSLEEP,
    branch to itself, branch back); the retry block's own TRYWAIT is not a second wait, and a
    wait that never failed is listed with none slept."""
    rows = [(0x00, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR18+0x40], R190", 3, 100, 0, 3),
            (0x10, "@!P0  BRA 0x60", 40, 100, 0, 40),
            (0x20, "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R89+UR17], R88", 1, 50, 0, 1),
            (0x30, "@!P1  BRA 0xa0", 2, 50, 0, 2),
            (0x40, "LDS.U16 R4, [R5]", 1, 100, 1, 0), (0x50, "EXIT", 0, 1, 0, 0),
            (0x60, "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R189+URZ+0x40], R190", 0, 250, 0, 0),
            (0x70, "@!P0  NANOSLEEP.SYNCS 0x989680", 0, 250, 0, 0),
            (0x80, "@!P0  BRA 0x60", 0, 250, 0, 0), (0x90, "BRA 0x40", 0, 90, 0, 0),
            (0xa0, "SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R89+URZ], R88", 0, 0, 0, 0),
            (0xb0, "@!P1  BRA 0xa0", 0, 0, 0, 0), (0xc0, "BRA 0x40", 0, 0, 0, 0)]  # fmt: skip
    path = _csv(tmp_path / "w.csv.gz", rows)
    found = sass_stalls.waits(sass_stalls.read_sass(path))
    assert [(w.offset, w.barrier, w.executed, w.retried, w.retry_tries, w.samples) for w in found] == [
        (0x00, "UR18+0x40", 100, 90, 250, 43), (0x20, "R89+UR17", 50, 0, 0, 3)]
    assert sass_stalls.main([path, "--waits"]) == 0
    assert "( 90%)" in capsys.readouterr().out


def _disasm() -> str:
    """nvdisasm-style text: a header, a label, a band block (8 LDS.U16 with a convert and an FFMA
    each, a predicated branch) and a softmax block."""
    lines = ["\t.text.kernel_x:", ".L_x_0:"]
    address = 0
    for k in range(8):
        for source in (f"LDS.U16 R{k}, [R89+0x28400]", f"IMAD.U32 R{k}, R{k}, 0x10000, RZ", f"FFMA R{k}, R24, R3, R{k}"):
            lines.append(f"        /*{address:04x}*/                   {source} ;  /* 0x000 */")
            address += 0x10
    lines.append(f"        /*{address:04x}*/              @!P0 BRA 0x{address + 0x10:x} ;")
    address += 0x10
    for k in range(8):
        lines.append(f"        /*{address:04x}*/                   MUFU.EX2 R{k}, R{k} ;")
        address += 0x10
    lines.append(f"        /*{address:04x}*/                   EXIT ;")
    return "\n".join(lines)


def test_static_counts_code_per_region_and_band_block(tmp_path, capsys):
    """``--static`` on nvdisasm text: the band block's 25 instructions over its 8 bias loads, the
    predicated branch read as a branch, and text without SASS refused."""
    run = sass_stalls.read_disasm(_disasm())
    assert len(run) == 34 and run[24].opcode == "BRA" and run[-1].opcode == "EXIT"
    lines = sass_stalls.static_report(run)
    assert lines[0] == "34 instructions"
    assert any(line.startswith("band scores") and line.split()[-1] == "25" for line in lines)
    band = lines[-1].split()
    assert band[:4] == ["0", "25", "8", "3.12"] and "LDS 8" in lines[-1]
    path = tmp_path / "k.sass"
    path.write_text(_disasm())
    assert sass_stalls.main([str(path), "--static"]) == 0
    assert "band-scores blocks" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no SASS lines"):
        sass_stalls.read_disasm("nothing here")


def test_cute_sass_cpu_refuses_bad_settings_and_missing_tools(tmp_path):
    cute_sass_cpu = load_tool("cute_sass_cpu")
    assert cute_sass_cpu.parse_setting("bias_tma=False") == ("bias_tma", False)
    assert cute_sass_cpu.parse_setting("bias_per_wg='tile_pages'") == ("bias_per_wg", "tile_pages")
    with pytest.raises(ValueError, match="expected key=value"):
        cute_sass_cpu.parse_setting("bias_tma")
    with pytest.raises(ValueError, match="Python literal"):
        cute_sass_cpu.parse_setting("bias_per_wg=tile_pages")
    with pytest.raises(ValueError, match="nvdisasm not found"):
        cute_sass_cpu.find_tool("nvdisasm", str(tmp_path / "missing"))
