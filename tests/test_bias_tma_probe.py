"""CPU check of meta/tools/bias_tma_probe.py (lab tool): its variants compile for sm_90a without a
GPU, each to one bulk tensor copy of the rank its view says (the K/V control: two, the K/V kernel's
two 64-column boxes). Skips without nvidia-cutlass-dsl."""

from __future__ import annotations

import re

import pytest
from lab_tools import load_tool

pytest.importorskip("cutlass")
pytest.importorskip("tvm_ffi")

probe = load_tool("bias_tma_probe")


@pytest.mark.parametrize(("variant", "rank", "copies"), [("3d_w128_edges", 3, 1), ("rows_sw_w64_inside", 2, 1), ("rows_static_w128_edges", 2, 1), ("kvpage", 3, 2), ("rows_w136_aligned", 2, 1)])
def test_cute_bias_tma_probe_compiles(variant, rank, copies):
    ptx = probe.compile_variant(variant, arch="sm_90a").ptx
    found = re.findall(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes", ptx)
    assert found == [str(rank)] * copies
    assert "prefetch.tensormap" in ptx


def test_bias_tma_probe_lists_its_variants(capsys):
    assert probe.main(["--list"]) == 0
    names = capsys.readouterr().out.split()
    assert "kvpage" in names and "3d_w128_edges" in names and len(names) == len(probe.VARIANTS)
    assert "rows_w136_aligned" in names and "3d_w128_aligned" in names


def test_bias_tma_probe_aligned_starts():
    """The aligned variants' starts are multiples of 8 distances (16 bytes), at both edges of E."""
    torch = pytest.importorskip("torch")
    for name in ("rows_w128_aligned", "rows_w136_aligned"):
        _, width, _ = probe.VARIANTS[name]
        rel, starts, out = probe.inputs(name, device="cpu")
        assert torch.all(starts % 8 == 0)
        assert (starts < 0).any() and (starts + width > probe.E).any()
        assert out.shape == (probe.T, probe.G, width) and rel.shape == (probe.T, probe.HQ, probe.E)


def test_bias_tma_probe_triton_control_refuses_what_it_cannot_check():
    """The Triton control loads distance boxes of a power-of-two width: not the kvpage control
    (its expected data is a K page) nor a 136-wide box; it refuses them by name."""
    pytest.importorskip("triton")
    for name in ("kvpage", "rows_w136_aligned"):
        with pytest.raises(ValueError, match=f"--triton {name}"):
            probe.run_triton(name, device="cpu")
