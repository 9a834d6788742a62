"""A decoder layer calling our op (tests/aoti_probe.py: vLLM's attention sublayer writing the paged
cache and ``out``, in a residual block with an MLP) through ``torch.export`` and AOTInductor.

- ``torch.export`` with a dynamic token count; the program saved to a .pt2 and loaded back runs
  at other token counts (a longer prefill chunk, a single decode token) like eager: same output,
  same K/V written into the cache, same ``out``. (tests/test_compile.py exports a bare
  projection + op module, with ``max_seqlen_q`` dynamic too, and checks it bitwise.)
- An AOTInductor package of that program (``aoti_compile_and_package``, ``aoti_load_package``)
  runs at the same token counts like eager. On CPU that is the CI test (about 40 s, most of it the
  C++ compile). On CUDA the package is built and run in a process of its own, after a control
  (the same round trip of a module without our op) in another: torch 2.11 on the H200 segfaults
  inside ``aoti_load_package`` even for the control, and the test then skips with the control's
  result as its reason.

AOTInductor takes tensor inputs only (an int input is compiled as the export's constant), so the
layer is exported with a fixed ``max_seqlen_q`` bound (``aoti_probe.MAX_SEQLEN_Q``) that every
step passes, as a serving engine passes its ``max_num_batched_tokens``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aoti_probe as probe

ROOT = Path(__file__).resolve().parents[1]
TOKEN_COUNTS = [20, 1]  # besides the export's example, 11
FP32 = probe.TOLERANCES[torch.float32]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _ops(program: torch.export.ExportedProgram) -> list:
    return [n.target for n in program.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("window", [-1, 15], ids=["global", "sliding"])
def test_decoder_layer_export_save_load_dynamic_tokens(window, tmp_path):
    layer, caches = probe.make_layer("cpu", torch.float32, window=window), probe.make_caches("cpu", torch.float32)
    program = probe.export_layer(layer, probe.make_step(11, caches))
    assert _ops(program).count(torch.ops.inkling.rel_attn_out.default) == 1
    x = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert isinstance(x.meta["val"].shape[0], torch.SymInt)  # the token count stayed symbolic

    path = tmp_path / "decoder_layer.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path).module()
    for n in [11, *TOKEN_COUNTS]:
        probe.check_against_eager(loaded, layer, probe.make_step(n, caches), tol=FP32)


def test_exported_layer_refuses_another_max_seqlen_q():
    """The bound is part of the program: a step passing another value is refused, not run."""
    layer, caches = probe.make_layer("cpu", torch.float32), probe.make_caches("cpu", torch.float32)
    loaded = probe.export_layer(layer, probe.make_step(11, caches)).module()
    step = probe.make_step(11, caches) | dict(max_seqlen_q=probe.MAX_SEQLEN_Q * 2)
    with pytest.raises(Exception, match=f"max_seqlen_q == {probe.MAX_SEQLEN_Q}"):
        with torch.no_grad():
            loaded(**step)


def test_decoder_layer_aoti_package_on_cpu(tmp_path):
    layer, caches = probe.make_layer("cpu", torch.float32, window=15), probe.make_caches("cpu", torch.float32)
    program = probe.export_layer(layer, probe.make_step(11, caches))
    loaded = probe.aoti_package(program, str(tmp_path / "decoder_layer_aoti.pt2"))
    for n in [11, *TOKEN_COUNTS]:
        probe.check_against_eager(loaded, layer, probe.make_step(n, caches), tol=FP32)


def _probe(what: str, device: str) -> tuple[int, str, str]:
    """Run ``tests/aoti_probe.py WHAT DEVICE`` in its own process: (exit code, a one-line account
    of how it ended, the tail of its stderr)."""
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", str(ROOT / "tests" / "aoti_probe.py"), what, device],
                          env=env, capture_output=True, text=True, timeout=540)  # fmt: skip
    if proc.returncode < 0:
        status = f"was killed by {signal.Signals(-proc.returncode).name}"
    else:
        status = f"exited with {proc.returncode}"
    lines = (proc.stdout if proc.returncode == 0 else proc.stderr).strip().splitlines()
    summary = f"aoti_probe.py {what} {device}: the process {status}" + (f" ({lines[-1][:300]})" if lines else "")
    return proc.returncode, summary, proc.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decoder_layer_aoti_package_on_cuda():
    """bf16 through the Triton kernels; skipped when AOTInductor fails on a module without our op."""
    rc, control, _ = _probe("control", "cuda")
    if rc != 0:
        pytest.skip(f"AOTInductor itself fails on this machine (the control, without our op): {control}")
    rc, result, stderr = _probe("layer", "cuda")
    assert rc == 0, f"{result}\n{stderr}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decoder_layer_export_save_load_on_cuda(tmp_path):
    layer, caches = probe.make_layer("cuda", torch.bfloat16), probe.make_caches("cuda", torch.bfloat16)
    program = probe.export_layer(layer, probe.make_step(11, caches))
    path = tmp_path / "decoder_layer_cuda.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path).module()
    for n in [11, *TOKEN_COUNTS]:
        probe.check_against_eager(loaded, layer, probe.make_step(n, caches), tol=probe.TOLERANCES[torch.bfloat16])
