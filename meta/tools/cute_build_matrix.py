"""ptxas's verdict on every CuTe build with schedule options changed, without a GPU (lab tool).

    python3 meta/tools/cute_build_matrix.py --set bias_tma=False [--set ...] [--groups 4,8] [--head-dims 128]

For each (head_dim, q_per_kv, grid) the backend builds, compiles ``cute_fwd_sm90.compile_fwd``
with the ``--set`` options over its :func:`schedule` for ``sm_90a``, assembles the PTX with
``ptxas -v`` (CUDA 13) and prints one row: registers, spill bytes, whether ptxas serialized the
wgmmas (C7511, every GEMM then waited on), and, when nvdisasm is there (``$NVDISASM`` or PATH;
``pip download nvidia-cuda-nvdisasm`` has one), the ``WARPGROUP.DEPBAR`` count of the DSL's own
cubin (kept by ``CUTE_DSL_KEEP=cubin``: what the GPU runs; the build's is 4, a serialized one
has 40-72). A build the options do not apply to prints the kernel's refusal. One JSON line a build
with ``--json``. What an option costs before any device time: a C7511 build is slow on any case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402,F401  (the repository root on sys.path)
from cute_sass_cpu import parse_setting  # noqa: E402

GROUPS = (1, 2, 3, 4, 6, 8, 16)
HEAD_DIMS = (128, 64)


def assemble(ptx: str, workdir: Path) -> dict:
    """ptxas -v on ``ptx``: registers, spill bytes, C7511; with nvdisasm, the DEPBAR and
    instruction counts of the DSL's cubin in ``workdir`` (else of ptxas's)."""
    (workdir / "k.ptx").write_text(ptx)
    cubin = workdir / "ptxas" / "k.cubin"
    cubin.parent.mkdir()
    run = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(workdir / "k.ptx"), "-o", str(cubin)], capture_output=True, text=True)
    if run.returncode:
        return dict(error=run.stderr[-500:])
    err = run.stderr
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", err)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", err)]
    row = dict(registers=max(regs, default=0), spill_bytes=sum(spills), c7511="instructions are serialized" in err)
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if nvdisasm:
        kept = sorted(workdir.glob("*.cubin"))
        sass = subprocess.run([nvdisasm, str(kept[0] if kept else cubin)], capture_output=True, text=True).stdout
        row["depbar"] = sass.count("WARPGROUP.DEPBAR")
        row["instructions"] = len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/", sass, re.M))
    return row


@contextlib.contextmanager
def _keeping_cubins_in(directory: str):
    """``CUTE_DSL_KEEP=cubin`` into ``directory`` meanwhile (cute_runtime reads both at each
    compile); the caller's values come back after."""
    saved = {k: os.environ.get(k) for k in ("CUTE_DSL_KEEP", "CUTE_DSL_DUMP_DIR")}
    os.environ.update(CUTE_DSL_KEEP="cubin", CUTE_DSL_DUMP_DIR=directory)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a schedule option over schedule() (repeatable)")
    p.add_argument("--groups", default=",".join(map(str, GROUPS)), help="q_per_kv values (default every one the backend builds)")
    p.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)))
    p.add_argument("--grids", default="dense,compact")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--json", action="store_true", help="one JSON line a build")
    args = p.parse_args(argv)
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    if shutil.which("ptxas") is None:
        raise SystemExit("ptxas (CUDA 13) is not on PATH")
    from inkling_ops.kernels import cute_fwd_sm90, cute_runtime

    variant = dict(parse_setting(s) for s in args.set)
    bad = 0
    for head_dim in map(int, args.head_dims.split(",")):
        for group in map(int, args.groups.split(",")):
            for grid in args.grids.split(","):
                config = cute_fwd_sm90.CuteFwdConfig(dtype=args.dtype, head_dim=head_dim, q_per_kv=group, compact_grid=grid == "compact")
                row = dict(dtype=args.dtype, head_dim=head_dim, q_per_kv=group, grid=grid, **{k: v for k, v in variant.items()})
                with tempfile.TemporaryDirectory() as d, _keeping_cubins_in(d):
                    try:
                        ptx = cute_runtime.compile_with(
                            lambda flags: cute_fwd_sm90.compile_fwd(config, options=flags, **variant), arch="sm_90a", ptx=True
                        ).ptx
                    except ValueError as e:
                        row["refused"] = str(e)[:200]
                    else:
                        row.update(assemble(ptx, Path(d)))
                bad += bool(row.get("c7511") or row.get("spill_bytes") or row.get("error"))
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    verdict = row.get("refused") or row.get("error") or (
                        f"{row['registers']} regs, {row['spill_bytes']} B spilled, "
                        f"{'C7511 (wgmmas serialized)' if row['c7511'] else 'pipelined'}"
                        + (f", {row['depbar']} DEPBAR, {row['instructions']} instructions" if "depbar" in row else "")
                    )
                    print(f"D {head_dim:3d}  G {group:2d}  {grid:7s}  {verdict}", flush=True)
    print(f"{bad} build(s) spilled, serialized or failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
