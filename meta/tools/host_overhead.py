"""Measure the eager host overhead of calling rel_attn (lab tool, not the product).

    python meta/tools/host_overhead.py [--device cpu|cuda] [--backend NAME] [--rounds 7] [--record meta/host_overhead.jsonl]
    python meta/tools/host_overhead.py --dispatcher-rows [--device cpu|cuda] [--rounds 15]

Each figure is the median over repeated batches of back-to-back calls (host wall time per call;
on CUDA without synchronizing inside a batch, on a problem small enough that the GPU never holds
the host back), all on one tiny decode in one process:

1. registration style alone: an op with our schema and an empty implementation, declared with
   ``Library.define`` + ``impl`` (what inkling_ops uses) versus the ``custom_op`` decorator, in a
   probe namespace of their own;
2. ``torch.ops.inkling.rel_attn_out`` with the chosen backend's ``run`` replaced by a no-op for
   the duration of that measurement only (``unittest.mock.patch.object`` on the backend
   instance's ``run`` and ``prepare``, restored on exit, with the call cache emptied before and
   after; the dispatcher's backend list is never changed): the cost of our registration and the
   call cache's lookup (recorded as ``rel_attn_out_null_backend_us``);
3. ``rel_attn_out`` on the default backend (on CUDA: the Triton kernels);
4. the vLLM-compatible entry point ``inkling_ops.inkling_fa4_rel_attention`` on the same call,
   and the public API ``inkling_ops.rel_attn(..., out=)`` (``api_out_us``: outside tracing it
   calls the op's implementation without the dispatcher);
5. ``rel_attn_out`` and the API with ``num_splits=1`` (one kernel launch, no workspace:
   ``*_one_launch_us``) and ``num_splits=4`` (a split-KV decode: a workspace and the forward,
   which merges the splits itself; before 2026-12-04 also the combine: ``*_split_us``) and
   ``num_splits=32`` (more than the forward merges: the forward and the combine,
   ``*_split_combined_us``); ``default_num_splits`` is what the heuristic chose for the
   default rows;
6. ``F.scaled_dot_product_attention`` on the same decode (dense K/V, no bias), for scale.

Rows 3-6 run in rotated rounds (``--rounds``, default 7: each round one batch of every row, the
order rotated by one), so a host or GPU clock that moves during the probe moves them alike; timed
one after another (up to and including 5edb9aa) the one-launch row once read 28.6 µs against 15.6
in the rotated ``--split-breakdown`` seconds later.

``--dispatcher-rows`` measures instead (and records with ``"probe": "dispatcher_rows"``) what the
torch dispatcher itself costs for an op of our schema registered in different ways, under
``torch.inference_mode()`` and under ``torch.no_grad()``: an empty implementation registered as
``inkling_ops/library.py`` does (``CPU`` + ``CUDA``; twice, as two ops, the second a control whose
difference to the first is the noise floor), the same plus ``fallthrough_kernel`` on the
``Autograd`` alias key (or on ``AutogradCPU`` / ``AutogradCUDA`` / ``ADInplaceOrView``), on
``CompositeExplicitAutograd`` (with and without the Autograd fallthrough), on
``CompositeImplicitAutograd`` (a data point only: such an op is traced through, not kept, by
torch.compile), the ``.default`` overload against the packet, and the real
``torch.ops.inkling.rel_attn_out`` (packet and ``.default``) and ``inkling_ops.rel_attn(..., out=)``
with the backend's ``run`` / ``prepare`` patched out as in 2. The rows run in rounds, each round one
batch of every row in a rotated order, so each row's difference to the first row is taken between
batches measured close in time (the median of those per-round differences: ``*_minus_ours_us``), which
cancels most of a shared machine's drift.

``--split-breakdown`` measures instead (and records with ``"probe": "split_breakdown"``) where
the split-KV decode's host time goes, in rotated rounds as ``--dispatcher-rows`` does: the API and
``rel_attn_out`` with ``num_splits`` 1 and 4 (the forward merges 4 splits itself: one launch),
``rel_attn_out`` with 32 (the forward and the combine), SDPA, and the pieces of the 4-split call's
prepared launch (``PreparedTritonCall``): the whole of it (its workspace and arrival counts kept
per stream), the same with both allocated per call through torch (the kept size cap set to 0
around each call), its workspace allocation alone (``torch.empty``), the current-stream query
alone, the forward launch alone and the call's launches with a workspace allocated once beforehand.

``--backend NAME`` (e.g. ``cute``) passes ``backend=NAME`` to every call of 2-5 instead of the
dispatcher's default choice, and records ``requested_backend``; the vLLM entry point takes no
backend, so its figure is then left out (None). The decode (4 requests, one query each, 64 keys,
8 / 1 heads, head_dim 128, E 64, bf16 on CUDA) is one the CuTe backend runs (it never splits:
``num_splits`` 0 gives it one split).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import REPO_ROOT, benchmark_module  # noqa: E402  (puts this checkout's inkling_ops on sys.path)

import torch  # noqa: E402

import inkling_ops  # noqa: E402
from inkling_ops import call_cache, dispatch  # noqa: E402
from inkling_ops.testing import make_case  # noqa: E402
from inkling_ops.validation import check_call  # noqa: E402

DEFAULT_RECORD = REPO_ROOT / "meta" / "host_overhead.jsonl"
COMMAND = "python meta/tools/host_overhead.py"

_PROBE_SCHEMA = (
    "probe(Tensor q, Tensor k, Tensor v, Tensor bt, Tensor sl, Tensor cu, Tensor rel, *, SymInt max_seqlen_q, "
    "float softmax_scale, int[2] window_size=[-1, -1], bool causal=True, int num_splits=0, str? backend=None, "
    "Tensor(a!) out) -> ()"
)


@contextlib.contextmanager
def backend_without_kernels(args: tuple, options: dict):
    """The backend the dispatcher picks for this call (``options["backend"]`` when given), its
    ``run`` a no-op inside the block.

    Patches the attribute on that backend instance (``mock.patch.object``), which restores the
    method on exit; the dispatcher's list of backends is left as it is. Yields the backend's name.
    """
    problem = check_call(*args, options["max_seqlen_q"], options["softmax_scale"], options["window_size"], True, 0, options["out"])
    backend, _plan = dispatch.plan_call(problem, args[0].device, options.get("backend"))
    # the call cache keeps each call's prepared launch: start and end without entries, so the
    # patched backend's no-op launch is the one the measured calls reuse
    call_cache.clear()
    try:
        with mock.patch.object(backend, "run", lambda *a, **k: None), mock.patch.object(
            backend, "prepare", lambda *a, **k: (lambda *a, **k: None)
        ):
            yield backend.name
    finally:
        call_cache.clear()


def _per_call_us(fn, calls: int = 2000, batches: int = 7, device: str = "cpu") -> float:
    for _ in range(min(200, calls)):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        if device == "cuda":
            torch.cuda.synchronize()
    return statistics.median(samples)


def _rotated_samples(rows: dict, *, calls_of, rounds: int, device: str) -> dict[str, list[float]]:
    """Per row, ``rounds`` samples of the per-call µs over ``calls_of(name)`` back-to-back calls,
    each round one batch of every row in an order rotated by one (so a drifting host moves every
    row alike). Every row first runs ``min(200, calls_of(name))`` times untimed."""
    names = list(rows)
    for name, fn in rows.items():
        for _ in range(min(200, calls_of(name))):
            fn()
    if device == "cuda":
        torch.cuda.synchronize()
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = rows[name], calls_of(name)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n * 1e6)
            if device == "cuda":
                torch.cuda.synchronize()
    return samples


def _sdpa_call(case, device: str):
    """SDPA on the tiny decode's shape (its requests' single queries over 64 dense keys, no bias):
    a no-argument callable."""
    num_reqs, hkv, d = case.cache_seqlens.numel(), case.key_cache.shape[2], case.q.shape[-1]
    q_dense = case.q[:num_reqs].unsqueeze(2)  # (B, Hq, 1, D)
    k_dense = torch.randn(num_reqs, hkv, 64, d, dtype=case.q.dtype, device=device)
    v_dense = torch.randn_like(k_dense)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(q_dense, k_dense, v_dense, scale=case.softmax_scale, enable_gqa=True)


def _registration_probes(args, options):
    from torch.library import Library, custom_op

    lib = Library("inkling_overhead_probe", "DEF")
    lib.define(_PROBE_SCHEMA)

    def empty(*a, **k):
        return None

    for key in ("CPU", "CUDA"):
        lib.impl("probe", empty, key)

    @custom_op("inkling_overhead_probe::probe_custom_op", mutates_args=("out",))
    def probe_custom_op(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bt: torch.Tensor, sl: torch.Tensor, cu: torch.Tensor,
        rel: torch.Tensor, max_seqlen_q: int, softmax_scale: float, window_size: list[int], causal: bool,
        num_splits: int, backend: str | None, out: torch.Tensor,
    ) -> None:  # fmt: skip
        return None

    define = lambda: torch.ops.inkling_overhead_probe.probe.default(*args, **options)  # noqa: E731
    decorated = lambda: probe_custom_op(  # noqa: E731
        *args, options["max_seqlen_q"], options["softmax_scale"], options["window_size"], True, 0, None, options["out"]
    )
    return define, decorated, lib


#: the empty op's registrations of ``--dispatcher-rows``: op name -> (implementation keys, fallthrough keys)
_REGISTRATIONS = {
    "ours": (("CPU", "CUDA"), ()),
    "ours_control": (("CPU", "CUDA"), ()),  # registered the same way: the noise floor of the differences
    "autograd_fallthrough": (("CPU", "CUDA"), ("Autograd",)),
    "per_key_autograd_fallthrough": (("CPU", "CUDA"), ("AutogradCPU", "AutogradCUDA", "ADInplaceOrView")),
    "composite_explicit": (("CompositeExplicitAutograd",), ()),
    "composite_explicit_autograd_fallthrough": (("CompositeExplicitAutograd",), ("Autograd",)),
    "composite_implicit": (("CompositeImplicitAutograd",), ()),
}


def _tiny_decode(device: str):
    """The probe's call (4 requests of one query over 64 keys, 8/1 heads): the case, its ``out``,
    the op's seven positional tensors and its keyword options."""
    case = make_case([1] * 4, [64] * 4, num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=64,
                     dtype=torch.bfloat16 if device == "cuda" else torch.float32, device=device)  # fmt: skip
    out = torch.empty_like(case.q)
    args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits)  # fmt: skip
    options = dict(max_seqlen_q=1, softmax_scale=case.softmax_scale, window_size=[-1, -1], out=out)
    return case, out, args, options


def dispatcher_rows(device: str, calls: int = 2000, rounds: int = 15) -> dict:
    """The figures of ``--dispatcher-rows`` (module docstring): for each grad context and row, the
    median per-call µs over ``rounds`` batches of ``calls`` calls and the median per-round
    difference to the empty op registered our way."""
    from torch.library import Library, fallthrough_kernel

    case, out, args, options = _tiny_decode(device)
    api_kwargs = dict(block_table=case.block_table, cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
                      rel_logits=case.rel_logits, max_seqlen_q=1, softmax_scale=case.softmax_scale, out=out)  # fmt: skip

    def empty(*a, **k):
        return None

    lib = Library("inkling_dispatcher_probe", "DEF")
    rows = {}
    for name, (keys, fallthrough) in _REGISTRATIONS.items():
        lib.define(_PROBE_SCHEMA.replace("probe(", f"{name}(", 1))
        for key in keys:
            lib.impl(name, empty, key)
        for key in fallthrough:
            lib.impl(name, fallthrough_kernel, key)
        packet = getattr(torch.ops.inkling_dispatcher_probe, name)
        rows[f"empty_{name}"] = lambda packet=packet: packet(*args, **options)
    ours = torch.ops.inkling_dispatcher_probe.ours.default
    rows["empty_ours_default_overload"] = lambda: ours(*args, **options)
    real = torch.ops.inkling.rel_attn_out
    rows["rel_attn_out_null_backend"] = lambda: real(*args, **options)
    rows["rel_attn_out_default_overload_null_backend"] = lambda: real.default(*args, **options)
    rows["api_out_null_backend"] = lambda: inkling_ops.rel_attn(case.q, case.key_cache, case.value_cache, **api_kwargs)
    names = list(rows)
    results = {}
    try:
        with backend_without_kernels(args, options):
            for context_name, context in (("inference_mode", torch.inference_mode), ("no_grad", torch.no_grad)):
                with context():
                    samples = _rotated_samples(rows, calls_of=lambda name: calls, rounds=rounds, device=device)
                base = samples["empty_ours"]
                for name in names:
                    results[f"{context_name}_{name}_us"] = statistics.median(samples[name])
                    if name != "empty_ours":
                        diffs = [a - b for a, b in zip(samples[name], base)]
                        results[f"{context_name}_{name}_minus_ours_us"] = statistics.median(diffs)
    finally:
        lib._destroy()
    results["rounds"], results["calls"] = rounds, calls
    return results


def split_breakdown(device: str, calls: int = 2000, rounds: int = 15) -> dict:
    """The figures of ``--split-breakdown`` (module docstring): per row, the median per-call µs
    over ``rounds`` batches of ``calls`` calls (15% of ``calls`` for rows that launch kernels)."""
    from inkling_ops.backends import triton_backend
    from inkling_ops.problem import RelAttnArgs

    case, out, args, options = _tiny_decode(device)
    api_kwargs = dict(block_table=case.block_table, cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
                      rel_logits=case.rel_logits, max_seqlen_q=1, softmax_scale=case.softmax_scale, out=out)  # fmt: skip
    op = torch.ops.inkling.rel_attn_out.default
    q, kc, vc = case.q, case.key_cache, case.value_cache
    rows = {
        "sdpa": _sdpa_call(case, device),
        "api_one_launch": lambda: inkling_ops.rel_attn(q, kc, vc, **api_kwargs, num_splits=1),
        "api_split": lambda: inkling_ops.rel_attn(q, kc, vc, **api_kwargs, num_splits=4),
        "rel_attn_out_one_launch": lambda: op(*args, **dict(options, num_splits=1)),
        "rel_attn_out_split": lambda: op(*args, **dict(options, num_splits=4)),
        # more splits than the forward merges (triton_configs.MERGE_MAX_SPLITS): the combine launch too
        "rel_attn_out_split_combined": lambda: op(*args, **dict(options, num_splits=32)),
    }
    results = {}
    with torch.inference_mode():
        call_cache.clear()
        rows["api_split"]()
        entries = [e for bucket in call_cache._ENTRIES.values() for e in bucket]
        prepared = next((e.prepared for e in entries if getattr(e.plan, "num_splits", 0) == 4), None)
        if isinstance(prepared, triton_backend.PreparedTritonCall):
            pointers = tuple(t.data_ptr() for t in (*args, out))
            call_args = RelAttnArgs(*args)
            numel, dev = prepared.workspace_numel, q.device
            workspace = torch.empty(numel, dtype=torch.float32, device=dev)
            base = workspace.data_ptr()
            counts = torch.zeros(max(1, prepared.arrivals_numel), dtype=torch.int32, device=dev)
            full = pointers + (base, base + 4 * prepared.lse_offset, counts.data_ptr())
            launches = [(launch, pick(full)) for launch, pick in prepared._steps]  # one (merged) or two (and the combine)
            stream_of = triton_backend._current_stream
            index = prepared.device

            def launches_prealloc():
                torch.cuda.is_current_stream_capturing()
                stream = stream_of(index)
                for launch, ptrs in launches:
                    launch(stream, ptrs)

            from inkling_ops import workspace as workspace_module

            def prepared_per_call_allocation():  # the workspace allocated through torch, as before e1abb48
                workspace_module.REUSE_MAX_BYTES = 0
                prepared(call_args, pointers, out)
                workspace_module.REUSE_MAX_BYTES = cap

            cap = workspace_module.REUSE_MAX_BYTES
            rows.update({
                "prepared_split": lambda: prepared(call_args, pointers, out),
                "prepared_split_allocating_per_call": prepared_per_call_allocation,
                "workspace_empty": lambda: torch.empty(numel, dtype=torch.float32, device=dev),
                "current_stream": lambda: stream_of(index),
                "is_current_stream_capturing": torch.cuda.is_current_stream_capturing,
                "fwd_launch_alone": lambda: launches[0][0](stream_of(index), launches[0][1]),
                "launches_workspace_reused": launches_prealloc,
            })  # fmt: skip
            results["workspace_bytes"], results["split_launches"] = 4 * numel, len(launches)
        light = {"workspace_empty", "current_stream", "is_current_stream_capturing"}
        heavy = max(1, calls * 3 // 20)
        samples = _rotated_samples(rows, calls_of=lambda name: calls if name in light else heavy, rounds=rounds, device=device)
    for name, values in samples.items():
        results[f"{name}_us"] = statistics.median(values)
    results["rounds"], results["calls"] = rounds, calls
    import triton

    results["triton"], results["gpu"] = triton.__version__, torch.cuda.get_device_name()
    return results


def measure(device: str, calls: int = 2000, backend: str | None = None, rounds: int = 7) -> dict:
    """The figures of the module docstring on ``device``; ``calls`` per batch (15% of it for the
    calls that run kernels); rows 3-6 in ``rounds`` rotated rounds; ``backend``: the backend every
    call asks for (None: the default choice)."""
    case, out, args, options = _tiny_decode(device)
    define, decorated, _lib = _registration_probes(args, options)
    if backend is not None:
        options["backend"] = backend
    op = torch.ops.inkling.rel_attn_out.default
    vllm_kwargs = dict(
        block_table=case.block_table, cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
        max_seqlen_q=1, softmax_scale=case.softmax_scale, causal=True, window_size=(-1, -1),
        rel_extent=case.rel_logits.shape[-1], rel_logits=case.rel_logits, out=out,
    )  # fmt: skip
    sdpa = _sdpa_call(case, device)  # the same decode, dense, no bias
    heavy = max(1, calls * 3 // 20)
    with torch.inference_mode():
        results = {
            "library_define_empty_us": _per_call_us(define, calls=calls, device=device),
            "custom_op_empty_us": _per_call_us(decorated, calls=calls, device=device),
        }
        with backend_without_kernels(args, options) as backend_name:
            results["rel_attn_out_null_backend_us"] = _per_call_us(lambda: op(*args, **options), calls=calls, device=device)
        results["null_backend_note"] = f"the {backend_name} backend with its run() patched to a no-op"
        # The rows that run kernels, and SDPA, in rotated rounds (as --split-breakdown takes
        # them): timed one after another, a host or GPU clock that moves between rows moved the
        # rows apart (at 5edb9aa the one-launch row read 28.6 us, its breakdown twin 15.6).
        # The public API on the same call (outside tracing it calls the implementation without
        # the dispatcher), and both entry points on a call that launches one kernel (num_splits=1:
        # no workspace, no combine).
        api_kwargs = {k: v for k, v in vllm_kwargs.items() if k not in ("causal", "rel_extent")}
        if backend is not None:
            api_kwargs["backend"] = backend
        rows = {"rel_attn_out_default_backend": lambda: op(*args, **options)}
        if backend is None:
            rows["vllm_entry_point"] = lambda: inkling_ops.inkling_fa4_rel_attention(
                case.q, case.key_cache, case.value_cache, **vllm_kwargs
            )
        rows["api_out"] = lambda: inkling_ops.rel_attn(case.q, case.key_cache, case.value_cache, **api_kwargs)
        for label, splits in (("one_launch", 1), ("split", 4), ("split_combined", 32)):
            if splits > 1 and backend_name == "cute":  # it never splits: no such call
                continue
            forced = dict(options, num_splits=splits)
            rows[f"rel_attn_out_{label}"] = lambda forced=forced: op(*args, **forced)
            rows[f"api_out_{label}"] = lambda splits=splits: inkling_ops.rel_attn(
                case.q, case.key_cache, case.value_cache, **api_kwargs, num_splits=splits
            )
        rows["sdpa"] = sdpa
        samples = _rotated_samples(rows, calls_of=lambda name: calls if name == "sdpa" else heavy, rounds=rounds, device=device)
        for name, values in samples.items():
            results[f"{name}_us"] = statistics.median(values)
        results.setdefault("vllm_entry_point_us", None)
        problem = check_call(*args, 1, case.softmax_scale, [-1, -1], True, 0, out)
        _backend, plan = dispatch.plan_call(problem, case.q.device, None)
        results["default_num_splits"] = plan.num_splits
        results["rounds"] = rounds
        results["default_backend"] = backend_name
        results["requested_backend"] = backend
        if device == "cuda":
            import triton

            results["triton"] = triton.__version__
            results["gpu"] = torch.cuda.get_device_name()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--record", default=str(DEFAULT_RECORD), help="JSON-lines file to append to (default meta/host_overhead.jsonl)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per batch (default 2000; the calls that run kernels use 15%% of it)")
    parser.add_argument("--backend", default=None, help="the backend every call asks for (e.g. cute); default: the dispatcher's choice")
    parser.add_argument("--dispatcher-rows", action="store_true", help="measure only the dispatcher's own cost per registration style (see the docstring)")
    parser.add_argument("--split-breakdown", action="store_true", help="measure only where the split-KV decode's host time goes (CUDA; see the docstring)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rotated rounds (default 15 for --dispatcher-rows / --split-breakdown, 7 for the main probe's rows 3-6)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds is {args.rounds}; expected a positive number of rounds")
    if args.dispatcher_rows:
        results = dict(probe="dispatcher_rows", **dispatcher_rows(args.device, calls=args.calls, rounds=15 if args.rounds is None else args.rounds))
    elif args.split_breakdown:
        results = dict(probe="split_breakdown", **split_breakdown(args.device, calls=args.calls, rounds=15 if args.rounds is None else args.rounds))
    else:
        results = measure(args.device, calls=args.calls, backend=args.backend, rounds=7 if args.rounds is None else args.rounds)
    sha = benchmark_module().git_state(None)[0] or "unknown"  # $INKLING_GIT_SHA on the GPU machine (its tree has no .git)
    record = dict(
        results,
        device=args.device,
        torch=torch.__version__,
        inkling_ops=inkling_ops.__version__,
        git_sha=sha,
        command=" ".join([COMMAND, *(sys.argv[1:] if argv is None else argv)]),
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    width = max(34, *map(len, results))
    for key, value in results.items():
        print(f"{key:{width}s} {value:8.2f}" if isinstance(value, float) else f"{key:{width}s} {value}")
    path = Path(args.record)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
