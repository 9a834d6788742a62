"""The CuTe DSL backend's kernel compiles for sm_90a on a machine without a GPU.

Each test compiles through the backend's own compile function (fake tensors, ``--gpu-arch``
from the compile key), keeps the PTX and checks the Hopper instructions are in it: warpgroup
MMAs for both GEMMs, the 16-byte ``cp.async`` gather of K/V and of the staged bias, the warp
specialisation (``setmaxnreg``, mbarrier pipelines, ping-pong named barriers) and the absence of
spilled registers (``.local`` memory in the PTX). The DSL's own ``CUTE_DSL_KEEP`` /
``CUTE_DSL_DUMP_DIR`` are honoured when set; otherwise the PTX goes to a temporary directory.
Skips without nvidia-cutlass-dsl. Compiles take ~5-15 s each on 2 cores: one per test, the
wider set marked slow.
"""

from __future__ import annotations

import json
import os
import re
import struct
import shutil
import subprocess

import pytest
import torch

pytest.importorskip("cutlass")
pytest.importorskip("tvm_ffi")

from inkling_ops import planning  # noqa: E402
from inkling_ops.backends import cute_backend  # noqa: E402
from inkling_ops.compile_keys import DeviceFacts  # noqa: E402
from inkling_ops.problem import RelAttnProblem  # noqa: E402

HOPPER = DeviceFacts(arch="sm_90a", num_sms=132)


def _problem(*, dtype=torch.bfloat16, heads=8, kv_heads=1, page=16, extent=1024, window=-1, reqs=1) -> RelAttnProblem:
    """A prefill-class call; of one request by default (the dense grid), ``reqs=2``: the compact one."""
    return RelAttnProblem(
        num_tokens=4096, num_heads=heads, num_kv_heads=kv_heads, head_dim=128, rel_extent=extent, num_reqs=reqs,
        page_size=page, num_blocks=4096, max_blocks_per_seq=8192 // page, max_seqlen_q=4096,
        softmax_scale=1 / 128, window_left=window, causal=True, num_splits=0, dtype=dtype, kv_dtype=dtype,
        device_type="cuda",
    )  # fmt: skip


def _compile_ptx(problem: RelAttnProblem) -> str:
    """The PTX of the backend's compile for ``problem``'s key (cute_runtime keeps it: in the
    user's CUTE_DSL_DUMP_DIR when CUTE_DSL_KEEP asks for PTX, else in a temporary directory)."""
    plan = planning.plan(problem, HOPPER, backend="cute")
    assert plan.backend == "cute" and plan.num_splits == 1
    compiled = cute_backend.compile_config(cute_backend.fwd_config(plan.key), plan.key.arch, ptx=True)
    assert callable(compiled.function) and compiled.arch == "sm_90a"
    return compiled.ptx


def _variant_ptx(config, **variant) -> str:
    """The PTX of ``config``'s kernel for ``sm_90a`` with ``variant`` over the backend's schedule
    (``cute_fwd_sm90.compile_fwd``'s keywords)."""
    from inkling_ops.kernels import cute_fwd_sm90, cute_runtime

    return cute_runtime.compile_with(
        lambda flags: cute_fwd_sm90.compile_fwd(config, options=flags, **variant), arch="sm_90a", ptx=True
    ).ptx


def _check_hopper_ptx(ptx: str, *, bias: bool = True, bias_bulk: bool | None = None, compact_grid: bool = False,
                      stmatrix: bool | None = None, bias_tma: bool | None = None) -> None:  # fmt: skip
    """What every build of the kernel holds. ``bias_bulk``: whether the bias rows are bulk copies;
    ``bias_tma``: whether they are TMA boxes, one a token (over ``bias_bulk``; None: as in SCHEDULE);
    ``stmatrix``: whether O goes into shared memory by ``stmatrix`` (None: as in SCHEDULE);
    ``compact_grid``: the compact grid's build (its register split)."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8, compact_grid=compact_grid)
    built = cute_fwd_sm90.schedule(config)
    if bias_bulk is None:
        bias_bulk = built.get("bias_bulk", False)
    if bias_tma is None:
        bias_tma = built.get("bias_tma", False)
    if stmatrix is None:
        stmatrix = built.get("stmatrix_epilogue", False)
    # the epilogue's O into shared memory: 8 stmatrix (x4, four 8x8 matrices each) a thread
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16", ptx)) == (8 if stmatrix else 0)
    assert ".target sm_90a" in ptx
    # QK^T (k = head_dim / 16 = 8 instructions) and PV (k = tile_n / 16 = 8), m64n128k16
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32", ptx)) >= 16
    assert "wgmma.fence" in ptx and "wgmma.commit_group" in ptx
    # the K/V gather (16 rows a thread, K in two places, V in one) and Q: 16-byte cp.async (cg: L2
    # only); and the staged bias, unless bias_bulk: 17 16-byte chunks a row, one row a producer
    # thread, two call sites (with it, one bulk copy a row at each)
    chunks = 48 + (0 if bias_bulk or bias_tma else 2 * 17)
    assert len(re.findall(r"cp\.async\.cg\.shared\.global(?:\.L2::\d+B)? \[[^]]+\], \[[^]]+\], 16", ptx)) >= chunks
    if bias_tma:  # a loop of boxes at each of the two staging sites, and no bulk copy of a row
        assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared::cta\.global\.tile", ptx)) == 2
        assert "cp.async.bulk.shared" not in ptx
    elif bias_bulk:
        assert len(re.findall(r"cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes", ptx)) == 2
    assert "ex2.approx" in ptx
    assert not re.search(r"\.local\s", ptx), "registers spilled to local memory"
    # warp specialisation: the producer warpgroup gives registers to the two consumer warpgroups,
    # its copies arrive on mbarriers, the consumers wait on them and take turns (named barriers)
    assert re.search(rf"setmaxnreg\.dec\.sync\.aligned\.u32\s+{built.get('producer_regs', 24)};", ptx)
    assert re.search(rf"setmaxnreg\.inc\.sync\.aligned\.u32\s+{built.get('consumer_regs', 240)};", ptx)
    assert "cp.async.mbarrier.arrive.noinc.shared" in ptx and "mbarrier.try_wait.parity" in ptx
    assert re.search(r"bar\.arrive\s+\S+, 256;", ptx) and re.search(r"bar\.sync\s+\S+, 256;", ptx)
    if bias:
        assert "ld.shared" in ptx  # the softmax reads the staged bias from shared memory
    if built.get("rescale_threshold", 0.0):
        assert len(re.findall(_VOTE, ptx)) == 2 and _threshold_literal(built["rescale_threshold"]) in ptx


#: the warp vote before the running O's rescale (rescale_threshold): one at each rescale site, the
#: loop's and the last PV's
_VOTE = r"vote\.sync\.any\.pred"


def _threshold_literal(value: float) -> str:
    """``value`` as a PTX f32 literal (``0f41000000`` for 8.0)."""
    return "0f%08X" % struct.unpack(">I", struct.pack(">f", value))[0]


def test_cute_compile_global_page16_g8():
    _check_hopper_ptx(_compile_ptx(_problem(page=16)))


def test_cute_compile_head_dim_64():
    """head_dim 64 (the backend takes it since the H200 conformance run at b6bbcf6): QK keeps its
    m64n128k16 GEMMs (k = 64 / 16 = 4 a tile), PV is m64n64k16; the K/V gather shares each row's
    page lookup over the 8 lanes that copy its column chunks (shuffle width 8, against 16 at
    head_dim 128), 8 rows a thread at 3 sites; one TMA box a page (64 columns fill the 128-byte
    swizzle); no spills."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=64, q_per_kv=8)
    ptx = _variant_ptx(config)
    assert ".target sm_90a" in ptx
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32", ptx)) >= 2 * 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32", ptx)) >= 2 * 8
    width8 = ((32 - 8) << 8) | 31
    assert len(re.findall(rf"shfl\.sync\.idx\.b32\s+%r\d+, %r\d+, [^,]+, {width8}, -1;", ptx)) == 2 * 8 * 3
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.4d\.shared::cta\.global", ptx)) == 3
    assert not re.search(r"\.local\s", ptx), "registers spilled to local memory"


def test_cute_compile_compact_grid():
    """The compact grid (what the plan picks for a prefill-class call of several requests)
    compiles through the backend's own path from its key without spills, at its own register
    split (40 producer registers), reads ``cu_seqlens_q`` in its scan (more global loads of it than
    the dense grid's build) 32 requests a step, and leaves the GEMMs as they are. (The window is a
    runtime argument: a global layer's compact key has this configuration too,
    :func:`test_cute_compact_grid_rule`.)"""
    serving = _problem(heads=8, kv_heads=2, page=16, extent=512, window=511, reqs=2)
    plan = planning.plan(serving, HOPPER, backend="cute")
    assert plan.key.compact_grid and plan.launch.compact_grid
    compact = cute_backend.compile_config(plan.launch, plan.key.arch, ptx=True).ptx
    dense = planning.plan(serving._replace(num_reqs=1), HOPPER, backend="cute")
    assert not dense.key.compact_grid
    build = cute_backend.compile_config(dense.launch, dense.key.arch, ptx=True).ptx
    _check_hopper_ptx(compact, compact_grid=True)
    producer_regs = r"setmaxnreg\.dec\.sync\.aligned\.u32\s+(\d+);"
    assert re.findall(producer_regs, compact) == ["40"] and re.findall(producer_regs, build) == ["32"]
    wgmma = r"wgmma\.mma_async"
    assert len(re.findall(wgmma, compact)) == len(re.findall(wgmma, build))
    loads = r"ld\.global[.a-z0-9]*\.b32"
    assert len(re.findall(loads, compact)) > len(re.findall(loads, build))
    # the scan is warp-wide (32 requests a step): a five-shuffle prefix sum and two warp maxima
    shuffles, maxima = r"shfl\.sync\.up\.b32", r"redux\.sync\.max\.s32"
    assert len(re.findall(shuffles, compact)) == 5 and len(re.findall(maxima, compact)) == 2
    assert not re.findall(shuffles, build) and not re.findall(maxima, build)


def test_cute_compact_grid_rule():
    """The plan's grid rule (pure): the compact grid for a prefill-class call of two or more
    requests on either kind of layer, the dense grid for a single request or a decode batch; both
    are compile-key fields, so each grid is its own compiled configuration and store entry."""
    sliding = _problem(heads=8, kv_heads=2, extent=512, window=511, reqs=2)
    rule = cute_backend.compact_grid
    for layer in (sliding, sliding._replace(window_left=-1)):
        assert rule(layer) and rule(layer._replace(max_seqlen_q=17))
        assert not rule(layer._replace(num_reqs=1))
        assert not rule(layer._replace(max_seqlen_q=cute_backend.DECODE_MAX_SEQLEN_Q))
    compact, dense = (planning.plan(p, HOPPER, backend="cute") for p in (sliding, sliding._replace(num_reqs=1)))
    assert compact.key.compact_grid and not dense.key.compact_grid
    assert compact.launch != dense.launch and compact.launch == cute_backend.fwd_config(compact.key)
    # a global layer of the same GQA group: its own key, the same compiled configuration
    on_global = planning.plan(sliding._replace(window_left=-1), HOPPER, backend="cute")
    assert on_global.key.compact_grid and on_global.key != compact.key and on_global.launch == compact.launch
    assert cute_backend.store_entry(compact.launch) != cute_backend.store_entry(dense.launch)
    # Triton's kernels have one grid: its keys never carry the field
    assert not planning.plan(sliding, HOPPER, backend="triton").key.compact_grid


def test_cute_compile_lean_mask_option():
    """``lean_mask`` (in SCHEDULE since 2026-12-02): the build compiles without spills, the
    producer's zeros past E are ordered before the next bulk copy by a proxy fence that the kernel
    without the option does not have, and the masked tiles keep one visibility select a score."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=4)

    def ptx_of(**variant):
        return _variant_ptx(config, **variant)

    # with bias_bulk's staging (bias_tma's zeros are the TMA unit's fill: no stores, no fence)
    lean = ptx_of(bias_tma=False, bias_only_past_e=False)
    build = ptx_of(lean_mask=False, bias_tma=False, bias_only_past_e=False)
    assert not re.search(r"\.local\s", lean), "registers spilled to local memory"
    fence = r"fence\.proxy\.async\.shared::cta"
    # one a bias staging site (the walk's first band tile and the loop's)
    assert len(re.findall(fence, lean)) == len(re.findall(fence, build)) + 2
    # the visibility test stays (one compare a masked score); only the select at d >= E goes
    assert len(re.findall(r"setp\.le\.s32", lean)) == len(re.findall(r"setp\.le\.s32", build)) >= 128
    assert len(re.findall(r"selp\.f32", lean)) <= len(re.findall(r"selp\.f32", build)) - 64


def test_cute_compile_rescale_threshold_option():
    """``rescale_threshold`` (in SCHEDULE since 30b99b8's A/B): without it no warp votes and no
    row compares its maximum's growth with a threshold (the build's checks are in
    :func:`_check_hopper_ptx`); out-of-range thresholds are refused by name."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    assert cute_fwd_sm90.SCHEDULE["rescale_threshold"] > 0
    exact = _variant_ptx(config, rescale_threshold=0.0)
    assert not re.findall(_VOTE, exact) and _threshold_literal(cute_fwd_sm90.SCHEDULE["rescale_threshold"]) not in exact
    for bad in (-1.0, 17.0):
        with pytest.raises(ValueError, match="rescale_threshold"):
            cute_fwd_sm90.RelAttnFwdSm90(config, rescale_threshold=bad)


def test_cute_compile_bias_only_past_e_option():
    """``bias_only_past_e`` (in SCHEDULE since d0e4c01's A/B): only the tile ranges change (the
    bias-only range's lower bound no longer takes ``min(E - 1, window)``), the band bodies are the
    same code, and a build without ``band_split`` or ``lean_mask`` (whose staged zeros past E it
    reads) is refused by name."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    assert cute_fwd_sm90.SCHEDULE["bias_only_past_e"]

    def ptx_of(**variant):
        return _variant_ptx(config, **variant)

    past_e, masked = ptx_of(), ptx_of(bias_only_past_e=False)
    assert len(re.findall(r"min\.s32", masked)) == len(re.findall(r"min\.s32", past_e)) + 1
    for body in (r"ld\.shared\.[bu]16", r"selp\.f32", r"setp\.le\.s32", r"fma\.rn\.f32"):
        assert len(re.findall(body, past_e)) == len(re.findall(body, masked)), body
    for off in (dict(band_split=False), dict(lean_mask=False)):
        with pytest.raises(ValueError, match="bias_only_past_e needs band_split and lean_mask"):
            cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, **off})


def test_cute_compile_timing_probes():
    """The timing probes of the ninth day (wrong answers by design, never in ``SCHEDULE``):
    ``debug_acc_bias="band"`` loads 16 float32 vectors a thread before each QK GEMM (two sites:
    the walk's first tile and the loop) and drops every 16-bit bias load; ``"band_noload"`` keeps
    only the waits; ``debug_no_masks`` drops the masked tiles' selects. Bad values are refused by
    name."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    assert not any(k.startswith("debug_") for k in cute_fwd_sm90.SCHEDULE)

    def ptx_of(**variant):
        return _variant_ptx(config, **variant)

    def count(pattern, ptx):
        return len(re.findall(pattern, ptx))

    build, band = ptx_of(), ptx_of(debug_acc_bias="band")
    bare = ptx_of(debug_acc_bias="band_noload", debug_no_masks=True)
    v4, b16, selp = r"ld\.shared\.v4\.b32", r"ld\.shared\.[bu]16", r"selp\.f32"
    assert count(v4, band) == count(v4, build) + 32 and count(b16, build) >= 128 and count(b16, band) == 0
    assert count(v4, bare) == count(v4, build) and count(b16, bare) == 0
    assert count(selp, bare) <= count(selp, build) - 128
    # the bias waits: "band" / "band_noload" wait before the GEMM at the two QK sites and drop the
    # masked body's two; "unmasked" moves the unmasked body's two (a hang at 4c3f7ad was a wait
    # the producer never answers, which only a GPU run can catch)
    unmasked = ptx_of(debug_acc_bias="unmasked")
    wait = r"mbarrier\.try_wait"
    assert count(wait, band) == count(wait, bare) == count(wait, build) - 2
    assert count(wait, unmasked) == count(wait, build)
    for ptx in (band, bare):
        assert not re.search(r"\.local\s", ptx), "registers spilled to local memory"
    with pytest.raises(ValueError, match="debug_acc_bias"):
        cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, "debug_acc_bias": "all"})
    with pytest.raises(ValueError, match="debug_acc_bias"):
        cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, "band_split": False,
                                                "bias_only_past_e": False, "debug_acc_bias": "band"})


def test_cute_compile_empty_walk_probe():
    """``debug_empty_walk`` (timing only, never in ``SCHEDULE``): the CTAs walk no key tile, so the
    PTX keeps the Q gather and the epilogue's stores but issues no GEMM and no K, V or bias load."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=4)
    build, empty = _variant_ptx(config), _variant_ptx(config, debug_empty_walk=True)
    assert "wgmma.mma_async" in build and "wgmma.mma_async" not in empty
    assert "cp.async.bulk.tensor" in build and "cp.async.bulk.tensor" not in empty
    assert "cp.async.ca.shared.global" in empty or "cp.async.cg.shared.global" in empty  # the Q gather
    assert "st.global.v4" in empty  # the epilogue's 16-byte stores


def test_cute_compile_sliding_page128_g4_fp16():
    ptx = _compile_ptx(_problem(dtype=torch.float16, kv_heads=2, page=128, extent=512, window=511))
    _check_hopper_ptx(ptx)
    assert "f16.f16" in ptx and "bf16.bf16" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw",
    [
        dict(page=128),
        dict(page=64, kv_heads=2),
        dict(page=16, window=511, extent=512, kv_heads=2),
        dict(page=16, dtype=torch.float16),
        dict(page=48, heads=16, kv_heads=16),
    ],
    ids=["global-page128-g8", "global-page64-g4", "sliding-page16-g4", "fp16-page16-g8", "page48-mha"],
)
def test_cute_compile_slow(kw):
    _check_hopper_ptx(_compile_ptx(_problem(**kw)))


@pytest.mark.slow
@pytest.mark.parametrize("compact_grid", [False, True], ids=["dense", "compact"])
@pytest.mark.parametrize("group", [1, 2, 3, 4, 6, 8, 16])
@pytest.mark.parametrize("head_dim", [128, 64])
def test_cute_every_build_keeps_the_wgmma_pipeline(head_dim, group, compact_grid, tmp_path):
    """Every kernel the backend builds (its schedule at each group size, head_dim and grid)
    assembles with no spills and without ptxas serializing its wgmmas (C7511: too few registers
    for the wgmma pipeline, every GEMM then waited on; it came and went chaotically across the
    builds with schedule changes, meta/TUNING.md, thirteenth day, so a check at one group size
    says little of the others). Skips without a CUDA 13 ptxas."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=head_dim, q_per_kv=group, compact_grid=compact_grid)
    _assert_ptxas_clean(_variant_ptx(config), tmp_path)


@pytest.mark.slow
def test_cute_compile_release_per_warp(tmp_path):
    """The per-warp release (in SCHEDULE, passed explicitly here): empty barriers count 8 warps,
    one elected lane arrives."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    cute_fwd_sm90.compile_fwd(
        config, options=f"--enable-tvm-ffi --gpu-arch sm_90a --keep-ptx --dump-dir {tmp_path}", release_per_warp=True
    )
    (name,) = [n for n in os.listdir(tmp_path) if n.endswith(".ptx")]
    with open(os.path.join(tmp_path, name)) as f:
        ptx = f.read()
    _check_hopper_ptx(ptx)
    assert re.search(r"mov\.b32\s+%r\d+, 8;\s+mbarrier\.init", ptx)
    arrives = [m.start() for m in re.finditer(r"mbarrier\.arrive\.shared", ptx)]
    assert arrives and all("elect.sync" in ptx[max(0, a - 400) : a] for a in arrives)


@pytest.mark.slow
@pytest.mark.parametrize(
    "option, stores, shared_b16",
    [
        (dict(), r"st\.global\.v4\.b32|st\.global\.v2\.b64|st\.global\.b128", 1),
        (dict(stmatrix_epilogue=False), r"st\.global\.v4\.b32|st\.global\.v2\.b64|st\.global\.b128", 65),
        (dict(smem_epilogue=False, stmatrix_epilogue=False), r"st\.global\.b32", 1),
    ],
    ids=["stmatrix_epilogue", "smem_epilogue", "accumulator-stores"],
)
def test_cute_compile_epilogue_stores(option, stores, shared_b16):
    """The output stores. The build (``smem_epilogue`` and ``stmatrix_epilogue``, in SCHEDULE):
    O into the Q tile with 8 ``stmatrix`` a thread, then 16-byte global stores and no 4-byte ones.
    Without ``stmatrix_epilogue``: the 64 2-byte shared stores of a thread's O elements instead
    (the one other 2-byte shared store is elsewhere in the kernel). Without either: 4-byte stores
    straight from the accumulator."""
    from inkling_ops.kernels import cute_fwd_sm90, cute_runtime

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    compiled = cute_runtime.compile_with(
        lambda flags: cute_fwd_sm90.compile_fwd(config, options=flags, **option), arch="sm_90a", ptx=True
    )
    ptx = compiled.ptx
    _check_hopper_ptx(ptx, stmatrix=not option)  # 8 stmatrix in the build, none in the others
    assert re.search(stores, ptx)
    assert len(re.findall(r"st\.shared\.b16", ptx)) == shared_b16
    if not option:
        assert not re.search(r"st\.global\.b32", ptx)


def test_cute_stmatrix_epilogue_needs_smem_epilogue():
    """``stmatrix_epilogue`` writes O into the Q tile, so it refuses a build without ``smem_epilogue``."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    with pytest.raises(ValueError, match="stmatrix_epilogue needs smem_epilogue"):
        cute_fwd_sm90.RelAttnFwdSm90(config, smem_epilogue=False, stmatrix_epilogue=True)


@pytest.mark.slow
def test_cute_compile_bias_bulk(tmp_path):
    """``bias_bulk`` (in SCHEDULE since 62e361c's measurement), against the build without it: each
    band tile's bias rows are bulk copies (one a row, at the two staging call sites: the first tile
    and the loop's), each thread arrives on the bias barrier with its row's bytes, the kernel has
    no spills, and the bias's 16-byte ``cp.async`` are gone (34 fewer sites)."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)

    def ptx(**variant):
        return _variant_ptx(config, **variant)

    # lean_mask (in SCHEDULE) needs bias_bulk, so both sides build without it
    # (and bias_tma, which would stage instead of either)
    bulk = ptx(bias_bulk=True, lean_mask=False, bias_tma=False, bias_only_past_e=False)
    chunked = ptx(bias_bulk=False, lean_mask=False, bias_tma=False, bias_only_past_e=False)
    _check_hopper_ptx(bulk, bias_bulk=True, bias_tma=False)
    _check_hopper_ptx(chunked, bias_bulk=False, bias_tma=False)
    assert "cp.async.bulk.shared" not in chunked
    expects = r"mbarrier\.arrive\.expect_tx"
    assert len(re.findall(expects, bulk)) == len(re.findall(expects, chunked)) + 2
    cp_async = r"cp\.async\.cg\.shared\.global"
    assert len(re.findall(cp_async, chunked)) - len(re.findall(cp_async, bulk)) == 2 * 17
    _assert_ptxas_clean(bulk, tmp_path)


def test_cute_tma_bias_width():
    """``bias_tma``'s row width: ``tile_n`` plus 8 distances of slop, widened until one token's box
    of ``G`` rows is whole 128-byte lines."""
    from inkling_ops.kernels.cute_fwd_sm90 import tma_bias_width

    widths = {g: tma_bias_width(128, g) for g in (1, 2, 4, 8, 16, 32)}
    assert widths == {1: 192, 2: 160, 4: 144, 8: 136, 16: 136, 32: 136}
    assert all(g * w * 2 % 128 == 0 and w >= 136 for g, w in widths.items())


def test_cute_compile_odd_rows_paired(tmp_path):
    """``odd_rows_paired`` (G 8, in ``SCHEDULE`` since b33d5ba): each band body reads its first
    row's bias one 32-bit word a column pair (its 32 16-bit loads become 16 word loads a thread),
    keeps the other row's 16-bit loads, spills nothing (ptxas), and is refused by name at other
    group sizes and with boxes of more than one token."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)

    def ptx_of(**variant):
        return _variant_ptx(config, **variant)

    unpaired, paired = ptx_of(odd_rows_paired=False), ptx_of()
    b16, pair = r"ld\.shared\.b16", r"ld\.shared\.v2\.b16"  # ptxas makes the pair one 32-bit LDS
    # four band bodies (the first tile's and the loop's, masked and not) of 64 loads each
    assert len(re.findall(b16, unpaired)) == 256 and len(re.findall(b16, paired)) == 128
    assert len(re.findall(pair, unpaired)) == 0 and len(re.findall(pair, paired)) == 64
    with pytest.raises(ValueError, match="odd_rows_paired needs one token a bias box"):
        cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, "bias_box_rows": 16})
    # the row order is for G 8 alone: the build leaves it out elsewhere, the kernel refuses it
    for group in (2, 4, 16):
        other = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group)
        assert "odd_rows_paired" not in cute_fwd_sm90.schedule(other)
        with pytest.raises(ValueError, match=f"odd_rows_paired needs q_per_kv 8 .*; it is {group}"):
            cute_fwd_sm90.RelAttnFwdSm90(other, **{**cute_fwd_sm90.schedule(other), "odd_rows_paired": True})
        with pytest.raises(ValueError, match=f"odd_rows_paired needs q_per_kv 8 .*; it is {group}"):
            _variant_ptx(other, odd_rows_paired=True)
    _assert_ptxas_clean(paired, tmp_path)


def _bias_load_wavefronts(kernel, offset: int, m_block: int, n0: int) -> list[int]:
    """Per consumer warp of M tile ``m_block``, the shared-memory wavefronts of its bias loads over
    one band tile at key ``n0``, from the kernel's own formulas (the rows' tokens, their boxes'
    slice starts, the buffer's row width), as ``_band_scores`` reads them: lane ``l`` holds rows
    ``8 i + l / 4`` of its warp's 16 and columns ``2 (l % 4) + 8 k + b``; with ``odd_rows_paired``
    rows ``i = 0`` read each column pair as one 32-bit word. A load takes as many wavefronts as the most distinct words one bank holds.
    Asserts every element read lies inside its row and every paired row has an odd ``q_abs``."""
    width, paired = kernel.bias_width, kernel.odd_rows_paired
    per_warp = []
    for warp in range(kernel.tile_m // 16):
        waves = 0
        for i in range(2):
            for k in range(kernel.tile_n // 8):
                for b in range(1 if paired and i == 0 else 2):
                    banks: dict[int, set[int]] = {}
                    for lane in range(32):
                        r = 16 * warp + 8 * i + lane // 4
                        qa = offset + kernel._token(m_block * kernel.tile_m + r, offset)
                        q_box = qa - (r // kernel.group) % kernel.box_tokens  # the box's first token's
                        d0 = kernel._slice_start(q_box, n0)
                        element = qa - n0 - (2 * (lane % 4) + 8 * k + b) - d0
                        if paired and i == 0:
                            assert qa % 2 == 1, (offset, m_block, r)
                            element -= 1
                        assert 0 <= element and element + (paired and i == 0) < width, (offset, m_block, r, element)
                        word = (r * width + element) // 2
                        banks.setdefault(word % 32, set()).add(word)
                    waves += max(len(words) for words in banks.values())
        per_warp.append(waves)
    return per_warp


def test_cute_bias_load_wavefronts():
    """The build's bias loads, by the kernel's own formulas: a warp's band tile takes 48
    wavefronts at ``G`` 8 (``odd_rows_paired``: 48 loads, 16 of them 32-bit words, one wavefront
    each; 64 without the pairing) and 96 at ``G`` 4 (8-row boxes: 1.5 a load, the two tokens of a
    box half a word apart; meta/tools/bias_banks.py), every element read inside its row and every
    paired row's ``q_abs`` odd."""
    from inkling_ops.kernels import cute_fwd_sm90

    def kernel(group, **variant):
        config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group)
        return cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.schedule(config), **variant})

    paired, unpaired, four = kernel(8), kernel(8, odd_rows_paired=False), kernel(4)
    assert paired.odd_rows_paired and four.box_rows == 8
    for offset in (0, 1, 2, 5, 100, 1023):
        for m_block in (0, 1, 3):
            for n0 in (0, 128, 1024):
                if offset + m_block * 16 < n0:
                    continue
                assert _bias_load_wavefronts(paired, offset, m_block, n0) == [48] * 8
                assert _bias_load_wavefronts(unpaired, offset, m_block, n0) == [64] * 8
    assert sum(_bias_load_wavefronts(four, 5, 1, 128)) / 8 == 96


def test_cute_tma_bias_width_box_rows():
    """With ``bias_box_rows``, a box's later tokens read from its first token's slice start: every
    element any of its rows reads lies inside the row, and the box is whole 128-byte lines."""
    from inkling_ops.kernels import cute_fwd_sm90
    from inkling_ops.kernels.cute_fwd_sm90 import tma_bias_width

    tile_n = 128
    for group in (1, 2, 4, 8, 16):
        rows = max(8, group)
        width = tma_bias_width(tile_n, group, box_rows=rows)
        assert rows * width * 2 % 128 == 0
        config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group)
        kernel = cute_fwd_sm90.RelAttnFwdSm90(config, **cute_fwd_sm90.schedule(config))
        assert kernel.bias_width == width
        for q_first in range(tile_n, tile_n + 16):  # every start rounding, n0 = 0
            d0 = kernel._slice_start(q_first, 0)  # the kernel's own formula, producer and consumers
            reads = [q_first + t - c - d0 for t in range(rows // group) for c in range(tile_n)]
            assert 0 <= min(reads) and max(reads) < width, (group, width, q_first)
    assert {g: tma_bias_width(128, g, box_rows=8) for g in (1, 2, 4, 8)} == {1: 144, 2: 144, 4: 136, 8: 136}
    with pytest.raises(ValueError, match="box_rows is 6"):
        tma_bias_width(128, 4, box_rows=6)


def test_cute_compile_bias_box_rows(tmp_path):
    """``bias_box_rows=8`` (in ``SCHEDULE`` since 70f3e1b) stages 8-row bias boxes below ``G`` 8
    (the bytes each announces) with the band bodies' 16-bit loads unchanged in number and no
    spills (ptxas), is the build itself at ``G`` 8, and refuses what it cannot serve, by name."""
    from inkling_ops.kernels import cute_fwd_sm90

    def ptx_of(group, **variant):
        return _variant_ptx(cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group), **variant)

    def box_bytes(ptx):
        # the transaction bytes a box's first row announces: selp.b32 %r, BYTES, 0, %p
        return set(re.findall(r"selp\.b32\s+%r\d+, (\d+), 0,", ptx))

    b16 = r"ld\.shared\.[bu]16"
    one_token_boxes, boxed = ptx_of(4, bias_box_rows=0), ptx_of(4)  # the build: 8 rows a box
    assert "1152" in box_bytes(one_token_boxes) and "2176" not in box_bytes(one_token_boxes)  # 4 x 144 x 2
    assert "2176" in box_bytes(boxed) and "1152" not in box_bytes(boxed)  # 8 rows x 136 x 2 bytes
    assert len(re.findall(b16, boxed)) == len(re.findall(b16, one_token_boxes)) >= 128
    assert "2304" in box_bytes(ptx_of(1))  # 8 rows x 144 x 2 bytes
    assert ptx_of(8, bias_box_rows=0) == ptx_of(8)
    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=4)
    for bad in (dict(bias_box_rows=6), dict(bias_box_rows=64), dict(bias_box_rows=-8),
                dict(bias_tma=False, bias_box_rows=8)):
        with pytest.raises(ValueError, match="bias_box_rows is"):
            cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, **bad})
    for bad in (True, 8.0):
        with pytest.raises(TypeError, match="bias_box_rows is"):
            cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.SCHEDULE, "bias_box_rows": bad})
    _assert_ptxas_clean(boxed, tmp_path)


def test_cute_bias_tma_needs_group_dividing_32(monkeypatch):
    """The kernel refuses ``bias_tma`` where a token's rows could cross a producer warp's; the
    backend's schedule then leaves it off (bias_bulk stages the same values)."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=3)
    with pytest.raises(ValueError, match="q_per_kv to divide 32"):
        cute_fwd_sm90.RelAttnFwdSm90(config, bias_tma=True)
    monkeypatch.setitem(cute_fwd_sm90.SCHEDULE, "bias_tma", True)
    assert cute_fwd_sm90.schedule(config)["bias_tma"] is False
    eight = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    assert cute_fwd_sm90.schedule(eight)["bias_tma"] is True


@pytest.mark.parametrize(("group", "width", "rows"), [(8, 136, 8), (4, 136, 8)])
def test_cute_compile_bias_tma(group, width, rows, tmp_path):
    """``bias_tma``: a band tile's bias is one 3-D TMA box of ``rows`` rows (``bias_box_rows``: a
    token's G heads, or two tokens' at G 4; 32 / rows a producer warp, at the two staging call
    sites), the box's bytes in one arrival a box, no bulk copies of rows, the descriptor
    prefetched with K's and V's, and no spills."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group)
    ptx = _variant_ptx(config, bias_tma=True)
    boxes = re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes", ptx)
    assert len(boxes) == 2  # one a staging site, in a loop of 32 / rows boxes
    assert "cp.async.bulk.shared" not in ptx
    # a box's first row's arrival carries the box's bytes, once at each staging site
    assert len(re.findall(rf"selp\.b32\s+%r\d+, {rows * width * 2}, 0,", ptx)) == 2
    assert ptx.count("prefetch.tensormap") == 3
    # the zeros past E are the TMA unit's fill: no generic stores to fence before the next box
    bulk = _variant_ptx(config, bias_tma=False, lean_mask=False, bias_only_past_e=False)
    fence = r"fence\.proxy\.async\.shared::cta"
    assert len(re.findall(fence, ptx)) == len(re.findall(fence, bulk))
    _assert_ptxas_clean(ptx, tmp_path)


def _ptxas() -> str | None:
    """ptxas on PATH, else the one Triton ships (``triton/backends/nvidia/bin/ptxas``), else None."""
    found = shutil.which("ptxas")
    if found is not None:
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    return bundled if os.access(bundled, os.X_OK) else None


def _assert_ptxas_clean(ptx: str, tmp_path) -> None:
    """Assemble ``ptx`` with ptxas (:func:`_ptxas`) and fail on any spill of any function. Skips
    the test without ptxas or with a ptxas older than the PTX's version (the H200 image's ptxas
    exited 255 on the DSL's PTX at 52b85a0, ``meta/logs/gpu_cute_52b85a0.log``; an older ptxas
    refuses a newer ``.version`` that way): callers call it after their other checks. Any other
    ptxas error fails the test, and so does its warning that it serialized the wgmmas (C7511: too
    few registers for the wgmma pipeline, every GEMM then waited on)."""
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("no ptxas (neither on PATH nor Triton's): the PTX checks ran, the ptxas check did not")
    (tmp_path / "kernel.ptx").write_text(ptx)
    result = subprocess.run(
        [ptxas, "-arch=sm_90a", "-v", str(tmp_path / "kernel.ptx"), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode and "Unsupported .version" in result.stderr:
        pytest.skip(f"{ptxas} is older than the DSL's PTX: the PTX checks ran, the ptxas check did not")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "wgmma.mma_async instructions are serialized" not in result.stderr, result.stderr[-2000:]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.stderr)
    assert spills, result.stderr
    assert all(a == "0" and b == "0" for a, b in spills), spills


def test_cute_compile_tma_kv(tmp_path):
    """The ``tma_kv`` option (in SCHEDULE since 8a85f3c; passed explicitly here): whole K/V tiles by TMA page copies (a (128, 128)
    tile is two 64-column boxes of the 128-byte swizzle; three call sites: the first K, the
    loop's K and V), each stage's full barrier set by one ``arrive.expect_tx`` of the tile's bytes
    plus an arrive of the other 127 producer threads, the descriptors prefetched; the tile that
    holds kv_len is still gathered (the cp.async K/V gather is all there), and ptxas reports no
    spills."""
    from inkling_ops.kernels import cute_fwd_sm90, cute_runtime

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    compiled = cute_runtime.compile_with(
        lambda flags: cute_fwd_sm90.compile_fwd(config, options=flags, tma_kv=True), arch="sm_90a", ptx=True
    )
    ptx = compiled.ptx
    _check_hopper_ptx(ptx)  # includes the 16-byte cp.async gather of K/V, Q and the bias
    tma = re.findall(r"cp\.async\.bulk\.tensor\.4d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes", ptx)
    assert len(tma) == 6
    tile_bytes = config.tile_n * config.head_dim * 2
    expects = re.findall(rf"mov\.b32\s+%r\d+, {tile_bytes};\s+mbarrier\.arrive\.expect_tx\.shared\.b64", ptx)
    assert len(expects) == 3
    assert len(re.findall(r"mov\.b32\s+%r\d+, 127;\s+mbarrier\.arrive\.shared\.b64", ptx)) == 3
    # K's and V's descriptors, and the bias box's with bias_tma (in SCHEDULE since its A/B)
    assert ptx.count("prefetch.tensormap") == 2 + cute_fwd_sm90.schedule(config)["bias_tma"]
    _assert_ptxas_clean(ptx, tmp_path)


def test_cute_shared_memory_fits_hopper():
    """Q, two stages of K and of V and the bias buffer fit the 227 KB a Hopper CTA may use."""
    from inkling_ops.kernels import cute_fwd_sm90

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8)
    barriers = 1024 + 8 * 2 * (2 * cute_fwd_sm90.STAGES + 1)  # barriers first, then 1024-byte alignment
    assert config.smem_bytes() + barriers <= 227 * 1024
    assert config.num_threads == 384 and config.num_mma_threads == 256
    # the build at every group size: bias_tma's 8-row boxes have wider rows at G 1 and 2 (144)
    for group in (1, 2, 3, 4, 8, 16, 32, 64):
        config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=group)
        kernel = cute_fwd_sm90.RelAttnFwdSm90(config, **cute_fwd_sm90.schedule(config))
        buffer = config.smem_bytes(kernel.bias_width) + (kernel.bias_rows - config.tile_m) * kernel.bias_width * 2
        assert buffer + barriers <= 227 * 1024, (group, kernel.bias_width, buffer)
        width = cute_fwd_sm90.tma_bias_width(128, group, box_rows=max(8, group)) if 32 % group == 0 else 136
        assert kernel.bias_width == width


def test_cute_backend_refusals():
    backend = planning.get_backend("cute")
    assert backend.why_not(_problem(), HOPPER) is None
    assert "sm_80" in backend.why_not(_problem(), DeviceFacts(arch="sm_80", num_sms=108))
    assert backend.why_not(_problem()._replace(head_dim=64), HOPPER) is None
    assert "head_dim 256" in backend.why_not(_problem()._replace(head_dim=256), HOPPER)
    assert "float32" in backend.why_not(_problem(dtype=torch.float32), HOPPER)
    assert "multiple of 8" in backend.why_not(_problem(extent=20), HOPPER)
    assert "num_splits 4" in backend.why_not(_problem()._replace(num_splits=4), HOPPER)
    assert backend.split_policy is None
    # chosen by default only on the classes of cute_backend.DEFAULT_CASES: tests/test_cute_dispatch.py
    assert "not one it is preferred on" in backend.why_not_default(_problem()._replace(max_seqlen_q=1), HOPPER)


def test_cute_keys_share_a_compiled_config():
    """Page size, window, extent and the max_seqlen_q bucket are runtime arguments: one configuration
    (of one grid: these calls are of one request, which never takes the compact grid)."""
    a = planning.plan(_problem(window=511, extent=512), HOPPER, backend="cute")
    b = planning.plan(_problem(window=255, extent=256)._replace(max_seqlen_q=7), HOPPER, backend="cute")
    assert a.key != b.key and cute_backend.fwd_config(a.key) == cute_backend.fwd_config(b.key)
    c = planning.plan(_problem(page=128), HOPPER, backend="cute")
    assert c.key.page_size != a.key.page_size and cute_backend.fwd_config(c.key) == cute_backend.fwd_config(a.key)
    assert a.launch == cute_backend.fwd_config(a.key) and a.workspace_bytes == 0


def test_cute_ws_bench_variants_are_kernel_options():
    """Every variant ``meta/tools/cute_ws_bench.py`` times (and every one its cases name) is a
    valid set of :class:`RelAttnFwdSm90` options over ``schedule(config)`` and :class:`CuteFwdConfig` fields
    (the bench's ``CONFIG_FIELDS``), so a deleted option cannot linger in the bench (no compile:
    the constructors check them)."""
    import importlib.util
    import pathlib

    from inkling_ops.kernels import cute_fwd_sm90

    path = pathlib.Path(__file__).resolve().parents[1] / "meta" / "tools" / "cute_ws_bench.py"
    spec = importlib.util.spec_from_file_location("cute_ws_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, options in bench.VARIANTS.items():
        fields = {k: v for k, v in options.items() if k in bench.CONFIG_FIELDS}
        options = {k: v for k, v in options.items() if k not in bench.CONFIG_FIELDS}
        try:
            config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=128, q_per_kv=8, **fields)
            cute_fwd_sm90.RelAttnFwdSm90(config, **{**cute_fwd_sm90.schedule(config), **options})
        except TypeError as e:
            pytest.fail(f"cute_ws_bench variant {name!r} ({options}) is not a set of kernel options: {e}")
    named = {v for variants in bench.VARIANT_CASES.values() for v in variants}
    assert named <= set(bench.VARIANTS), f"VARIANT_CASES names unknown variants: {sorted(named - set(bench.VARIANTS))}"
    assert set(bench.VARIANT_CASES) <= set(bench.CASES)
    assert bench.UNCHECKED <= set(bench.VARIANTS)


def test_cute_build_matrix_tool_reports_one_build(capsys, monkeypatch):
    """meta/tools/cute_build_matrix.py: one JSON row a build with ptxas's registers, spills and
    C7511 verdict (the build is pipelined with no spills), and the caller's CUTE_DSL_KEEP
    untouched after it. Skips without ptxas."""
    if shutil.which("ptxas") is None:
        pytest.skip("no ptxas")
    from lab_tools import load_tool

    monkeypatch.setenv("CUTE_DSL_KEEP", "")
    monkeypatch.delenv("CUTE_DSL_DUMP_DIR", raising=False)
    assert load_tool("cute_build_matrix").main(["--groups", "8", "--head-dims", "128", "--grids", "dense", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = json.loads(lines[0])
    if "Unsupported .version" in row.get("error", ""):
        pytest.skip("a ptxas older than the DSL's PTX")
    assert (row["head_dim"], row["q_per_kv"], row["grid"]) == (128, 8, "dense")
    assert row["registers"] > 0 and row["spill_bytes"] == 0 and row["c7511"] is False, row
    assert lines[-1] == "0 build(s) spilled, serialized or failed"
    assert os.environ["CUTE_DSL_KEEP"] == "" and "CUTE_DSL_DUMP_DIR" not in os.environ
