"""A/B of the Triton backend: another commit's copy of the package against this one, in one process.

    git archive <base-sha> inkling_ops | tar -x -C .ab/base     # here; carry .ab to the GPU
    python meta/tools/ab_backend.py .ab/base --out $OUT/ab.jsonl [--cases prefill8k_global,...]

The base copy is imported under another name (``inkling_ops_base``) without running its
``__init__``, so it registers no op; both copies run their own ``TritonBackend.run`` on the
same inputs (validation and dispatch are skipped on both sides, so the eager clock compares
the backends' own host cost too). For each case and page size it checks that the two outputs
are equal (bit for bit, and the max difference if not), then times both, alternating, on both
clocks: ``triton.testing.do_bench`` (eager, launches included) and CUDA-graph replay of one
call (``inkling_ops.bench.time_graph``: the L2 flushed by zeroing 256 MB before each, as do_bench does). One JSON line per case.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import statistics
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: name, requests, new tokens, KV length, Hq, Hkv, E, window_left (anchors.md's cases)
CASES = {
    "prefill8k_global": (1, 8192, 8192, 8, 1, 1024, -1),
    "prefill32k_global": (1, 32768, 32768, 8, 1, 1024, -1),
    "chunk2k_on16k_x4": (4, 2048, 16384, 8, 1, 1024, -1),
    "prefill8k_local": (1, 8192, 8192, 8, 2, 512, 511),
    "decode_b64_8k": (64, 1, 8192, 8, 1, 1024, -1),
    "decode_b64_8k_local": (64, 1, 8192, 8, 2, 512, 511),
    "decode_b1_128k": (1, 1, 131072, 8, 1, 1024, -1),
    # split counts around triton_configs.MERGE_MAX_SPLITS (the forward merges up to 4 splits; 16 and 8 measured at 693a1e8)
    "decode_b32_8k": (32, 1, 8192, 8, 1, 1024, -1),
    "decode_b16_8k": (16, 1, 8192, 8, 1, 1024, -1),
    "decode_b8_32k": (8, 1, 32768, 8, 1, 1024, -1),
}


def load_base(path: Path):
    """The base copy's modules (triton_backend, validation) under the package name ``inkling_ops_base``."""
    package = types.ModuleType("inkling_ops_base")
    package.__path__ = [str(path / "inkling_ops")]
    sys.modules["inkling_ops_base"] = package
    return (
        importlib.import_module("inkling_ops_base.backends.triton_backend"),
        importlib.import_module("inkling_ops_base.validation"),
        importlib.import_module("inkling_ops_base.compile_keys"),
    )


def make_inputs(case: tuple, page: int, device: torch.device, seed: int = 0):
    """Random bf16 tensors of one case; each request's pages a random permutation of the cache's blocks."""
    reqs, q_len, kv_len, hq, hkv, extent, _ = case
    gen = torch.Generator(device=device).manual_seed(seed)
    d = 128
    pages_per_req = -(-kv_len // page)
    num_blocks = reqs * pages_per_req + 2
    perm = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    block_table = perm[: reqs * pages_per_req].view(reqs, pages_per_req).contiguous()

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)

    tokens = reqs * q_len
    return dict(
        q=randn(tokens, hq, d),
        key_cache=randn(num_blocks, page, hkv, d),
        value_cache=randn(num_blocks, page, hkv, d),
        block_table=block_table,
        cache_seqlens=torch.full((reqs,), kv_len, dtype=torch.int32, device=device),
        cu_seqlens_q=torch.arange(0, tokens + 1, q_len, dtype=torch.int32, device=device),
        rel_logits=randn(tokens, hq, extent),
    )


def backend_call(backend_module, validation, compile_keys, tensors: dict, case: tuple, out: torch.Tensor):
    """A zero-argument function running one copy's TritonBackend.run on ``tensors`` into ``out``."""
    _, q_len, _, _, _, _, window_left = case
    names = ("q", "key_cache", "value_cache", "block_table", "cache_seqlens", "cu_seqlens_q", "rel_logits")
    ordered = [tensors[n] for n in names]
    problem = validation.check_call(
        *ordered, q_len, 1.0 / 128, (window_left, 0) if window_left >= 0 else (-1, -1), True, 0, out
    )
    backend = backend_module.TritonBackend()
    props = torch.cuda.get_device_properties(out.device)
    facts = compile_keys.DeviceFacts(arch="sm_90a", num_sms=props.multi_processor_count, capability=(props.major, props.minor))
    splits = compile_keys.split_count(problem, facts, backend.split_policy)
    params = list(inspect.signature(backend.run).parameters)
    package = backend_module.__name__.split(".")[0]
    if params[0] == "plan":  # run(plan, problem, args, out): the plan of the call's own layout
        args = importlib.import_module(package + ".problem").RelAttnArgs(*ordered)
        layout = compile_keys.layout_of(args, out)
        plan = importlib.import_module(package + ".planning").plan_for(backend, problem, facts, layout)
        return (lambda: backend.run(plan, problem, args, out)), plan.num_splits
    if len(params) == 4:  # run(problem, splits, args, out)
        args = importlib.import_module(package + ".problem").RelAttnArgs(*ordered)
        return (lambda: backend.run(problem, splits, args, out)), splits
    return (lambda: backend.run(problem, splits, *ordered, out)), splits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, help="folder holding the base commit's inkling_ops/")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--pages", default="16,128")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per side")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file to append to")
    parser.add_argument("--label", default="", help="recorded with each line (e.g. 'base=35e93ed new=...')")
    args = parser.parse_args(argv)

    import triton.testing

    import inkling_ops
    from inkling_ops import compile_keys, validation
    from inkling_ops.backends import triton_backend
    from inkling_ops.bench import time_graph

    base = load_base(args.base)
    new = (triton_backend, validation, compile_keys)
    device = torch.device("cuda")
    print(f"A/B {args.label}: base {args.base} vs this tree ({inkling_ops.__file__}); torch {torch.__version__}, "
          f"triton {triton.__version__}, {torch.cuda.get_device_name()}")  # fmt: skip
    print(f"{'case':22s} {'page':>4s} {'splits':>6s} {'same':>5s} {'eager base':>10s} {'eager new':>10s} "
          f"{'ratio':>6s} {'graph base':>10s} {'graph new':>10s} {'ratio':>6s}")  # fmt: skip
    for name in args.cases.split(","):
        case = CASES[name]
        for page in (int(p) for p in args.pages.split(",")):
            with torch.inference_mode():
                tensors = make_inputs(case, page, device)
                outs = {side: torch.zeros_like(tensors["q"]) for side in ("base", "new")}
                fns = {}
                for side, mods in (("base", base), ("new", new)):
                    fns[side], splits = backend_call(*mods, tensors, case, outs[side])
                    fns[side]()
                torch.cuda.synchronize()
                same = torch.equal(outs["base"], outs["new"])
                max_diff = (outs["base"].float() - outs["new"].float()).abs().max().item()
                eager = {"base": [], "new": []}
                graph = {"base": [], "new": []}
                for _ in range(args.rounds):
                    for side in ("base", "new"):
                        eager[side].append(triton.testing.do_bench(fns[side], warmup=25, rep=100, return_mode="median"))
                        graph[side].append(time_graph(fns[side], device, reps=50))
            med = {k: {s: statistics.median(v[s]) for s in v} for k, v in (("eager", eager), ("graph", graph))}
            record = dict(
                case=name, page_size=page, splits=splits, bit_identical=same, max_abs_diff=max_diff,
                eager_ms=med["eager"], graph_ms=med["graph"], eager_all=eager, graph_all=graph, label=args.label,
                torch=torch.__version__, triton=triton.__version__, gpu=torch.cuda.get_device_name(),
            )  # fmt: skip
            print(f"{name:22s} {page:4d} {splits:6d} {str(same):>5s} {med['eager']['base'] * 1e3:9.1f}u "
                  f"{med['eager']['new'] * 1e3:9.1f}u {med['eager']['new'] / med['eager']['base']:6.3f} "
                  f"{med['graph']['base'] * 1e3:9.1f}u {med['graph']['new'] * 1e3:9.1f}u "
                  f"{med['graph']['new'] / med['graph']['base']:6.3f}", flush=True)  # fmt: skip
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
