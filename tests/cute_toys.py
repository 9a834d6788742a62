"""A toy CuTe DSL kernel for the runtime's tests and the launch probe (not part of the product):
``out[i] = x[i] * scale`` over a 1-D fp32 tensor of any length, launched on the env stream.

Equivalent PyTorch: ``torch.mul(x, scale, out=out)``.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cuda.bindings.driver import CUstream

from inkling_ops.kernels import cute_runtime

THREADS = 128


@cute.kernel
def _scale_kernel(x: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32):
    block, _, _ = cute.arch.block_idx()
    thread, _, _ = cute.arch.thread_idx()
    i = block * THREADS + thread
    if i < x.shape[0]:
        out[i] = x[i] * scale


@cute.jit
def scale_copy(x: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32, stream: CUstream):
    """x, out: (n,) fp32; runtime signature ``(x, out, scale)`` (the stream is torch's current)."""
    n = x.shape[0]
    _scale_kernel(x, out, scale).launch(grid=((n + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1), stream=stream)


def compile_scale(*, arch: str = "sm_90a", ptx: bool = False) -> cute_runtime.CuteCompiled:
    """The toy compiled for ``arch``: any length (a symbolic size), 16-byte aligned tensors."""
    n = cute.sym_int()
    x = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=16)
    out = cute.runtime.make_fake_compact_tensor(cutlass.Float32, (n,), assumed_align=16)
    return cute_runtime.compile_for_arch(scale_copy, x, out, cutlass.Float32(1.0), cute_runtime.env_stream(), arch=arch, ptx=ptx)
