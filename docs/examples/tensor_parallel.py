"""Inkling attention sharded over ranks by heads, as serving engines run it: one rel_attn call per rank.

    torchrun --nproc-per-node 2 docs/examples/tensor_parallel.py                 # CPU, gloo
    torchrun --nproc-per-node 2 docs/examples/tensor_parallel.py --device cuda   # one GPU per rank, NCCL

Each layer has ``Hq`` query heads and ``Hkv`` KV heads. With ``tp`` shards, shard ``s`` holds query
heads ``[s * Hq / tp, (s + 1) * Hq / tp)`` and ``max(1, Hkv / tp)`` KV heads: KV heads
``[s * Hkv / tp, ...)`` when ``Hkv >= tp``, else the one KV head its query heads read, which is then
replicated on ``tp / Hkv`` shards (Inkling at TP8: 8/1 heads on global layers). Every rank owns
``tp / world_size`` shards (``--tp 4`` on two ranks: two shards each, the replicated-KV layout of
TP4 on two GPUs). Per shard the rank keeps its own paged KV cache (its KV heads only), its own
``rel_logits`` columns (its query heads) and calls ``inkling_ops.rel_attn``; the outputs are gathered
across ranks (``all_gather``) and must equal the single-process output of the full layer.

On CUDA each rank also captures one decode step in a CUDA graph and replays it with changed
lengths and block tables, and times its shard call (graph replay) while the other ranks run theirs,
against the same shard timed alone.

Equivalent PyTorch: ``torch.cat([rel_attn(shard s) for s in range(tp)], dim=1) == rel_attn(full layer)``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

import inkling_ops
from inkling_ops.testing import make_case

#: (name, Hq, Hkv, tp, rel_extent, window_left): Inkling-shaped layers, small on CPU
LAYERS_CPU = [
    ("global 8/2 tp2", 8, 2, 2, 16, -1),
    ("sliding 8/4 tp2", 8, 4, 2, 16, 15),
    ("global 8/1 tp4 (replicated KV)", 8, 1, 4, 16, -1),
    ("global 8/2 tp4 (replicated KV)", 8, 2, 4, 16, -1),
]
LAYERS_CUDA = [
    ("global 16/2 tp2", 16, 2, 2, 1024, -1),
    ("sliding 16/4 tp2", 16, 4, 2, 512, 511),
    ("global 16/2 tp4 (replicated KV)", 16, 2, 4, 1024, -1),
    ("sliding 16/4 tp4", 16, 4, 4, 512, 511),
]


def shard_heads(num_heads: int, num_kv_heads: int, tp: int, shard: int) -> tuple[list[int], list[int]]:
    """(query heads, KV heads) of ``shard`` of ``tp``. Raises ``ValueError`` on head counts tp cannot split."""
    if num_heads % tp:
        raise ValueError(f"tp is {tp}; expected a divisor of the {num_heads} query heads")
    if num_kv_heads % tp and tp % num_kv_heads:
        raise ValueError(f"tp is {tp}; expected a divisor or a multiple of the {num_kv_heads} KV heads")
    per_q = num_heads // tp
    q_heads = list(range(shard * per_q, (shard + 1) * per_q))
    if num_kv_heads >= tp:
        per_kv = num_kv_heads // tp
        kv_heads = list(range(shard * per_kv, (shard + 1) * per_kv))
    else:  # one KV head per shard, replicated on tp // num_kv_heads shards
        kv_heads = [shard * num_kv_heads // tp]
    group = num_heads // num_kv_heads
    if any(h // group not in kv_heads for h in q_heads):
        raise ValueError(f"shard {shard} of tp {tp}: query heads {q_heads} read KV heads outside {kv_heads}")
    return q_heads, kv_heads


def shard_case(case, q_heads: list[int], kv_heads: list[int]):
    """The shard's own tensors: its query heads of q and rel_logits, a paged cache of its KV heads."""
    return dict(
        q=case.q[:, q_heads].contiguous(),
        key_cache=case.key_cache[:, :, kv_heads].contiguous(),
        value_cache=case.value_cache[:, :, kv_heads].contiguous(),
        rel_logits=case.rel_logits[:, q_heads].contiguous(),
    )


def attend(case, tensors: dict, out: torch.Tensor | None = None) -> torch.Tensor:
    kwargs = case.kwargs()
    kwargs["rel_logits"] = tensors["rel_logits"]
    return inkling_ops.rel_attn(tensors["q"], tensors["key_cache"], tensors["value_cache"], **kwargs, out=out)


def build(layer, device: str, *, decode: bool, seed: int, spare: bool = True):
    """The full layer's call; ``spare=False``: no garbage blocks or table columns (so that any
    permutation of the blocks is a valid block-table row)."""
    _, hq, hkv, _, extent, window = layer
    head_dim = 128 if device == "cuda" else 32
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if decode:
        q_lens, kv_lens = [1, 1, 1, 1], [700, 64, 1500, 9]
    else:
        q_lens, kv_lens = [37, 1, 200], [100, 77, 200]
    gen = torch.Generator().manual_seed(seed)
    return make_case(
        q_lens=q_lens, kv_lens=kv_lens, num_heads=hq, num_kv_heads=hkv, rel_extent=extent, window_left=window,
        head_dim=head_dim, page_size=16, dtype=dtype, device=device, generator=gen,
        **({} if spare else dict(spare_blocks=0, extra_table_cols=0)),
    )  # fmt: skip


def check_layer(layer, rank: int, world: int, device: str, *, decode: bool, log) -> None:
    """The gathered shard outputs of ``layer`` equal the full layer's output, on every rank."""
    name, hq, hkv, tp, _, _ = layer
    if tp % world:
        raise ValueError(f"layer {name!r}: tp {tp} is not a multiple of the world size {world}")
    case = build(layer, device, decode=decode, seed=1234)  # the same inputs on every rank
    n = sum(case.q_lens)
    with torch.inference_mode():
        full = inkling_ops.rel_attn(*case.args(), **case.kwargs())[:n]
        mine = []
        shards = range(rank * (tp // world), (rank + 1) * (tp // world))
        for shard in shards:
            q_heads, kv_heads = shard_heads(hq, hkv, tp, shard)
            mine.append(attend(case, shard_case(case, q_heads, kv_heads))[:n])
        local = torch.cat(mine, dim=1).contiguous()  # this rank's query heads, in order
        gathered = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(gathered, local)
        result = torch.cat(gathered, dim=1)
    tol = dict(atol=2e-2, rtol=2e-2) if device == "cuda" else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.float(), full.float(), **tol)
    log(f"{name:34s} {'decode' if decode else 'prefill'}: {tp} shards over {world} ranks == the full layer "
        f"(max |diff| {(result.float() - full.float()).abs().max().item():.1e})")  # fmt: skip


def graph_decode(layer, rank: int, world: int, log) -> None:
    """One decode step of this rank's first shard captured in a CUDA graph, replayed with changed
    lengths and block tables; each replay equals an eager call on the same metadata."""
    name, hq, hkv, tp, _, _ = layer
    shard = rank * (tp // world)
    q_heads, kv_heads = shard_heads(hq, hkv, tp, shard)
    case = build(layer, "cuda", decode=True, seed=99, spare=False)
    for cache in (case.key_cache, case.value_cache):  # finite in the slots past each length too:
        cache.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)  # the replays grow the lengths into them
    tensors = shard_case(case, q_heads, kv_heads)
    out = torch.empty_like(tensors["q"])
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            attend(case, tensors, out)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            attend(case, tensors, out)
        capacity = case.block_table.shape[1] * case.key_cache.shape[1]
        for step in range(3):
            lens = torch.randint(1, capacity + 1, case.cache_seqlens.shape, generator=gen, dtype=torch.int32)
            case.cache_seqlens.copy_(lens)
            rows = torch.stack([torch.randperm(case.key_cache.shape[0], generator=gen)[: case.block_table.shape[1]]
                                for _ in range(case.block_table.shape[0])]).to(torch.int32)  # fmt: skip
            case.block_table.copy_(rows)
            graph.replay()
            expected = attend(case, tensors)
            torch.cuda.synchronize()
            torch.testing.assert_close(out.float(), expected.float(), atol=2e-2, rtol=2e-2)
    log(f"{name:34s} decode graph of shard {shard}: 3 replays with new lengths and block tables == eager")


def time_shard(layer, rank: int, world: int, log) -> None:
    """Graph-replay time of this rank's first shard call, all ranks at once, then each rank alone."""
    name, hq, hkv, tp, _, _ = layer
    shard = rank * (tp // world)
    q_heads, kv_heads = shard_heads(hq, hkv, tp, shard)
    case = build(layer, "cuda", decode=False, seed=5)
    tensors = shard_case(case, q_heads, kv_heads)
    out = torch.empty_like(tensors["q"])
    with torch.inference_mode():
        attend(case, tensors, out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            attend(case, tensors, out)

        def replays(reps: int = 50) -> float:
            times = []
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e3)
            return statistics.median(times)

        dist.barrier()
        together = replays()
        alone = None
        for turn in range(world):
            dist.barrier()
            if turn == rank:
                alone = replays()
        dist.barrier()
    log(f"{name:34s} shard {shard} prefill call: {together:.1f} us with every rank running, {alone:.1f} us alone")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--no-timing", action="store_true", help="on CUDA: skip the per-rank timings")
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")

    def log(message: str) -> None:
        print(f"[rank {rank}/{world}] {message}", flush=True)

    layers = LAYERS_CUDA if args.device == "cuda" else LAYERS_CPU
    try:
        for layer in layers:
            for decode in (False, True):
                check_layer(layer, rank, world, args.device, decode=decode, log=log)
        if args.device == "cuda":
            for layer in layers:
                graph_decode(layer, rank, world, log)
            if not args.no_timing:
                for layer in layers:
                    time_shard(layer, rank, world, log)
        dist.barrier()
        if rank == 0:
            print("OK: every sharded layer equals its single-process output", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
