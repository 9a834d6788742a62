"""The docs' examples, run as written there: docs/semantics.md's worked example, and
docs/serving.md's docs/examples/serving_step.py (CPU here; its CUDA-graph replays on a GPU)."""

import importlib.util
import math
import re
from pathlib import Path

import pytest
import torch

import inkling_ops

SERVING_EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "serving_step.py"


def test_worked_example_from_docs():
    q = torch.ones(2, 1, 1)
    key_cache = torch.zeros(1, 4, 1, 1)
    value_cache = torch.tensor([1.0, 2.0, 3.0, 0.0]).view(1, 4, 1, 1)
    rel_logits = torch.tensor([[math.log(2), 0.0]] * 2).view(2, 1, 2)
    out = inkling_ops.rel_attn(
        q, key_cache, value_cache,
        block_table=torch.tensor([[0]], dtype=torch.int32),
        cache_seqlens=torch.tensor([3], dtype=torch.int32),
        cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32),
        rel_logits=rel_logits, max_seqlen_q=2, softmax_scale=1.0,
    )  # fmt: skip
    torch.testing.assert_close(out.flatten(), torch.tensor([5 / 3, 9 / 4]))



def _serving_example():
    spec = importlib.util.spec_from_file_location("serving_step_example", SERVING_EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_serving_example_on_cpu(capsys):
    assert _serving_example().main(["--steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "warmup:" in printed and "step 1: eager" in printed and printed.rstrip().endswith("ok")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_serving_example_graph_replays_on_cuda(capsys):
    assert _serving_example().main(["--device", "cuda", "--steps", "3"]) == 0
    printed = capsys.readouterr().out
    # the decode steps run on Triton; the warmup summary names every backend the configuration's
    # calls reach ("cute+triton" where the CuTe runtime is installed: its prefill goes there)
    backends = re.search(r"compile keys on backend '([a-z+]+)'", printed)
    assert backends and "triton" in backends.group(1).split("+"), printed
    assert "step 2: graph replay" in printed


def test_architecture_backend_example_plugs_into_the_dispatcher(monkeypatch):
    """docs/architecture.md's backend example, as written there: registered before Triton, it is
    the default choice for a CUDA call it accepts (the dispatcher calls its methods with the
    arguments it passes the built-in backends), and a head_dim it refuses names its reason."""
    from inkling_ops import planning
    from inkling_ops.compile_keys import DeviceFacts
    from inkling_ops.testing import make_case

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class MyBackend" in b)
    # the registration is undone after the test; CuTe, ahead of Triton, is left out so that the
    # example's place (before Triton) decides the default choice whatever CuTe's rule says
    monkeypatch.setattr(planning, "_BACKENDS", [b for b in planning._BACKENDS if b.name != "cute"])
    exec(compile(block, "docs/architecture.md", "exec"), {})
    facts = DeviceFacts(arch="sm_90a", num_sms=132, capability=(9, 0))
    problem = make_case([3], [9], head_dim=128).problem()._replace(device_type="cuda")
    assert planning.select_backend(problem, facts, None)[0].name == "mine"
    with pytest.raises(ValueError, match="head_dim 64 is not 128"):
        planning.select_backend(problem._replace(head_dim=64), facts, "mine")
