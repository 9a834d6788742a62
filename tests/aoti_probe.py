"""A decoder layer calling our op, exported and packaged by AOTInductor (for tests/test_export_aoti.py).

The layer is vLLM's Inkling attention sublayer of tests/test_vllm_dropin.py (projections, the new
tokens' K/V written into the paged cache at ``slot_mapping``, ``inkling_fa4_rel_attention`` into a
preallocated ``out``, the output projection) inside a pre-norm residual block with an MLP. Steps of
one export share the cache, block table and request count; only the token count changes.

Run as a script it does one AOTInductor round trip in a process of its own, so that a crash
inside ``aoti_load_package`` (torch 2.11 segfaults there on the H200, even for a module without
our op) fails only the test that started it, by name:

    python tests/aoti_probe.py control DEVICE    # a Linear + GELU module, no op of ours
    python tests/aoti_probe.py layer DEVICE      # the decoder layer, at two token counts

It prints one line ``ok ...`` and exits 0 when the loaded package matches eager; anything else
(an exception, a mismatch, a signal) is a non-zero exit.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

from inkling_ops.compat import bucket_max_seqlen_q
from test_vllm_dropin import DecoderAttention

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXTENT, PAGE = 64, 8, 2, 32, 16, 16
NUM_BLOCKS, TABLE_WIDTH = 16, 4  # three requests of up to 64 keys each, in 12 of 16 blocks

#: max_seqlen_q is a fixed bound (as a scheduler's max_num_batched_tokens is): AOTInductor takes
#: tensors only and compiles an int input as the constant of the export, so every step passes it.
MAX_SEQLEN_Q = bucket_max_seqlen_q(32)

#: (q_lens, kv_lens) of the steps the tests run: the export's example (a prefill chunk and two
#: decodes, 11 tokens), a longer chunk (20 tokens), and a single decode token (1 token).
STEPS = {
    11: ([9, 1, 1], [40, 23, 60]),
    20: ([17, 2, 1], [50, 30, 61]),
    1: ([1, 0, 0], [41, 23, 60]),
}


class DecoderLayer(torch.nn.Module):
    """``h = x + attn(norm(x)); return h + mlp(norm(h))`` with vLLM's attention sublayer."""

    def __init__(self, window: int = -1):
        super().__init__()
        self.attn = DecoderAttention(HIDDEN, HEADS, KV_HEADS, HEAD_DIM, EXTENT, window)
        self.gate_up = torch.nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.down = torch.nn.Linear(2 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, key_cache, value_cache, slot_mapping, block_table, cache_seqlens, cu_seqlens_q, out,
                max_seqlen_q: int):  # fmt: skip
        norm = torch.nn.functional.rms_norm
        h = x + self.attn(norm(x, (HIDDEN,)), key_cache, value_cache, slot_mapping, block_table, cache_seqlens,
                          cu_seqlens_q, out, max_seqlen_q)  # fmt: skip
        gate, up = self.gate_up(norm(h, (HIDDEN,))).chunk(2, dim=-1)
        return h + self.down(torch.nn.functional.silu(gate) * up)


def make_layer(device, dtype, *, window: int = -1, seed: int = 0) -> DecoderLayer:
    torch.manual_seed(seed)
    return DecoderLayer(window).to(device=device, dtype=dtype).eval()


def make_caches(device, dtype, *, seed: int = 0) -> dict[str, torch.Tensor]:
    """The step-invariant tensors: a finite paged K/V cache and a shuffled block table."""
    g = torch.Generator().manual_seed(seed)
    shape = (NUM_BLOCKS, PAGE, KV_HEADS, HEAD_DIM)
    table = torch.randperm(NUM_BLOCKS, generator=g)[: 3 * TABLE_WIDTH].view(3, TABLE_WIDTH)
    return dict(
        key_cache=torch.randn(shape, generator=g).to(device=device, dtype=dtype),
        value_cache=torch.randn(shape, generator=g).to(device=device, dtype=dtype),
        block_table=table.to(device=device, dtype=torch.int32),
    )


def make_step(num_tokens: int, caches: dict[str, torch.Tensor], *, seed: int = 1) -> dict:
    """One step's inputs (fresh copies of the caches, which the layer writes into)."""
    q_lens, kv_lens = STEPS[num_tokens]
    device, dtype = caches["key_cache"].device, caches["key_cache"].dtype
    table = caches["block_table"].cpu()
    slots = [int(table[b, pos // PAGE]) * PAGE + pos % PAGE
             for b, (q, kv) in enumerate(zip(q_lens, kv_lens)) for pos in range(kv - q, kv)]  # fmt: skip
    cu = torch.tensor([0] + q_lens).cumsum(0)
    g = torch.Generator().manual_seed(seed + num_tokens)
    return dict(
        x=torch.randn(num_tokens, HIDDEN, generator=g).to(device=device, dtype=dtype),
        key_cache=caches["key_cache"].clone(), value_cache=caches["value_cache"].clone(),
        slot_mapping=torch.tensor(slots, device=device), block_table=caches["block_table"],
        cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32, device=device),
        cu_seqlens_q=cu.to(device=device, dtype=torch.int32),
        out=torch.zeros(num_tokens, HEADS, HEAD_DIM, device=device, dtype=dtype), max_seqlen_q=MAX_SEQLEN_Q,
    )  # fmt: skip


def clone_step(step: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in step.items()}


def export_layer(layer: DecoderLayer, example: dict) -> torch.export.ExportedProgram:
    """``torch.export`` with a dynamic token count: x, slot_mapping and out share one Dim."""
    tokens = torch.export.Dim("num_tokens", min=1, max=1 << 14)
    fixed = dict(key_cache=None, value_cache=None, block_table=None, cache_seqlens=None, cu_seqlens_q=None)
    dynamic_shapes = dict(x={0: tokens}, slot_mapping={0: tokens}, out={0: tokens}, max_seqlen_q=None) | fixed
    with torch.no_grad():
        return torch.export.export(layer, (), clone_step(example), dynamic_shapes=dynamic_shapes)


def check_against_eager(run, layer: DecoderLayer, step: dict, *, tol: dict) -> None:
    """``run(**inputs)`` returns what eager returns and writes what eager writes (cache, out)."""
    ours, eager = clone_step(step), clone_step(step)
    with torch.no_grad():
        got = run(**ours)
        expected = layer(**eager)
    torch.testing.assert_close(got, expected, **tol)
    for name in ("key_cache", "value_cache", "out"):
        torch.testing.assert_close(ours[name], eager[name], **tol, msg=lambda m, name=name: f"{name}: {m}")


def aoti_package(program: torch.export.ExportedProgram, path: str):
    """Build an AOTInductor package of ``program`` at ``path`` and load it."""
    package = torch._inductor.aoti_compile_and_package(program, package_path=path)
    return torch._inductor.aoti_load_package(package)


TOLERANCES = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def _control(device: str, workdir: str) -> str:
    """AOTInductor on a module without our op: what torch itself does on this machine."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).to(device).eval()
    x = torch.randn(8, 32, device=device)
    with torch.no_grad():
        program = torch.export.export(module, (x,), dynamic_shapes=({0: torch.export.Dim("n", max=1024)},))
        loaded = aoti_package(program, os.path.join(workdir, "control.pt2"))
        for n in (8, 3):
            torch.testing.assert_close(loaded(x[:n]), module(x[:n]))
    return f"ok control on {device} (torch {torch.__version__})"


def _layer(device: str, workdir: str) -> str:
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    layer, caches = make_layer(device, dtype), make_caches(device, dtype)
    loaded = aoti_package(export_layer(layer, make_step(11, caches)), os.path.join(workdir, "layer.pt2"))
    for n in (11, 20, 1):
        check_against_eager(loaded, layer, make_step(n, caches), tol=TOLERANCES[dtype])
    return f"ok decoder layer on {device} at token counts 11, 20, 1 (torch {torch.__version__})"


if __name__ == "__main__":
    what, device = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as workdir:
        print({"control": _control, "layer": _layer}[what](device, workdir), flush=True)
