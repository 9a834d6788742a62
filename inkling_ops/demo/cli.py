"""``python -m inkling_ops demo``: a tiny Inkling model served end to end through torch.ops.inkling.

    python -m inkling_ops demo [--device cpu|cuda] [--prompts 5,37,90,...] [--new-tokens 32]
    python -m inkling_ops demo step [...]     the single attention step (demo/step.py)

Builds a random Hugging Face Inkling text model (global and sliding layers, GQA, MoE layers, log
scaling), serves several prompts of different lengths with our loop (engine.py: paged KV cache,
chunked prefill mixed with decodes, greedy sampling) over our forward of the model (model.py: our op
in every attention layer), compiled with ``torch.compile(fullgraph=True, dynamic=True)``. Before
serving it warms the op's kernels for both layer kinds (``inkling_ops.warmup``) and the compiled
model (a few padding steps; on CUDA, one CUDA graph per decode batch bucket); it serves with
inkling_ops' strict mode on and torch.compile's ``fail_on_recompile`` stance, so a compile after
warmup is an error, and counts them anyway. Then it checks the tokens against HF's eager attention
(check.py). Exit status 0 when the check passes, 1 when it fails.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from .. import ServingConfig, strict_compiles, warmup
from ..integrations.hf import MIN_TRANSFORMERS, release
from ..planning import backend_names, get_backend
from ..cli_args import device as device_arg
from ..cli_args import int_list

#: default prompt lengths: short and long, one past the global rel_extent (64), several past the window (32)
PROMPT_LENGTHS = "5,37,90,1,64,17,120,9"
PAGE_SIZE = 16


def demo_config():
    """The tiny Inkling: 4 layers (0, 1, 3 sliding with window 32, 2 global with rel_extent 64),
    8 query heads of 64 over 1 (global) or 2 (sliding) KV heads, dense and MoE MLPs, log scaling."""
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    return InklingTextConfig(
        vocab_size=512, hidden_size=256, num_hidden_layers=4, local_layer_ids=[0, 1, 3],
        num_attention_heads=8, num_key_value_heads=1, head_dim=64,
        swa_num_attention_heads=8, swa_num_key_value_heads=2, swa_head_dim=64,
        sliding_window_size=32, rel_extent=64, d_rel=16, log_scaling_n_floor=16,
        intermediate_size=512, moe_intermediate_size=128, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, mlp_layer_types=["dense", "sparse", "dense", "sparse"],
        max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=None,
        initializer_range=0.2,  # logits far from ties, so that greedy decoding is a sharp check
        logits_mup_width_multiplier=1.0,
    )  # fmt: skip


def serving_configs(hf_config, dtype, *, max_num_seqs, max_num_batched_tokens, max_model_len) -> list[ServingConfig]:
    """One ServingConfig per attention layer kind of the model (what inkling_ops.warmup takes)."""
    common = dict(page_size=PAGE_SIZE, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                  max_model_len=max_model_len, dtype=dtype)  # fmt: skip
    kinds = set(hf_config.layer_types)
    configs = []
    if "hybrid" in kinds:
        configs.append(ServingConfig(num_heads=hf_config.num_attention_heads, num_kv_heads=hf_config.num_key_value_heads,
                                     head_dim=hf_config.head_dim, rel_extent=hf_config.rel_extent, **common))  # fmt: skip
    if "hybrid_sliding" in kinds:
        window = hf_config.sliding_window_size
        configs.append(ServingConfig(num_heads=hf_config.swa_num_attention_heads,
                                     num_kv_heads=hf_config.swa_num_key_value_heads, head_dim=hf_config.swa_head_dim,
                                     rel_extent=window, window_left=window - 1, **common))  # fmt: skip
    return configs


def _kernels_compiled() -> int:
    """Kernels our backends have compiled so far in this process (backends that keep count)."""
    total = 0
    for name in backend_names():
        stats = getattr(get_backend(name), "compile_stats", None)
        total += stats.get("compiled", 0) if stats else 0
    return total


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv[:1] == ["step"]:
        from .step import main as step_main

        return step_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m inkling_ops demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--prompts", type=int_list(1), default=PROMPT_LENGTHS,
                        help="prompt lengths, comma-separated (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=32, help="greedy tokens per request (default %(default)s)")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="largest decode batch, and CUDA-graph bucket")
    parser.add_argument("--max-num-batched-tokens", type=int, default=48, help="token budget of a step")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                        help="default: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend; default eager (why: docs/serving_demo.md)")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="on CUDA, run decode steps without graphs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # the warmup steps hold a chunk of budget - 2 tokens and two decodes
    for flag, value, least in (("--max-num-batched-tokens", args.max_num_batched_tokens, 3),
                               ("--max-num-seqs", args.max_num_seqs, 1), ("--new-tokens", args.new_tokens, 1)):  # fmt: skip
        if value < least:
            parser.error(f"{flag} is {value}; expected at least {least}")
    try:
        import transformers  # noqa: F401
        from transformers import AutoModelForCausalLM
        from transformers.models.inkling import modeling_inkling  # noqa: F401
    except ImportError as exc:
        print(f"the serving demo needs transformers with the Inkling model (pip install 'inkling_ops[hf]'): {exc}")
        return 2
    if release(transformers.__version__) < MIN_TRANSFORMERS:
        # 5.17's Inkling is not the model this loop serves: on the H200 the float32 loop matched
        # 5.24's eager model token for token and 5.17's on 14 of 256 tokens (meta/TUNING.md)
        print(f"the serving demo needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))} (found "
              f"{transformers.__version__}): pip install 'inkling_ops[hf]'")
        return 2
    from .check import check_against_hf, greedy
    from .engine import Engine
    from .model import PagedInkling

    device = args.device
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    # On CPU, inductor miscompiles this model (vectorized C++) and aot_eager runs it ~20x slower than
    # eager; "eager" still captures the whole model in one graph (fullgraph=True). docs/serving_demo.md
    backend = args.compile_backend or "eager"  # inductor mis-builds this model's k path on CPU and CUDA
    use_graphs = device.type == "cuda" and not args.no_cuda_graphs
    lengths = args.prompts
    t_start = time.perf_counter()

    cfg = demo_config()
    torch.manual_seed(args.seed)
    reference = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").to(device).eval()  # float32
    served = copy.deepcopy(reference).to(dtype)
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    max_model_len = max(lengths) + args.new_tokens
    max_model_len = -(-max_model_len // PAGE_SIZE) * PAGE_SIZE
    num_blocks = 1 + sum(-(-(n + args.new_tokens) // PAGE_SIZE) for n in lengths)
    model = PagedInkling(served, num_blocks=num_blocks, page_size=PAGE_SIZE, max_num_seqs=args.max_num_seqs)
    forward = torch.compile(model, fullgraph=True, dynamic=True, backend=backend)
    limits = dict(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                  max_model_len=max_model_len)  # fmt: skip
    engine = Engine(model, forward, cuda_graphs=use_graphs, seed=args.seed, **limits)
    for rid, prompt in enumerate(prompts):
        engine.add_request(rid, prompt, args.new_tokens)
    layer_kinds = sorted(set(cfg.layer_types))
    print(f"inkling_ops demo: torch {torch.__version__}, transformers {transformers.__version__}, {device}, {dtype}")
    print(f"model: random Inkling, {cfg.num_hidden_layers} layers ({', '.join(f'{cfg.layer_types.count(k)} {k}' for k in layer_kinds)}), "
          f"hidden {cfg.hidden_size}, heads 8/{cfg.num_key_value_heads} global, 8/{cfg.swa_num_key_value_heads} sliding "
          f"(window {cfg.sliding_window_size}), rel_extent {cfg.rel_extent}, {cfg.mlp_layer_types.count('sparse')} MoE layers")  # fmt: skip
    print(f"requests: {len(prompts)} prompts of {lengths} tokens, {args.new_tokens} new tokens each; pages of "
          f"{PAGE_SIZE} over {num_blocks} blocks; token budget {args.max_num_batched_tokens} per step")  # fmt: skip

    # -- warmup: our kernels, the compiled model, the CUDA graphs ----------------------------------
    t0 = time.perf_counter()
    with torch.inference_mode():
        for config in serving_configs(cfg, dtype, **limits):
            summary = warmup(config, device=device, progress=False)
            print(f"  {summary} (window {config.window_left})")
        budget = args.max_num_batched_tokens
        # distinct token and request counts first (so that torch.compile's dynamic shapes do not tie them)
        engine.warmup([[budget - 2, 1, 1], [1, 1], [budget - 1, 1]])
        buckets = engine.capture_graphs() if use_graphs else []
    warm_s = time.perf_counter() - t0
    graphs_before, kernels_before = _graphs_compiled(), _kernels_compiled()
    print(f"warmup: {warm_s:.1f} s (torch.compile backend {backend!r}, fullgraph=True, dynamic=True: "
          f"{graphs_before} graphs compiled" + (f"; CUDA graphs captured for decode batches {buckets}" if buckets else "") + ")")

    # -- serving -----------------------------------------------------------------------------------
    with torch.inference_mode(), strict_compiles(), torch.compiler.set_stance("fail_on_recompile"):
        stats = engine.run()
    graphs_after = _graphs_compiled() - graphs_before
    kernels_after = _kernels_compiled() - kernels_before
    tokens = stats.prefill_tokens + stats.decode_tokens
    generated = sum(len(r.output) for r in engine.finished)
    print(f"served: {stats.steps} steps ({stats.mixed_steps} with prompt chunks, {stats.decode_steps} decode-only"
          + (f", {stats.graph_replays} of them CUDA-graph replays in buckets {sorted(stats.buckets_used)}" if use_graphs else "")
          + f"); {stats.prefill_tokens} prompt tokens in {stats.prefill_chunks} chunks, {stats.decode_tokens} decode tokens, "
          f"largest batch {stats.max_batch}")  # fmt: skip
    print(f"compiles after warmup: {graphs_after} torch.compile graphs, {kernels_after} kernels (strict mode on)")
    print(f"throughput: {tokens / stats.seconds:.0f} tokens/s ({generated / stats.seconds:.0f} generated tokens/s) over "
          f"{stats.seconds:.2f} s")  # fmt: skip

    by_rid = {r.rid: r.output for r in engine.finished}
    outputs = [by_rid[i] for i in range(len(prompts))]
    control = None
    if dtype != torch.float32:  # HF's own eager attention in the loop's dtype: the bf16 criterion's control
        control = greedy(copy.deepcopy(reference).to(dtype), prompts, args.new_tokens)
    result = check_against_hf(reference, prompts, outputs, exact=dtype == torch.float32, control=control)
    print(result)
    ok = result.ok and graphs_after == 0 and kernels_after == 0
    print(f"{'OK' if ok else 'FAILED'} in {time.perf_counter() - t_start:.1f} s")
    return 0 if ok else 1
