"""Warmup, the persistent cache and strict mode, measured on a GPU (issue 16).

    python meta/tools/warmup_probe.py --out $OUT/warmup.jsonl

In a fresh cache directory, three processes one after the other (each a ``--phase`` of this script):

1. ``cold``: ``inkling_ops.warmup`` of Inkling's two layer kinds at TP8 (8/1 global, 8/2 sliding,
   page 16, 256 sequences, 8192 batched tokens, 128K model length): every kernel compiled.
2. ``warm``: the same warmup again in a new process: every kernel loaded from the store.
3. ``serve``: a new process warms (loads), then times its first call, turns strict mode on and
   serves >= 200 random calls per layer kind (token and request counts, lengths up to
   max_model_len, block-table widths, prefill chunks mixed with decodes); any compile raises.

One JSON line per phase (seconds, kernels compiled / loaded, calls served, compiles on the hot path).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import REPO_ROOT  # noqa: E402,F401  (puts this checkout's inkling_ops on sys.path)

import torch  # noqa: E402

import inkling_ops  # noqa: E402
from inkling_ops.serving import ServingConfig  # noqa: E402

CONFIGS = {
    "global_8_1": ServingConfig(num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16,
                                max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072),
    "sliding_8_2": ServingConfig(num_heads=8, num_kv_heads=2, head_dim=128, rel_extent=512, window_left=511,
                                 page_size=16, max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072),
}  # fmt: skip
POOL_BLOCKS = 65536  # KV cache blocks shared by the random calls (16 keys each)


def _warm_all() -> dict:
    start = time.perf_counter()
    summaries = [inkling_ops.warmup(config, progress=False) for config in CONFIGS.values()]
    return dict(
        seconds=time.perf_counter() - start,
        keys=sum(len(s.keys) for s in summaries),
        compiled=sum(s.compiled for s in summaries),
        loaded=sum(s.loaded for s in summaries),
        shared=sum(s.shared for s in summaries),
    )


def _random_call(config: ServingConfig, rng: random.Random, caches: dict, device):
    num_reqs = rng.choice([rng.randint(1, 4), rng.randint(1, config.max_num_seqs)])
    q_lens = [1] * num_reqs
    for i in range(rng.randint(0, min(3, num_reqs))):
        q_lens[i] = rng.randint(1, max(1, (config.max_num_batched_tokens - num_reqs) // 3))
    width = rng.choice([config.max_blocks_per_seq, rng.randint(1, config.max_blocks_per_seq), rng.randint(1, 64)])
    kv_lens = [rng.randint(q, max(q, width * config.page_size)) for q in q_lens]
    num_tokens = sum(q_lens)
    key_cache, value_cache = caches[config.num_kv_heads]
    table = torch.randint(0, POOL_BLOCKS, (num_reqs, width), dtype=torch.int32, device=device)
    cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)
    q = torch.randn(num_tokens, config.num_heads, config.head_dim, dtype=config.dtype, device=device)
    rel = torch.randn(num_tokens, config.num_heads, config.rel_extent, dtype=config.dtype, device=device)
    return dict(
        q=q, key_cache=key_cache, value_cache=value_cache, block_table=table,
        cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32, device=device), cu_seqlens_q=cu, rel_logits=rel,
        max_seqlen_q=max(q_lens), window_size=(config.window_left, 0) if config.window_left >= 0 else (-1, -1),
    )  # fmt: skip


def _serve(calls: int) -> dict:
    device = torch.device("cuda")
    warm = _warm_all()
    config = CONFIGS["global_8_1"]
    rng = random.Random(0)
    caches = {
        h: tuple(torch.randn(POOL_BLOCKS, 16, h, 128, dtype=torch.bfloat16, device=device) for _ in range(2))
        for h in (1, 2)
    }
    first = _random_call(config, rng, caches, device)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        inkling_ops.rel_attn(first.pop("q"), first.pop("key_cache"), first.pop("value_cache"), **first)
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - start
    backend = inkling_ops.dispatch.get_backend("triton")
    before = dict(backend.compile_stats)
    served = 0
    with torch.inference_mode(), inkling_ops.strict_compiles():
        for name, config in CONFIGS.items():
            for _ in range(calls):
                call = _random_call(config, rng, caches, device)
                inkling_ops.rel_attn(call.pop("q"), call.pop("key_cache"), call.pop("value_cache"), **call)
                served += 1
    torch.cuda.synchronize()
    compiled = backend.compile_stats["compiled"] - before["compiled"]
    return dict(warmup=warm, first_call_s=first_call_s, served=served, hot_path_compiles=compiled)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", choices=("cold", "warm", "serve"), help="run one phase here (the driver runs all three)")
    parser.add_argument("--calls", type=int, default=200, help="random calls per layer kind in the serve phase")
    parser.add_argument("--out", type=Path, help="JSON lines file to append to")
    args = parser.parse_args(argv)
    if args.phase:
        result = _warm_all() if args.phase in ("cold", "warm") else _serve(args.calls)
        print(json.dumps(dict(phase=args.phase, **result)), flush=True)
        return 0
    cache = tempfile.mkdtemp(prefix="inkling_ops_cache_")
    triton_cache = tempfile.mkdtemp(prefix="triton_cache_")  # Triton's own cache starts empty too
    env = dict(os.environ, INKLING_OPS_CACHE_DIR=cache, TRITON_CACHE_DIR=triton_cache)
    lines = []
    for phase in ("cold", "warm", "serve"):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, __file__, "--phase", phase, "--calls", str(args.calls)],
                              env=env, capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            print(done.stdout[-4000:], done.stderr[-4000:], file=sys.stderr)
            return done.returncode
        record = json.loads(done.stdout.strip().splitlines()[-1])
        record.update(process_s=time.perf_counter() - start, gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                      git_sha=os.environ.get("INKLING_GIT_SHA", "unknown"))  # fmt: skip
        print(json.dumps(record), flush=True)
        lines.append(record)
    if args.out:
        with args.out.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in lines)
    cold, warm = lines[0]["seconds"], lines[1]["seconds"]
    print(f"warmup cold {cold:.1f} s, warm {warm:.2f} s ({cold / warm:.0f}x); first call of a warmed process "
          f"{lines[2]['first_call_s']:.3f} s; {lines[2]['served']} strict calls, {lines[2]['hot_path_compiles']} compiles")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
