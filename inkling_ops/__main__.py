"""``python -m inkling_ops {demo,bench,warmup,cache}``: the package's command line.

    python -m inkling_ops demo [--device cuda]          a tiny Inkling model served by our loop, checked against HF
    python -m inkling_ops demo step [--device cuda]     one attention step, eager and compiled, checked
    python -m inkling_ops bench [--page-size 16]        our op on a few cases on this GPU: a table
    python -m inkling_ops warmup --heads 8 --kv-heads 1 --page-size 16 --rel-extent 1024 \\
        --max-num-seqs 256 --max-num-batched-tokens 8192 --max-model-len 131072
    python -m inkling_ops warmup --config serving.json  (the same fields as JSON; --dry-run lists keys)
    python -m inkling_ops warmup ... --arch sm_90a --num-sms 132   (for an H200, on a machine without a GPU)
    CUTE_DSL_ARCH=sm_90a python -m inkling_ops warmup ... --backend cute   (likewise: it never splits, so
        no SM count; without a GPU the DSL's CUTE_DSL_ARCH is the default --arch)
    python -m inkling_ops cache info | clear            the on-disk kernel cache
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

from .kernels.arch import arch_capability, cuda_arch
from .cli_args import missing_cuda_device

#: ServingConfig fields and their flags (dtype as a name such as "bfloat16").
_CONFIG_FLAGS = {
    "num_heads": "--heads",
    "num_kv_heads": "--kv-heads",
    "head_dim": "--head-dim",
    "page_size": "--page-size",
    "rel_extent": "--rel-extent",
    "window_left": "--window-left",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
}
_CONFIG_DEFAULTS = dict(num_heads=8, num_kv_heads=1, head_dim=128, page_size=16, rel_extent=1024, window_left=-1,
                        max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=131072)  # fmt: skip


def _dtype(name) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"warmup: dtype is {name!r}; expected a torch dtype name such as 'bfloat16'")
    return dtype


def _arch(arch: str, source: str = "--arch") -> str:
    """``--arch`` (or the setting ``source`` names) as a CUDA device reports it (``sm_90a`` for an
    H100 / H200, ``sm_80`` for an A100): the name the serving process's kernels are stored and
    looked up under."""
    try:
        major, minor = arch_capability(arch)
        if not 7 <= major <= 12:  # Volta to Blackwell: an sm_900 is a typo, not a device
            raise ValueError(arch)
        reported = cuda_arch((major, minor))
    except ValueError:
        raise ValueError(f"warmup: {source} is {arch!r}; expected a CUDA arch such as 'sm_90a' (H100, H200) or 'sm_80' (A100)") from None
    if arch != reported:
        raise ValueError(f"warmup: {source} is {arch!r}; a device of that compute capability reports {reported!r}, "
                         "under which its kernels are looked up")  # fmt: skip
    return arch


def _device(text: str, command: str) -> torch.device:
    """``--device`` as a torch device that exists here, or a ValueError naming the flag."""
    try:
        device = torch.device(text)
    except RuntimeError as exc:
        raise ValueError(f"{command}: --device is {text!r}; expected a torch device such as 'cuda' or 'cpu' ({exc})") from None
    missing = missing_cuda_device(device)
    if missing is not None:
        raise ValueError(f"{command}: --device is {text!r}, but {missing}")
    return device


def serving_config(args: argparse.Namespace):
    """The ServingConfig of the warmup flags, the JSON file's fields overriding the defaults first."""
    from .serving import ServingConfig

    fields = dict(_CONFIG_DEFAULTS, dtype="bfloat16")
    if args.config:
        try:
            with open(args.config) as f:
                loaded = json.load(f)
        except OSError as exc:
            raise ValueError(f"warmup: --config {args.config}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise ValueError(f"warmup: --config {args.config} is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(loaded), "a number")
            raise ValueError(f"warmup: --config {args.config} holds {kind}; expected a JSON object of ServingConfig fields")
        known = {f.name for f in dataclasses.fields(ServingConfig)}
        unknown = sorted(set(loaded) - known)
        if unknown:
            raise ValueError(f"warmup: --config {args.config} has unknown fields {unknown}; expected some of {sorted(known)}")
        fields.update(loaded)
    for name in _CONFIG_FLAGS:
        value = getattr(args, name)
        if value is not None:
            fields[name] = value
    if args.dtype is not None:
        fields["dtype"] = args.dtype
    fields["dtype"] = _dtype(fields["dtype"])
    if fields.get("kv_dtype") is not None:
        fields["kv_dtype"] = _dtype(fields["kv_dtype"])
    try:
        return ServingConfig(**fields)
    except TypeError as exc:  # a field of the wrong type, named by ServingConfig
        raise ValueError(f"warmup: {exc}") from None


def _warmup(args: argparse.Namespace) -> int:
    from . import dispatch
    from .compile_keys import DeviceFacts
    from .serving import enumerate_compile_keys
    from .warmup import warmup

    config = serving_config(args)
    print(f"serving configuration: {config}")
    arch, num_sms = args.arch, args.num_sms
    if arch is not None:
        arch = _arch(arch)
    if num_sms is not None and num_sms < 1:
        raise ValueError(f"warmup: --num-sms is {num_sms}; expected the target's SM count (H200: 132)")
    if args.device is not None:
        _device(args.device, "warmup")
    never_splits = args.backend is not None and dispatch.get_backend(args.backend).split_policy is None
    if arch is None and never_splits and not torch.cuda.is_available() and os.environ.get("CUTE_DSL_ARCH"):
        # the CuTe DSL's own target setting, on a machine without a GPU: checked as --arch is
        arch = _arch(os.environ["CUTE_DSL_ARCH"], source="CUTE_DSL_ARCH")
    if never_splits and arch is not None and num_sms is None:
        num_sms = 0  # the SM count enters only split counts, and this backend never splits
    if (arch is None) != (num_sms is None):
        raise ValueError(f"warmup: --arch is {arch!r} and --num-sms {num_sms!r}; expected both or neither")
    facts = DeviceFacts(arch=arch, num_sms=num_sms) if arch else None
    if args.dry_run:
        if facts is None:
            facts = dispatch.device_facts(torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")))
        keys = sorted(enumerate_compile_keys(config, facts=facts, backend=args.backend))
        for key in keys:
            print(f"  {key}")
        names = "+".join(sorted({key.backend for key in keys})) or args.backend
        print(f"{len(keys)} compile keys on {facts.arch} for backend {names!r}")
        if not keys:
            print(f"(no call of this configuration runs on {facts.arch} with backend {args.backend!r}; "
                  "for a GPU that is not here, pass --arch and --num-sms)")
        return 0
    summary = warmup(config, facts=facts, device=args.device, backend=args.backend, progress=not args.no_progress)
    print(summary)
    return 0


def _cache(args: argparse.Namespace) -> int:
    from . import kernel_cache

    if args.action == "info":
        print(kernel_cache.info())
    else:
        print(f"removed {kernel_cache.clear()} compiled variants from {kernel_cache.cache_dir()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m inkling_ops", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="a tiny Inkling model served by our loop, checked against HF eager", add_help=False)
    sub.add_parser("bench", help="our op on a few cases on this device: a table", add_help=False)
    warm = sub.add_parser("warmup", help="compile every kernel a serving configuration can reach")
    warm.add_argument("--config", help="a JSON file of ServingConfig fields (flags override it)")
    for name, flag in _CONFIG_FLAGS.items():
        warm.add_argument(flag, dest=name, type=int, default=None, help=f"default {_CONFIG_DEFAULTS[name]}")
    warm.add_argument("--dtype", default=None, help="default bfloat16")
    warm.add_argument("--device", default=None, help="default cuda when available, else cpu")
    warm.add_argument("--arch", default=None, help="compile for this CUDA arch (e.g. sm_90a) instead of the local device; with --num-sms (no GPU needed)")
    warm.add_argument("--num-sms", type=int, default=None, help="SM count of the --arch device (H200: 132); not needed for a backend that never splits (cute)")
    warm.add_argument("--backend", default=None, help="default: the dispatcher's choice")
    warm.add_argument("--dry-run", action="store_true", help="list the compile keys, run nothing")
    warm.add_argument("--no-progress", action="store_true")
    cache = sub.add_parser("cache", help="the on-disk kernel cache")
    cache.add_argument("action", choices=("info", "clear"))

    if argv and argv[0] in ("demo", "bench"):  # their own parsers take the rest of the line
        if argv[0] == "demo":
            from .demo import main as demo_main

            return demo_main(argv[1:])
        from .bench import main as bench_main

        return bench_main(argv[1:])
    args = parser.parse_args(argv)
    import inkling_ops  # noqa: F401  (registers the ops)

    try:
        return _warmup(args) if args.command == "warmup" else _cache(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
