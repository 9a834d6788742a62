"""Compile the Triton forward kernel for sm_90 without a GPU and report what the compiler made.

    python meta/tools/kernel_report.py            # every default configuration of the anchors

With ``--sass`` it also prints a digest of each variant's machine code, to tell whether a source
change altered what runs. For each variant it prints registers per thread, stack bytes (spills),
shared memory, and the
depth of the K/V software pipeline, read from Triton's TTGIR: the number of shared-memory buffers
of the multi-buffered K/V tiles (``ttg.local_alloc`` of ``N x tile``; one is being read while
the other ``N - 1`` are loading) and the largest ``ttg.async_wait {num = M}`` allowance (loads
still outstanding when a tile is first used; K and V are one commit group each).

Works on a CPU-only machine: ``triton.compile`` targets ``GPUTarget("cuda", 90, 32)`` and
``cuobjdump`` (shipped in Triton's wheel) reads the cubin. Integer arguments are marked divisible
by 16, as Triton specializes them at run time for the anchor shapes; without that the compiler
cannot vectorize K/V loads and the report would describe a kernel that never runs.
"""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Run as ``python meta/tools/kernel_report.py``: this checkout's inkling_ops.
if str(Path(__file__).resolve().parents[2]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from inkling_ops.kernels.triton_configs import FwdConfig, fwd_config, fwd_constexprs  # noqa: E402

#: Arguments Triton does not specialize (``do_not_specialize``, and floats).
_UNSPECIALIZED = {"num_tokens", "num_blocks", "num_reqs", "qk_scale"}
_FLOATS = {"qk_scale"}
#: Arguments whose value is 1 at run time (unit strides), specialized as constants by Triton.
_UNIT = {"stride_re"}


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
):
    """Triton's compiled kernel (not loaded on any device) for one variant of the forward kernel."""
    from inkling_ops.kernels.triton_fwd import rel_attn_fwd_kernel

    # One KV head (slot stride head_dim), K and V laid out alike, int32 key rows: the anchors.
    constexprs = fwd_constexprs(
        config, group=group, head_dim=head_dim, num_kv_heads=1, page_size=page, rel_extent=rel_extent,
        window_left=window_left, num_splits=num_splits, fwd_pass=fwd_pass, pass1_config=pass1_config,
    )._asdict()  # fmt: skip
    params = list(inspect.signature(rel_attn_fwd_kernel.fn).parameters)
    missing = [p for p in params if p.isupper() and p not in constexprs]
    if missing:
        raise ValueError(f"fwd_constexprs does not give the kernel's constexprs {missing}")
    return _compile_sm90(
        rel_attn_fwd_kernel, constexprs,
        pointer_types=dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", bt_ptr="*i32", seqlens_ptr="*i32", cu_ptr="*i32"),
        options=dict(num_warps=config.num_warps, num_stages=config.num_stages)
        | ({} if config.max_registers is None else dict(maxnreg=config.max_registers)),
    )  # fmt: skip


def compile_combine_sm90(*, num_splits: int, head_dim: int = 128):
    """Triton's compiled split-KV combine kernel for sm_90 (not loaded on any device)."""
    from inkling_ops.kernels.triton_combine import combine_blocks, rel_attn_combine_kernel

    splits_pad, block_s, block_d = combine_blocks(num_splits, head_dim)
    constexprs = dict(
        HEAD_DIM=head_dim, NUM_SPLITS=num_splits, SPLITS_PAD=splits_pad, BLOCK_S=block_s, BLOCK_D=block_d
    )
    return _compile_sm90(
        rel_attn_combine_kernel, constexprs,
        pointer_types=dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", cu_ptr="*i32"),
        options=dict(num_warps=4, num_stages=2),
    )  # fmt: skip


def _compile_sm90(kernel, constexprs: dict, *, pointer_types: dict, options: dict):
    """``triton.compile`` of ``kernel`` for sm_90 with the argument specialization Triton makes at
    run time for the anchor shapes: pointers (bf16 unless ``pointer_types`` says otherwise) and
    integers marked 16-divisible, unit strides folded to 1, ``_UNSPECIALIZED`` left alone."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = dict(constexprs)
    signature, attrs = {}, {}
    for i, name in enumerate(inspect.signature(kernel.fn).parameters):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in _UNIT:
            signature[name] = "constexpr"
            constexprs[name] = 1
        elif name.endswith("_ptr"):
            signature[name] = pointer_types.get(name, "*bf16")
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32" if name in _FLOATS else "i32"
            if name not in _UNSPECIALIZED:
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


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


#: (name, group, page, rel_extent, window_left, max_seqlen_q bucket) of the anchor cases.
ANCHOR_VARIANTS = [
    ("prefill global 8/1", 8, 128, 1024, -1, 8192),
    ("prefill global 8/1", 8, 16, 1024, -1, 8192),  # one launch: pages smaller than TWO_PASS_MIN_PAGE
    ("prefill sliding 8/2", 4, 128, 512, 511, 8192),
    ("decode global 8/1", 8, 128, 1024, -1, 1),
    ("decode global 8/1", 8, 16, 1024, -1, 1),
    ("decode sliding 8/2", 4, 128, 512, 511, 1),
    ("decode sliding 8/2", 4, 16, 512, 511, 1),
]


def default_variants() -> list[tuple[str, dict]]:
    """Every kernel variant the default configurations launch on the anchor cases."""
    variants = []
    for name, group, page, extent, window, bucket in ANCHOR_VARIANTS:
        config = fwd_config(
            head_dim=128, q_per_kv=group, max_seqlen_q_bucket=bucket, window_left=window, rel_extent=extent,
            page_size=page,
        )  # fmt: skip
        common = dict(group=group, page=page, rel_extent=extent, window_left=window)
        label = f"{name} page {page}"
        if bucket <= 16 and 0 <= window < extent:
            # the anchor's 64 requests x 2 KV heads run unsplit (TRITON_SPLIT_POLICY's band-only rule)
            variants.append((f"{label} unsplit", dict(common, config=config)))
        elif bucket <= 16:
            variants.append((f"{label} split-KV", dict(common, config=config, num_splits=4)))
        elif config.plain is not None and (window < 0 or window >= extent):
            variants.append((f"{label} pass 1 (plain)", dict(common, config=config.plain, fwd_pass=1)))
            variants.append((f"{label} pass 2 (band)", dict(common, config=config, fwd_pass=2, pass1_config=config.plain)))
        else:
            variants.append((f"{label} one pass", dict(common, config=config)))
    return variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per variant instead of a table")
    parser.add_argument("--sass", action="store_true", help="also print each variant's SASS instruction count and digest")
    args = parser.parse_args(argv)
    import json

    import triton

    if not args.json:
        print(f"triton {triton.__version__}, target sm_90")
    for label, kwargs in default_variants():
        config = kwargs["config"]
        compiled = compile_fwd_sm90(**kwargs)
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
