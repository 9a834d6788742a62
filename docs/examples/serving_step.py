"""Decode steps of one Inkling attention layer as a serving engine runs them (docs/serving.md).

    python docs/examples/serving_step.py                  # CPU: reference backend, eager steps
    python docs/examples/serving_step.py --device cuda    # Triton kernels, one CUDA graph replayed

Warmup for the layer's ServingConfig first, then strict mode (no compile on the hot path). Every
tensor the op reads or writes lives in a buffer allocated once for the scheduler's limits; a step
uses slices of them (fixed shapes, fixed addresses). On CUDA one decode step of ``--batch``
requests is captured in a CUDA graph; each replay follows new lengths and block tables written
into the buffers in place. Every step is checked against the reference implementation.

Equivalent PyTorch: ``rel_attn_reference(q, key_cache, value_cache, ..., out)`` per step.
"""

from __future__ import annotations

import argparse

import torch

import inkling_ops
from inkling_ops.reference import rel_attn_reference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=4, help="requests per decode step")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    # One layer type (a global layer) and the scheduler's limits.
    config = inkling_ops.ServingConfig(
        num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16, max_num_seqs=8,
        max_num_batched_tokens=256, max_model_len=2048, dtype=dtype,
    )  # fmt: skip
    print(inkling_ops.warmup(config, device=device, progress=False))

    # Buffers allocated once, for the limits (what a CUDA graph replays against).
    g = torch.Generator().manual_seed(0)
    hq, hkv, d, e, page = config.num_heads, config.num_kv_heads, config.head_dim, config.rel_extent, config.page_size
    tokens, seqs, width = config.max_num_batched_tokens, config.max_num_seqs, config.max_blocks_per_seq
    num_blocks = seqs * width

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    q, rel_logits = randn(tokens, hq, d), randn(tokens, hq, e)
    key_cache, value_cache = randn(num_blocks, page, hkv, d), randn(num_blocks, page, hkv, d)
    out = torch.zeros(tokens, hq, d, device=device, dtype=dtype)
    block_table = torch.zeros(seqs, width, dtype=torch.int32, device=device)
    cache_seqlens = torch.zeros(seqs, dtype=torch.int32, device=device)
    cu_seqlens_q = torch.zeros(seqs + 1, dtype=torch.int32, device=device)

    b = args.batch  # a decode step: one new token per request
    views = dict(
        block_table=block_table[:b], cache_seqlens=cache_seqlens[:b], cu_seqlens_q=cu_seqlens_q[: b + 1],
        rel_logits=rel_logits[:b],
    )  # fmt: skip

    def step() -> None:
        inkling_ops.rel_attn(q[:b], key_cache, value_cache, **views, max_seqlen_q=1, softmax_scale=1.0 / d,
                             out=out[:b])  # fmt: skip

    def schedule(i: int) -> None:
        """The scheduler's new metadata, written into the buffers in place (no new tensors)."""
        lens = torch.randint(1, width * page + 1, (b,), generator=g, dtype=torch.int32)
        cache_seqlens[:b].copy_(lens)
        cu_seqlens_q[: b + 1].copy_(torch.arange(b + 1, dtype=torch.int32))
        block_table[:b].copy_(torch.randperm(num_blocks, generator=g)[: b * width].view(b, width).to(torch.int32))
        q[:b].copy_(randn(b, hq, d))
        rel_logits[:b].copy_(randn(b, hq, e))

    with inkling_ops.strict_compiles():  # from here on a kernel that was not warmed raises
        schedule(0)
        if device.type == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()  # first call outside the capture (kernels loaded, launchers built)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        else:
            run = step
        for i in range(args.steps):
            schedule(i + 1)
            run()
            expected = torch.zeros_like(out[:b])
            rel_attn_reference(q[:b].float(), key_cache.float(), value_cache.float(), views["block_table"],
                               views["cache_seqlens"], views["cu_seqlens_q"], views["rel_logits"].float(),
                               expected, softmax_scale=1.0 / d)  # fmt: skip
            err = (out[:b].float() - expected.float()).abs().max().item()
            lens = cache_seqlens[:b].tolist()
            how = "graph replay" if device.type == "cuda" else "eager"
            print(f"step {i}: {how}, kv lengths {lens}, max |err| {err:.2e}")
            if not err <= (3e-2 if dtype == torch.bfloat16 else 1e-4):
                raise SystemExit(f"step {i}: output differs from the reference by {err}")
    print("ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
