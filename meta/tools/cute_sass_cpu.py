"""The CuTe kernel's SASS without a GPU (lab tool, not the product).

    python3 meta/tools/cute_sass_cpu.py --out /tmp/k.sass [--group 8] [--head-dim 128] [--set key=value ...]
    python3 meta/tools/sass_stalls.py --static /tmp/k.sass      # code per region and band block

Compiles the kernel the backend builds (``cute_fwd_sm90.compile_fwd``; ``--set`` changes one
schedule option, e.g. ``--set bias_tma=False``) for ``sm_90a``, assembles its PTX with ``ptxas``
and disassembles the cubin with ``nvdisasm``. ptxas must be CUDA 13 (the DSL's PTX version);
nvdisasm comes from ``--nvdisasm``, ``$NVDISASM`` or ``PATH`` (no GPU driver needed: ``pip
download nvidia-cuda-nvdisasm`` gives a wheel with ``nvidia/cu13/bin/nvdisasm``). What the H200
runs is this SASS; the device visits' ``cuobjdump -sass`` of the DSL's kept cubin reads the same.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab  # noqa: E402,F401  (the repository root on sys.path, from any working directory)


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` with a Python literal value (``True``, ``8.0``, ``'tile_pages'``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise ValueError(f"--set {text!r}: expected key=value, e.g. bias_tma=False")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise ValueError(f"--set {text!r}: the value must be a Python literal (True, 8.0, 'tile_pages')") from None


def find_tool(name: str, given: str | None) -> str:
    """The path of ``name`` (``given``, else ``$NAME``, else on PATH); a ValueError saying where
    to get it when none is found."""
    path = given or os.environ.get(name.upper()) or shutil.which(name)
    if not path or not Path(path).is_file():
        raise ValueError(f"{name} not found (given {given!r}); pass --{name} PATH or set ${name.upper()}")
    return path


def kernel_sass(group: int, head_dim: int, settings: dict, nvdisasm: str, ptxas: str) -> str:
    """The disassembly of the kernel of ``(bfloat16, head_dim, q_per_kv=group)`` with ``settings``
    over the backend's schedule."""
    from inkling_ops.kernels import cute_fwd_sm90, cute_runtime

    config = cute_fwd_sm90.CuteFwdConfig(dtype="bfloat16", head_dim=head_dim, q_per_kv=group)
    ptx = cute_runtime.compile_with(
        lambda flags: cute_fwd_sm90.compile_fwd(config, options=flags, **settings), arch="sm_90a", ptx=True
    ).ptx
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        built = subprocess.run([ptxas, "-arch=sm_90a", str(src), "-o", str(cubin)], check=True, capture_output=True, text=True)
        # ptxas's warnings, e.g. C7511 (wgmmas serialized for want of registers: every GEMM waited on)
        for line in built.stderr.splitlines():
            if "warning" in line.lower() or "performance" in line.lower():
                print(f"ptxas: {line.strip()}", file=sys.stderr)
        return subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="where the SASS text goes")
    p.add_argument("--group", type=int, default=8, help="query heads per KV head (default 8)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a schedule option over the build's")
    p.add_argument("--nvdisasm", default=None)
    p.add_argument("--ptxas", default=None)
    args = p.parse_args(argv)
    try:
        settings = dict(parse_setting(s) for s in args.set)
        nvdisasm, ptxas = find_tool("nvdisasm", args.nvdisasm), find_tool("ptxas", args.ptxas)
    except ValueError as exc:
        p.error(str(exc))
    sass = kernel_sass(args.group, args.head_dim, settings, nvdisasm, ptxas)
    Path(args.out).write_text(sass)
    print(f"{args.out}: {sum(1 for line in sass.splitlines() if '*/' in line and ';' in line)} SASS lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
