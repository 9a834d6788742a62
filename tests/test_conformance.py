"""Conformance: every registered backend on the one case matrix (tests/conformance_cases.py).

Backends come from the dispatcher (``inkling_ops.backend_names()``), so a new backend is tested
by registering it. Each test forces its backend (``backend=name``); a backend that cannot run a
case (``is_available``, ``device_types``, ``why_not``) is skipped with its reason. Every backend
is compared with the fp32 reference backend, except the reference itself, which is compared
with the float64 brute force of tests/brute_force.py.

On CPU the cases are small and fp32 (Triton runs under TRITON_INTERPRET=1, set by conftest.py);
on a CUDA device (marker ``gpu``) they are bf16 at Inkling's sizes, at each case's page sizes
(16 / 64 / 128, or 24 / 48 / 96) with separate and packed K/V. Every case checks that NaN / inf planted in unused pages and
block-table entries does not reach ``out`` and that rows past cu_seqlens_q[-1] stay untouched.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import subprocess
import sys

import pytest
import torch
from brute_force import rel_attn_brute_force
from conformance_cases import BY_ID, CASES, CPU_FORCED_SPLITS

import inkling_ops
from inkling_ops import dispatch
from inkling_ops.heuristics import bucket_max_seqlen_q
from inkling_ops.metadata import request_spans
from inkling_ops.testing import make_case

BACKENDS = inkling_ops.backend_names()
REFERENCE = "reference"
#: the GPU form's head_dim: 128 (Inkling's); INKLING_TEST_GPU_HEAD_DIM runs the GPU matrix at
#: another one (INKLING_TEST_GPU_HEAD_DIM=64: the CuTe kernel's other head_dim)
CPU_HEAD_DIM, GPU_HEAD_DIM = 32, int(os.environ.get("INKLING_TEST_GPU_HEAD_DIM", "128"))
#: fp32 backends against the fp32 reference
CPU_TOL = dict(atol=2e-5, rtol=2e-5)
#: the fp32 reference against the float64 brute force (as tests/test_reference.py)
ORACLE_TOL = dict(atol=1e-5, rtol=1e-5)
#: bf16 against fp32 or float64 (vLLM's tolerance for bf16 kernels)
GPU_TOL = dict(atol=2e-2, rtol=2e-2)
SENTINEL = 7.0
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_ROOT = os.path.dirname(_TESTS_DIR)

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
#: marks of a parameter that runs on the CUDA device
GPU_MARKS = [pytest.mark.gpu, requires_cuda]


def cannot_run(name: str, case) -> str | None:
    """Why backend ``name`` cannot run ``case`` (None: it can), in the dispatcher's own terms."""
    backend = dispatch.get_backend(name)
    reason = backend.is_available()
    if reason is None and case.q.device.type not in backend.device_types:
        reason = f"it runs on {backend.device_types}, not {case.q.device.type}"
    return reason or backend.why_not(case.problem(), dispatch.device_facts(case.q.device))


def _require(name: str, case) -> None:
    reason = cannot_run(name, case)
    if reason is not None:
        pytest.skip(f"backend {name!r} cannot run this case: {reason}")


def _splits(name: str, forced: tuple[int, ...], q_lens: list[int]) -> tuple[int, ...]:
    """The heuristic's split count (0), plus ``forced`` ones where backend ``name`` splits: its
    split policy splits calls whose max_seqlen_q bucket is at most ``max_split_q``."""
    policy = dispatch.get_backend(name).split_policy
    if policy is None or bucket_max_seqlen_q(max(q_lens)) > policy.max_split_q:
        return (0,)
    return (0, *forced)


def _check(case, name: str, num_splits: int, want: torch.Tensor, tol: dict) -> None:
    """Run backend ``name`` through the out variant and compare the request rows with ``want``."""
    n = sum(case.q_lens)
    out = torch.full_like(case.q, SENTINEL)
    returned = inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend=name, num_splits=num_splits, out=out)
    assert returned is out
    got = out[:n].to(want.device)
    finite = bool(torch.isfinite(got).all())
    assert finite, "NaN/inf garbage from unused pages or table entries reached out"
    torch.testing.assert_close(got.to(want.dtype), want[:n], **tol)
    assert torch.all(out[n:] == SENTINEL), "rows past cu_seqlens_q[-1] were written"


def _brute_force(case) -> torch.Tensor:
    """The float64 oracle, on CPU copies of the case (its tensors and its metadata)."""
    on_cpu = case.to("cpu")
    return rel_attn_brute_force(*on_cpu.args(), **on_cpu.kwargs())


def _reference_fp32(case) -> torch.Tensor:
    """The reference backend on fp32 copies of the inputs (same device)."""
    return case.reference_fp32()


def _expected(case, backend: str, gpu: bool) -> tuple[torch.Tensor, dict]:
    """What ``backend`` must produce on ``case``, and the tolerance: the brute force for the
    reference backend, the fp32 reference for every other."""
    if backend == REFERENCE:
        return _brute_force(case), GPU_TOL if gpu else ORACLE_TOL
    return _reference_fp32(case), GPU_TOL if gpu else CPU_TOL


# --------------------------------------------------------------------------------------------------
# The matrix on CPU: fp32, small shapes, each case at its own page size and K/V layout
# --------------------------------------------------------------------------------------------------


@functools.cache
def cpu_case(case_id: str):
    seed = [c.id for c in CASES].index(case_id)
    generator = torch.Generator().manual_seed(seed)
    return make_case(**BY_ID[case_id].cpu, head_dim=CPU_HEAD_DIM, extra_tokens=2, generator=generator)


@functools.cache
def _cpu_expected(case_id: str, oracle: bool) -> tuple[torch.Tensor, dict]:
    """Cached per case: the brute force (oracle) or the fp32 reference, with its tolerance."""
    return _expected(cpu_case(case_id), REFERENCE if oracle else "", gpu=False)


CPU_PARAMS = [
    pytest.param(case.id, name, s, id=f"{case.id}-{name}-splits{s}")
    for case in CASES
    for name in BACKENDS
    for s in _splits(name, CPU_FORCED_SPLITS, case.cpu["q_lens"])
]


@pytest.mark.parametrize("case_id,backend,num_splits", CPU_PARAMS)
def test_matrix_cpu(case_id, backend, num_splits):
    case = cpu_case(case_id)
    _require(backend, case)
    want, tol = _cpu_expected(case_id, backend == REFERENCE)
    _check(case, backend, num_splits, want, tol)


# --------------------------------------------------------------------------------------------------
# The matrix on a CUDA device: bf16, Inkling's sizes, every page size of the case, separate and
# packed K/V. The reference against the brute force is slow at these sizes: it runs at one page
# size and layout per case, marked slow.
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def gpu_case(case_id: str, page_size: int, packed_kv: bool):
    return make_case(
        **BY_ID[case_id].gpu, head_dim=GPU_HEAD_DIM, page_size=page_size, packed_kv=packed_kv, dtype=torch.bfloat16,
        device="cuda", extra_tokens=3,
    )  # fmt: skip


@functools.lru_cache(maxsize=4)
def _gpu_expected(case_id: str, page_size: int, packed_kv: bool, oracle: bool) -> tuple[torch.Tensor, dict]:
    return _expected(gpu_case(case_id, page_size, packed_kv), REFERENCE if oracle else "", gpu=True)


GPU_PARAMS = [
    pytest.param(
        case.id, page, packed, name, s, id=f"{case.id}-page{page}-{'packed' if packed else 'separate'}-{name}-splits{s}",
        marks=[pytest.mark.slow] if name == REFERENCE else [],
    )
    for case in CASES
    for page in case.gpu_pages
    for packed in (False, True)
    for name in BACKENDS
    for s in _splits(name, case.gpu_splits, case.gpu["q_lens"])
    # the reference's paging and layouts are covered on CPU; on the GPU one page size and layout
    if name != REFERENCE or (page == case.gpu_pages[0] and not packed)
]


@pytest.mark.parametrize("case_id,page_size,packed_kv,backend,num_splits", GPU_PARAMS)
@pytest.mark.gpu
@requires_cuda
def test_matrix_gpu(case_id, page_size, packed_kv, backend, num_splits):
    case = gpu_case(case_id, page_size, packed_kv)
    _require(backend, case)
    want, tol = _gpu_expected(case_id, page_size, packed_kv, backend == REFERENCE)
    _check(case, backend, num_splits, want, tol)


# --------------------------------------------------------------------------------------------------
# The bias matters: a backend that ignored rel_logits would pass no case above only by luck;
# here it fails outright.
# --------------------------------------------------------------------------------------------------

BIAS_DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="gpu", marks=GPU_MARKS),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("device", BIAS_DEVICES)
def test_bias_matters(device, backend):
    """Zeroed and negated rel_logits each move the output far beyond the tolerance, and the
    backend still matches the oracle on each."""
    if device == "cpu":
        case = make_case(q_lens=[8, 1], kv_lens=[40, 20], rel_extent=16, head_dim=CPU_HEAD_DIM, extra_tokens=1)
        min_change = 1e-2
    else:
        case = make_case(q_lens=[64, 1], kv_lens=[1024, 300], num_heads=8, num_kv_heads=1, rel_extent=1024,
                         head_dim=GPU_HEAD_DIM, dtype=torch.bfloat16, device=device, extra_tokens=1)  # fmt: skip
        min_change = 5e-2
    _require(backend, case)
    n = sum(case.q_lens)
    outputs = []
    for rel_logits in (case.rel_logits, torch.zeros_like(case.rel_logits), -case.rel_logits):
        variant = dataclasses.replace(case, rel_logits=rel_logits)
        want, tol = _expected(variant, backend, gpu=device != "cpu")
        _check(variant, backend, 0, want, tol)
        outputs.append(inkling_ops.rel_attn(*variant.args(), **variant.kwargs(), backend=backend)[:n].float())
    for changed, what in ((outputs[1], "zeroing"), (outputs[2], "negating")):
        assert (changed - outputs[0]).abs().max() > min_change, f"{what} rel_logits did not change the output"


# --------------------------------------------------------------------------------------------------
# Invalid metadata (unchecked mode): clamped, in bounds, in a subprocess so that a crash fails
# this test by name instead of killing pytest.
# --------------------------------------------------------------------------------------------------


def _clamped_expectation(case) -> torch.Tensor:
    """``out`` as inkling_ops/metadata.py's clamping rules define it: request by request, the
    float64 brute force on the clamped (valid) metadata; zeros for rows of a request without
    keys; SENTINEL on rows no clamped request owns."""
    num_blocks, page_size = case.key_cache.shape[:2]
    spans = request_spans(
        case.cu_seqlens_q.tolist(), case.cache_seqlens.tolist(), case.q.shape[0], case.block_table.shape[1] * page_size
    )
    want = torch.full(case.q.shape, SENTINEL, dtype=torch.float64)
    for b, span in enumerate(spans):
        rows = slice(span.start, span.start + span.q_len)
        want[rows] = 0.0
        if span.q_len == 0 or span.kv_len == 0:
            continue
        want[rows] = rel_attn_brute_force(
            case.q[rows], case.key_cache, case.value_cache, case.block_table[b : b + 1].clamp(0, num_blocks - 1),
            torch.tensor([span.kv_len], dtype=torch.int32), torch.tensor([0, span.q_len], dtype=torch.int32),
            case.rel_logits[rows], softmax_scale=case.softmax_scale, window_size=case.window_size,
        )  # fmt: skip
    return want


INVALID_DEVICES = [
    pytest.param("cpu", torch.float32, 32, id="cpu"),
    pytest.param("cuda", torch.bfloat16, 128, id="gpu", marks=GPU_MARKS),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("device,dtype,head_dim", INVALID_DEVICES)
def test_invalid_metadata_stays_in_bounds(device, dtype, head_dim, backend, tmp_path):
    """Block ids out of range and negative, cache_seqlens past the block table and negative,
    cu_seqlens_q decreasing and overlong: the backend (in its own process) exits normally and
    writes exactly what the clamped metadata defines, finite, and nothing else."""
    import invalid_metadata_probe as probe

    cases = probe.invalid_cases(dtype, head_dim)
    _require(backend, next(iter(cases.values())).to(device))
    path = tmp_path / "outs.pt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_REPO_ROOT, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, os.path.join(_TESTS_DIR, "invalid_metadata_probe.py"), backend, device, str(path)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if result.returncode < 0:
        exit_status = f"was killed by {signal.Signals(-result.returncode).name}"
    else:
        exit_status = f"exited with {result.returncode}"
    assert result.returncode == 0, (
        f"backend {backend!r} on invalid metadata: the process {exit_status}\n{result.stderr[-4000:]}"
    )
    outs = torch.load(path)
    tol = ORACLE_TOL if dtype == torch.float32 else GPU_TOL
    for name, case in cases.items():
        got = outs[name].double()
        finite = bool(torch.isfinite(got).all())
        assert finite, f"{name}: non-finite output (an out-of-bounds read?)"
        torch.testing.assert_close(got, _clamped_expectation(case), **tol, msg=lambda m, name=name: f"{name}: {m}")
