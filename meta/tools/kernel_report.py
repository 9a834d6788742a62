"""Compile the Triton forward kernel for sm_90 without a GPU and report what the compiler made.

    python meta/tools/kernel_report.py            # every default configuration of the anchors

With ``--sass`` it also prints a digest of each variant's machine code, to tell whether a source
change altered what runs. For each variant it prints registers per thread, stack bytes (spills),
shared memory, and the
depth of the K/V software pipeline, read from Triton's TTGIR: the number of shared-memory buffers
of the multi-buffered K/V tiles (``ttg.local_alloc`` of ``N x tile``; one is being read while
the other ``N - 1`` are loading) and the largest ``ttg.async_wait {num = M}`` allowance (loads
still outstanding when a tile is first used; K and V are one commit group each).

Works on a CPU-only machine: the variants are compiled by the package's own ahead-of-time path
(``kernel_plan`` of each anchor's compile key, ``compile_spec`` of its kernel specs, for
``GPUTarget("cuda", 90, 32)``), so the report describes exactly the kernels the backend runs,
with the same argument specialisation; ``cuobjdump`` (shipped in Triton's wheel) reads the cubin.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Run as ``python meta/tools/kernel_report.py``: this checkout's inkling_ops.
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from inkling_ops.compile_keys import CompileKey  # noqa: E402
from inkling_ops.kernels.triton_configs import FwdConfig, fwd_constexprs, slot_shift  # noqa: E402


@dataclass(frozen=True)
class KernelReport:
    """What ptxas and Triton's pipeliner made of one variant."""

    registers: int
    stack_bytes: int
    shared_bytes: int
    kv_buffers: int  # 1: no multi-buffering (loads are not pipelined)
    max_wait_allowance: int
    #: ``ttg.convert_layout`` ops moving a (rows x BLOCK_N) tile from a blocked layout into the MMA
    #: accumulator's layout: the bias of a ``tl.load`` gather (through shared memory, every tile);
    #: 0 when the bias is gathered straight into the MMA layout (``FwdConfig.asm_gather``)
    score_tile_conversions: int = 0

    def line(self) -> str:
        return (
            f"{self.registers:3d} regs, {self.stack_bytes:4d} B stack, {self.shared_bytes // 1024:3d} KiB smem, "
            f"{self.kv_buffers} K/V buffers, async_wait allowance {self.max_wait_allowance}, "
            f"{self.score_tile_conversions} score-tile layout conversions"
        )


def compile_fwd_sm90(
    config: FwdConfig,
    *,
    group: int,
    page: int,
    rel_extent: int,
    window_left: int = -1,
    head_dim: int = 128,
    num_splits: int = 1,
    fwd_pass: int = 0,
    pass1_config: FwdConfig | None = None,
    num_kv_heads: int = 1,
):
    """Triton's compiled kernel (not loaded on any device) for one variant of the forward kernel
    with an explicit ``config``: bf16, the standard aligned cache layout, sm_90."""
    from inkling_ops.kernels.triton_fwd import fwd_spec
    from inkling_ops.kernels.triton_launch import compile_spec

    constexprs = fwd_constexprs(
        config, group=group, head_dim=head_dim, num_kv_heads=num_kv_heads, page_size=page, rel_extent=rel_extent,
        window_left=window_left, num_splits=num_splits, fwd_pass=fwd_pass, pass1_config=pass1_config,
    )  # fmt: skip
    return compile_spec(fwd_spec(constexprs, config, dtype="bfloat16", kv_dtype="bfloat16", aligned=True, arch=90))


def compile_combine_sm90(*, num_splits: int, head_dim: int = 128):
    """Triton's compiled split-KV combine kernel for sm_90 (not loaded on any device)."""
    from inkling_ops.kernels.triton_combine import combine_spec
    from inkling_ops.kernels.triton_launch import compile_spec

    return compile_spec(combine_spec(num_splits=num_splits, head_dim=head_dim, dtype="bfloat16", aligned=True, arch=90))


def compile_key_sm90(key: CompileKey) -> list:
    """Every kernel of ``key``, freshly compiled (every stage's text kept), in launch order."""
    from inkling_ops.backends.triton_backend import kernel_plan
    from inkling_ops.kernels.triton_launch import compile_spec

    return [compile_spec(spec) for spec in kernel_plan(key).specs]


def _cuobjdump(compiled, flag: str) -> str:
    """``cuobjdump <flag>`` (the one in Triton's wheel) on the compiled kernel's cubin."""
    import triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run(
            [triton.knobs.nvidia.cuobjdump.path, flag, f.name], capture_output=True, text=True, check=True
        ).stdout


def sass_digest(compiled) -> tuple[int, str]:
    """(instruction count, short sha1) of the kernel's SASS with addresses and comments removed:
    two builds with the same digest run the same machine code."""
    import hashlib

    sass = _cuobjdump(compiled, "--dump-sass")
    lines = [
        re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split(";")[0].strip()
        for line in sass.splitlines()
        if re.match(r"^\s*/\*[0-9a-f]{4,}\*/", line)
    ]
    return len(lines), hashlib.sha1("\n".join(lines).encode()).hexdigest()[:12]


def report(compiled, *, block_n: int | None = None) -> KernelReport:
    """Registers, stack and shared memory (cuobjdump), the pipeline depth and, given the
    variant's ``block_n``, the blocked-to-MMA conversions of score tiles (TTGIR)."""
    usage = _cuobjdump(compiled, "--dump-resource-usage")
    regs = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    ttgir = compiled.asm["ttgir"]
    waits = [int(n) for n in re.findall(r"ttg\.async_wait[^\n]*\{num = (\d+)", ttgir)]
    buffers = [int(n) for n in re.findall(r"ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x\d+x\d+x", ttgir)]
    return KernelReport(
        registers=int(regs.group(1)) if regs else -1,
        stack_bytes=int(stack.group(1)) if stack else -1,
        shared_bytes=int(compiled.metadata.shared),
        kv_buffers=max(buffers, default=1),
        max_wait_allowance=max(waits, default=0),
        score_tile_conversions=0 if block_n is None else _score_tile_conversions(ttgir, block_n),
    )


def _score_tile_conversions(ttgir: str, block_n: int) -> int:
    """``ttg.convert_layout`` of a ``R x block_n`` tensor from ``#blocked*`` to ``#mma*`` (not to a
    dot operand), as a (rows x keys) bias tile loaded with ``tl.load`` needs before its add."""
    pattern = rf"ttg\.convert_layout %\S+ : tensor<\d+x{block_n}x\w+, #blocked\d*> -> tensor<\d+x{block_n}x\w+, #mma\d*>"
    return len(re.findall(pattern, ttgir))


#: (name, group, KV heads, page, rel_extent, window_left, max_seqlen_q bucket, splits) of the anchor
#: cases: global 8 / 1 heads decodes 64 requests x 8K in 4 splits; sliding 8 / 2 heads runs its 64
#: requests unsplit (TRITON_SPLIT_POLICY's band-only rule).
ANCHOR_VARIANTS = [
    ("prefill global 8/1", 8, 1, 128, 1024, -1, 8192, 1),
    ("prefill global 8/1", 8, 1, 16, 1024, -1, 8192, 1),  # one launch: pages smaller than TWO_PASS_MIN_PAGE
    ("prefill sliding 8/2", 4, 2, 128, 512, 511, 8192, 1),
    ("decode global 8/1", 8, 1, 128, 1024, -1, 1, 4),
    ("decode global 8/1", 8, 1, 16, 1024, -1, 1, 4),
    ("decode sliding 8/2", 4, 2, 128, 512, 511, 1, 1),
    ("decode sliding 8/2", 4, 2, 16, 512, 511, 1, 1),
]


def anchor_key(group: int, num_kv_heads: int, page: int, extent: int, window: int, bucket: int, splits: int) -> CompileKey:
    """The compile key of an anchor call: bf16, head_dim 128, the standard aligned layout, sm_90a."""
    return CompileKey(
        dtype="bfloat16", kv_dtype="bfloat16", head_dim=128, q_per_kv=group, page_size=page, rel_extent=extent,
        causal=True, window_left=window, max_seqlen_q_bucket=bucket, num_splits=splits, arch="sm_90a",
        backend="triton", num_kv_heads=num_kv_heads, kv_slot_shift=slot_shift(num_kv_heads * 128),
    )  # fmt: skip


def default_variants() -> list[tuple[str, CompileKey, int]]:
    """Every forward-kernel variant the default configurations launch on the anchor cases:
    (label, the anchor's key, the variant's index among the key's launches)."""
    from inkling_ops.backends.triton_backend import kernel_plan

    variants = []
    for name, group, heads, page, extent, window, bucket, splits in ANCHOR_VARIANTS:
        key = anchor_key(group, heads, page, extent, window, bucket, splits)
        label = f"{name} page {page}"
        specs = kernel_plan(key).specs
        if splits > 1:
            variants.append((f"{label} split-KV", key, 0))  # launch 1 is the combine
        elif len(specs) == 2:
            variants.append((f"{label} pass 1 (plain)", key, 0))
            variants.append((f"{label} pass 2 (band)", key, 1))
        elif bucket <= 16:
            variants.append((f"{label} unsplit", key, 0))
        else:
            variants.append((f"{label} one pass", key, 0))
    return variants


def variant_config(key: CompileKey, index: int) -> FwdConfig:
    """The launch configuration of launch ``index`` of ``key`` (a two-pass key's first launch runs
    its plain configuration)."""
    from inkling_ops.backends.triton_backend import kernel_plan

    config = kernel_plan(key).config
    return config.plain if config.plain is not None and len(kernel_plan(key).specs) == 2 and index == 0 else config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per variant instead of a table")
    parser.add_argument("--sass", action="store_true", help="also print each variant's SASS instruction count and digest")
    args = parser.parse_args(argv)
    import json

    import triton

    if not args.json:
        print(f"triton {triton.__version__}, target sm_90")
    from inkling_ops.backends.triton_backend import kernel_plan
    from inkling_ops.kernels.triton_launch import compile_spec

    for label, key, index in default_variants():
        config = variant_config(key, index)
        compiled = compile_spec(kernel_plan(key).specs[index])
        result = report(compiled, block_n=config.block_n)
        if args.json:
            print(json.dumps(dict(variant=label, config=[config.block_m, config.block_n, config.num_warps, config.num_stages], **result.__dict__)), flush=True)
            continue
        shape = f"{config.block_m}x{config.block_n}, {config.num_warps} warps, {config.num_stages} stages"
        sass = ""
        if args.sass:
            count, digest = sass_digest(compiled)
            sass = f", SASS {count} instructions {digest}"
        print(f"{label:42s} {shape:30s} {result.line()}{sass}", flush=True)


if __name__ == "__main__":
    main()
