"""The Triton forward kernel compiled for sm_90 on this (CPU) machine: what the compiler made of it.

Runs ``python meta/tools/kernel_report.py --json`` in a subprocess without TRITON_INTERPRET
(the test session sets it), so the kernels are real Triton kernels compiled for Hopper.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
KERNEL_REPORT = ROOT / "meta" / "tools" / "kernel_report.py"
#: Python lines that make the kernel report importable as ``kernel_report`` in a subprocess.
IMPORT_REPORT = f"import sys; sys.path.insert(0, {str(KERNEL_REPORT.parent)!r})\n"


@pytest.fixture(scope="module")
def variants() -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(KERNEL_REPORT), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["variant"]: row for row in rows}


def test_every_default_variant_compiles_for_sm90(variants):
    assert len(variants) == 8  # page-16 global prefill runs in one launch (TWO_PASS_MIN_PAGE)
    for name, row in variants.items():
        assert 0 < row["registers"] <= 255, name
        assert row["shared_bytes"] <= 227 * 1024, name  # Hopper's per-block limit


def test_plain_pass_keeps_two_kv_tiles_in_flight_without_spills(variants):
    """The plain tiles are most of a long prefill: their loop must be pipelined and spill-free.

    Guards the block-id prefetch in triton_fwd.py: with the block ids loaded in the same
    iteration as K/V, Triton 3.6 kept only one K/V tile in flight (two buffers, wait allowance 0).
    """
    plain = {k: v for k, v in variants.items() if "pass 1" in k}
    assert len(plain) == 1
    for name, row in plain.items():
        assert row["stack_bytes"] == 0, name
        assert row["kv_buffers"] >= 3 and row["max_wait_allowance"] >= 2, name


def test_one_pass_global_prefill_keeps_two_kv_tiles_in_flight(variants):
    """At page 16 the global prefill runs every tile in one launch with three stages: its K/V
    loop must keep two tiles in flight as the plain pass does."""
    (row,) = [v for k, v in variants.items() if k.startswith("prefill global") and "one pass" in k]
    assert row["kv_buffers"] >= 3 and row["max_wait_allowance"] >= 2, row


def test_prefill_bias_gather_lands_in_the_mma_layout(variants):
    """The band and sliding prefill kernels, and the sliding decode, gather the bias with inline
    PTX straight into the layout of the QK^T accumulator: no (rows x keys) tile goes through a
    blocked-to-MMA layout conversion. The global decode gathers its few band tiles with
    ``tl.load`` and has them (H200 sweeps, meta/TUNING.md)."""
    assert any("unsplit" in name for name in variants)
    for name, row in variants.items():
        if "pass 2" in name or "one pass" in name or "unsplit" in name:
            assert row["score_tile_conversions"] == 0, name
        elif "split-KV" in name:
            assert row["score_tile_conversions"] > 0, name


def test_tl_load_gather_is_converted_through_shared_memory():
    """The counter behind the test above sees the conversion when the bias is a ``tl.load``:
    the same band pass with ``asm_gather=False`` has one per masked loop."""
    out = _compile_in_subprocess(
        IMPORT_REPORT + "from kernel_report import compile_fwd_sm90, report\n"
        "from inkling_ops.kernels.triton_configs import FwdConfig\n"
        "plain = FwdConfig(128, 128, 8, 3)\n"
        "for asm in (True, False):\n"
        "    cfg = FwdConfig(64, 64, 4, 2, plain=plain, bias_ahead=True, asm_gather=asm)\n"
        "    k = compile_fwd_sm90(cfg, group=8, page=128, rel_extent=1024, fwd_pass=2, pass1_config=plain)\n"
        "    print(report(k, block_n=64).score_tile_conversions)\n"
    )
    with_asm, with_load = (int(v) for v in out.split())
    assert with_asm == 0 and with_load >= 1, out


def _compile_in_subprocess(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_kv_evict_first_reaches_the_kv_loads_of_the_register_prefetch_loop():
    """``kv_evict_first`` puts an L2 evict_first cache policy on the K/V loads of the one-stage
    register-prefetch loop (the global decode's default); without it no load carries a policy.
    (In pipelined loops Triton 3.6 turns the loads into cp.async and drops the policy; this
    checks the loop the option is meant for.)"""
    out = _compile_in_subprocess(
        IMPORT_REPORT + "import re\n"
        "from kernel_report import compile_fwd_sm90\n"
        "from inkling_ops.kernels.triton_configs import fwd_config\n"
        "cfg = fwd_config(head_dim=128, q_per_kv=8, max_seqlen_q_bucket=1, page_size=16, rel_extent=1024)\n"
        "assert cfg.kv_prefetch and cfg.kv_evict_first, cfg\n"
        "for evict in (False, True):\n"
        "    ptx = compile_fwd_sm90(cfg.__class__(**{**cfg.__dict__, 'kv_evict_first': evict}), group=8, page=16,\n"
        "                           rel_extent=1024, num_splits=4).asm['ptx']\n"
        "    print(evict, len(re.findall(r'ld\\.global\\.L1::evict_first\\.L2::cache_hint\\.v4', ptx)),\n"
        "          'createpolicy.fractional.L2::evict_first' in ptx)\n"
    )
    lines = [line.split() for line in out.strip().splitlines()]
    assert lines[0] == ["False", "0", "False"], out
    assert lines[1][0] == "True" and int(lines[1][1]) >= 16 and lines[1][2] == "True", out
