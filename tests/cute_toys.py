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


@cute.kernel
def _first_column_kernel(q: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32):
    block, _, _ = cute.arch.block_idx()
    thread, _, _ = cute.arch.thread_idx()
    t = block * THREADS + thread
    if t < q.shape[0]:
        out[t, 0, 0] = (q[t, 0, 0].to(cutlass.Float32) * scale).to(out.element_type)


@cute.jit
def rel_attn_shaped(
    q: cute.Tensor, key_cache: cute.Tensor, value_cache: cute.Tensor, out: cute.Tensor, block_table: cute.Tensor,
    cache_seqlens: cute.Tensor, cu_seqlens_q: cute.Tensor, rel_logits: cute.Tensor,
    softmax_scale: cutlass.Float32, window_left: cutlass.Int32, max_seqlen_q: cutlass.Int32, stream: CUstream,
):
    """rel_attn's runtime arguments (8 tensors, 3 scalars), for timing a call of that width; it
    computes only ``out[:, 0, 0] = q[:, 0, 0] * softmax_scale`` (the others are checked, not read)."""
    tokens = q.shape[0]
    _first_column_kernel(q, out, softmax_scale).launch(
        grid=((tokens + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1), stream=stream
    )


def compile_rel_attn_shaped(*, arch: str = "sm_90a", head_dim: int = 128) -> cute_runtime.CuteCompiled:
    """:func:`rel_attn_shaped` for bf16 with ``head_dim``: tokens, heads, pages, batch and the bias
    extent are symbolic; last dimensions contiguous; 16-byte aligned (int32 metadata: 4)."""
    bf16, i32 = cutlass.BFloat16, cutlass.Int32
    tokens, heads, kv_heads, blocks, page, batch, width, extent = (cute.sym_int() for _ in range(8))
    row_major = lambda rank: tuple(reversed(range(rank)))  # noqa: E731
    fake = lambda dtype, shape, align=16: cute.runtime.make_fake_compact_tensor(  # noqa: E731
        dtype, shape, stride_order=row_major(len(shape)), assumed_align=align
    )
    return cute_runtime.compile_for_arch(
        rel_attn_shaped,
        fake(bf16, (tokens, heads, head_dim)),
        fake(bf16, (blocks, page, kv_heads, head_dim)),
        fake(bf16, (blocks, page, kv_heads, head_dim)),
        fake(bf16, (tokens, heads, head_dim)),
        fake(i32, (batch, width), 4),
        fake(i32, (batch,), 4),
        fake(i32, (cute.sym_int(),), 4),
        fake(bf16, (tokens, heads, extent)),
        cutlass.Float32(1.0), cutlass.Int32(-1), cutlass.Int32(1),
        cute_runtime.env_stream(),
        arch=arch,
    )
