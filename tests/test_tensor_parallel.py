"""Tensor parallel by heads: docs/examples/tensor_parallel.py on two processes (gloo on CPU, NCCL
on two GPUs), and its head sharding rule."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tensor_parallel.py"
_spec = importlib.util.spec_from_file_location("tensor_parallel_example", EXAMPLE)
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


@pytest.mark.parametrize(
    "hq,hkv,tp,expected",
    [
        (8, 2, 2, [([0, 1, 2, 3], [0]), ([4, 5, 6, 7], [1])]),
        (16, 4, 2, [(list(range(8)), [0, 1]), (list(range(8, 16)), [2, 3])]),
        # fewer KV heads than shards: each KV head replicated on tp // Hkv shards
        (8, 1, 4, [([0, 1], [0]), ([2, 3], [0]), ([4, 5], [0]), ([6, 7], [0])]),
        (16, 2, 4, [([0, 1, 2, 3], [0]), ([4, 5, 6, 7], [0]), ([8, 9, 10, 11], [1]), ([12, 13, 14, 15], [1])]),
    ],
)
def test_shard_heads(hq, hkv, tp, expected):
    assert [example.shard_heads(hq, hkv, tp, s) for s in range(tp)] == expected


@pytest.mark.parametrize("hq,hkv,tp,match", [(8, 2, 3, "divisor of the 8 query heads"), (12, 3, 2, "multiple of the 3 KV")])
def test_shard_heads_rejects_head_counts_tp_cannot_split(hq, hkv, tp, match):
    with pytest.raises(ValueError, match=match):
        example.shard_heads(hq, hkv, tp, 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args: str, timeout: int) -> subprocess.CompletedProcess:
    root = str(EXAMPLE.parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(EXAMPLE), *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=root)


def test_two_ranks_on_cpu_match_the_full_layer():
    """Two gloo processes, reference backend: every sharded layer (tp 2, and tp 4 with replicated
    KV heads) gathers to the single-process output, prefill and decode."""
    result = _torchrun("--device", "cpu", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK: every sharded layer equals its single-process output" in result.stdout
    assert result.stdout.count("== the full layer") == 2 * 2 * len(example.LAYERS_CPU)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_ranks_on_two_gpus():
    """NCCL, one GPU per rank: the same checks, a captured decode step replayed with new metadata
    on each rank, and per-rank timings of the shard call."""
    result = _torchrun("--device", "cuda", timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK: every sharded layer equals its single-process output" in result.stdout
    assert result.stdout.count("== eager") == 2 * len(example.LAYERS_CUDA)
