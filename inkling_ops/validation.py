"""Argument checks for rel_attn: shapes, dtypes, devices and scalars (contract section 5).

Everything here reads tensor metadata only (never tensor contents), so it runs before any
kernel launch, never synchronizes with the device, and also runs on fake tensors at trace
time. Device-resident values (block ids, lengths) are checked by :mod:`inkling_ops.checked`
when the opt-in checked mode is on.

Every failure is a ``TypeError`` (wrong kind of object) or ``ValueError`` (wrong value) whose
message names the argument, the value seen and what was expected.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .problem import RelAttnProblem

OP_NAME = "inkling::rel_attn"

#: dtypes a caller may pass for q / caches / rel_logits / out. float32 is for the reference path.
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


#: the most keys a request's block-table row may address (max_blocks_per_seq * block_size): the
#: kernels compute key indices in int32, and a tile's index past a capacity near 2**31 would wrap
MAX_KV_CAPACITY = 2**30


def _fail(arg: str, got: object, expected: str) -> ValueError:
    return ValueError(f"{OP_NAME}: argument '{arg}' is {got}; expected {expected}")


def _shape(t: torch.Tensor) -> tuple:
    return tuple(t.shape)


def _check_tensor(arg: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{OP_NAME}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    return t


def _check_index_tensor(arg: str, t: object, ndim: int, device: torch.device) -> torch.Tensor:
    t = _check_tensor(arg, t)
    if t.dtype != torch.int32:
        raise _fail(arg, f"of dtype {t.dtype}", "torch.int32")
    if t.dim() != ndim:
        raise _fail(arg, f"of rank {t.dim()} (shape {_shape(t)})", f"rank {ndim}")
    if t.device != device:
        raise _fail(arg, f"on device {t.device}", f"the device of q ({device}); the CUDA path takes no CPU tensors")
    return t


#: the first int past the op schema's 64-bit ints
_INT64_END = 2**63


def _check_int_kind(arg: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, torch.SymInt)):
        raise TypeError(f"{OP_NAME}: argument '{arg}' must be an int, got {type(value).__name__}")
    if type(value) is int and not -_INT64_END <= value < _INT64_END:
        raise _fail(arg, value, "an int that fits in 64 bits (the op's schema)")


def _check_float_kind(arg: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{OP_NAME}: argument '{arg}' must be a float, got {type(value).__name__}")


def normalize_window(window_size: object) -> int:
    """Map ``window_size=(left, right)`` to ``window_left`` (-1 means no window).

    Accepted: ``(-1, -1)`` or ``(-1, 0)`` for no window, ``(left, 0)`` with ``left >= 0``.
    """
    if not isinstance(window_size, Sequence) or isinstance(window_size, str) or len(window_size) != 2:
        raise TypeError(
            f"{OP_NAME}: argument 'window_size' must be a pair (left, right) of ints, got {window_size!r}"
        )
    left, right = window_size
    if not isinstance(left, int) or not isinstance(right, int) or isinstance(left, bool) or isinstance(right, bool):
        raise TypeError(f"{OP_NAME}: argument 'window_size' must hold two ints, got {window_size!r}")
    if left < -1:
        raise _fail("window_size", f"{tuple(window_size)!r}", "left >= -1 (-1: no window)")
    if left >= _INT64_END:
        raise _fail("window_size", f"{tuple(window_size)!r}", "left < 2**63 (an int of the op's schema)")
    if left == -1:
        if right not in (-1, 0):
            raise _fail("window_size", f"{tuple(window_size)!r}", "right == 0 (causal attention) or (-1, -1)")
        return -1
    if right != 0:
        raise _fail("window_size", f"{tuple(window_size)!r}", "right == 0: rel_attn is causal, only (left, 0) windows")
    return left


_TENSOR_ARGS = ("q", "key_cache", "value_cache", "block_table", "cache_seqlens", "cu_seqlens_q", "rel_logits")


def check_kinds(
    tensors: Sequence[object],
    out: object,
    max_seqlen_q: object,
    softmax_scale: object,
    window_size: object,
    num_splits: object,
    backend: object,
) -> None:
    """Raise ``TypeError`` naming the argument when an argument is the wrong kind of object.

    The Python API runs this before calling the op: the op's schema would otherwise reject such
    arguments with a ``RuntimeError``, or convert them silently (a bool ``max_seqlen_q`` becomes 1,
    a 0-dim tensor ``softmax_scale`` a float, at the cost of a device sync).
    """
    for name, t in zip(_TENSOR_ARGS, tensors):
        _check_tensor(name, t)
    if out is not None:
        _check_tensor("out", out)
    _check_int_kind("max_seqlen_q", max_seqlen_q)
    if softmax_scale is not None:
        _check_float_kind("softmax_scale", softmax_scale)
    normalize_window(window_size)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"{OP_NAME}: argument 'num_splits' must be an int, got {type(num_splits).__name__}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"{OP_NAME}: argument 'backend' must be a str or None, got {type(backend).__name__}")


def check_call(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    rel_logits: torch.Tensor,
    max_seqlen_q: int,
    softmax_scale: float,
    window_size: Sequence[int],
    causal: bool,
    num_splits: int,
    out: torch.Tensor | None,
) -> RelAttnProblem:
    """Validate one call's arguments and return the static problem they describe.

    Raises ``TypeError``/``ValueError`` naming the offending argument. Reads metadata only.
    """
    q = _check_tensor("q", q)
    if q.dtype not in SUPPORTED_DTYPES:
        raise _fail("q", f"of dtype {q.dtype}", "torch.bfloat16, torch.float16 or torch.float32")
    if q.dim() != 3:
        raise _fail("q", f"of rank {q.dim()} (shape {_shape(q)})", "rank 3: (num_tokens, num_heads, head_dim)")
    num_tokens, num_heads, head_dim = q.shape
    if head_dim == 0 or num_heads == 0:
        raise _fail("q", f"of shape {_shape(q)}", "num_heads >= 1 and head_dim >= 1")
    if q.stride(2) != 1:
        raise _fail("q", f"a tensor with last-dim stride {q.stride(2)}", "a contiguous last dimension (stride 1)")
    device = q.device

    kv_shape = None
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        cache = _check_tensor(name, cache)
        if cache.dim() != 4:
            raise _fail(
                name,
                f"of rank {cache.dim()} (shape {_shape(cache)})",
                "rank 4: (num_blocks, block_size, num_kv_heads, head_dim)",
            )
        if cache.device != device:
            raise _fail(name, f"on device {cache.device}", f"the device of q ({device})")
        if cache.dtype != q.dtype:
            raise _fail(name, f"of dtype {cache.dtype}", f"the dtype of q ({q.dtype})")
        if cache.shape[3] != head_dim:
            raise _fail(name, f"of shape {_shape(cache)}", f"head_dim {head_dim} (q's last dim) in dim 3")
        if cache.stride(3) != 1:
            raise _fail(name, f"a tensor with last-dim stride {cache.stride(3)}", "a contiguous last dimension (stride 1)")
        if kv_shape is None:
            kv_shape = cache.shape
        elif cache.shape != kv_shape:
            raise _fail(name, f"of shape {_shape(cache)}", f"the shape of key_cache {tuple(kv_shape)}")
    num_blocks, page_size, num_kv_heads, _ = kv_shape
    if page_size == 0 or num_kv_heads == 0 or num_blocks == 0:
        raise _fail("key_cache", f"of shape {tuple(kv_shape)}", "num_blocks, block_size and num_kv_heads >= 1")
    if num_heads % num_kv_heads != 0:
        raise _fail(
            "key_cache",
            f"a cache with {num_kv_heads} KV heads",
            f"a divisor of q's {num_heads} query heads (num_heads % num_kv_heads == 0)",
        )

    rel_logits = _check_tensor("rel_logits", rel_logits)
    if rel_logits.dim() != 3:
        raise _fail(
            "rel_logits",
            f"of rank {rel_logits.dim()} (shape {_shape(rel_logits)})",
            "rank 3: (num_tokens, num_heads, rel_extent)",
        )
    if rel_logits.shape[0] != num_tokens or rel_logits.shape[1] != num_heads:
        raise _fail(
            "rel_logits",
            f"of shape {_shape(rel_logits)}",
            f"({num_tokens}, {num_heads}, rel_extent): q's token and head counts",
        )
    rel_extent = rel_logits.shape[2]
    if rel_extent == 0:
        raise _fail("rel_logits", f"of shape {_shape(rel_logits)}", "rel_extent (dim 2) >= 1")
    if rel_logits.dtype != q.dtype:
        raise _fail("rel_logits", f"of dtype {rel_logits.dtype}", f"the dtype of q ({q.dtype})")
    if rel_logits.device != device:
        raise _fail("rel_logits", f"on device {rel_logits.device}", f"the device of q ({device})")

    block_table = _check_index_tensor("block_table", block_table, 2, device)
    cache_seqlens = _check_index_tensor("cache_seqlens", cache_seqlens, 1, device)
    cu_seqlens_q = _check_index_tensor("cu_seqlens_q", cu_seqlens_q, 1, device)
    num_reqs = cache_seqlens.shape[0]
    if cu_seqlens_q.shape[0] != num_reqs + 1:
        raise _fail(
            "cu_seqlens_q",
            f"of shape {_shape(cu_seqlens_q)}",
            f"({num_reqs + 1},): one more entry than cache_seqlens has requests",
        )
    if block_table.shape[0] != num_reqs:
        raise _fail(
            "block_table", f"of shape {_shape(block_table)}", f"({num_reqs}, max_blocks_per_seq): one row per request"
        )
    if num_reqs and num_tokens and block_table.shape[1] == 0:
        # no page to address: a kernel that fetches a tile's page before knowing it has none would
        # read before the table (the clamps bound page indices by the width from above only)
        raise _fail("block_table", f"of shape {_shape(block_table)}", "max_blocks_per_seq >= 1 when there are requests and tokens")
    if block_table.shape[1] * page_size > MAX_KV_CAPACITY:
        # the kernels index a request's keys in int32: past this a tile's key index could wrap
        raise _fail(
            "block_table",
            f"of shape {_shape(block_table)} at block_size {page_size} "
            f"(room for {block_table.shape[1] * page_size} keys a request)",
            f"max_blocks_per_seq * block_size <= {MAX_KV_CAPACITY} (2**30)",
        )

    _check_int_kind("max_seqlen_q", max_seqlen_q)
    if num_tokens > 0 and max_seqlen_q <= 0:
        raise _fail("max_seqlen_q", max_seqlen_q, f">= 1 when q holds tokens (q has {num_tokens})")
    if max_seqlen_q < 0:
        raise _fail("max_seqlen_q", max_seqlen_q, ">= 0")

    _check_float_kind("softmax_scale", softmax_scale)
    if not (softmax_scale > 0.0 and math.isfinite(softmax_scale)):
        raise _fail("softmax_scale", softmax_scale, "a finite float > 0 (Inkling uses 1/head_dim)")

    window_left = normalize_window(window_size)
    if causal is not True:
        raise _fail("causal", causal, "True: rel_attn is causal attention (contract section 1)")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits < _INT64_END:
        raise _fail("num_splits", repr(num_splits), "an int >= 0 (0: chosen by the heuristic) that fits in 64 bits")

    if out is not None:
        out = _check_tensor("out", out)
        if out.shape != q.shape:
            raise _fail("out", f"of shape {_shape(out)}", f"the shape of q {_shape(q)}")
        if out.dtype != q.dtype:
            raise _fail("out", f"of dtype {out.dtype}", f"the dtype of q ({q.dtype})")
        if out.device != device:
            raise _fail("out", f"on device {out.device}", f"the device of q ({device})")
        if out.stride(2) != 1:
            raise _fail("out", f"a tensor with last-dim stride {out.stride(2)}", "a contiguous last dimension (stride 1)")
        if out.numel() > 1 and not _strides_nest(tuple(out.shape), out.stride()):
            raise _fail(
                "out", f"a view whose elements share memory (shape {_shape(out)}, strides {tuple(out.stride())})",
                "an out in which each element has its own memory (e.g. not an expanded tensor)",
            )

    return RelAttnProblem(
        num_tokens=num_tokens,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        rel_extent=rel_extent,
        num_reqs=num_reqs,
        page_size=page_size,
        num_blocks=num_blocks,
        max_blocks_per_seq=block_table.shape[1],
        max_seqlen_q=max_seqlen_q,
        softmax_scale=float(softmax_scale),
        window_left=window_left,
        causal=True,
        num_splits=num_splits,
        dtype=q.dtype,
        kv_dtype=key_cache.dtype,
        device_type=device.type,
    )


def check_inference_only(*tensors: torch.Tensor) -> None:
    """Raise if grad mode is on and an input (q, key_cache, value_cache, rel_logits, and out when
    given) requires grad: the op has no backward, and writing into an ``out`` that autograd
    tracks would bypass it."""
    if torch.is_grad_enabled():
        for name, t in zip(("q", "key_cache", "value_cache", "rel_logits", "out"), tensors):
            if t is not None and t.requires_grad:
                raise RuntimeError(
                    f"{OP_NAME} is inference-only (it has no backward), but argument '{name}' requires grad "
                    "while grad mode is on; call it under torch.no_grad() or torch.inference_mode(), "
                    "or pass detached tensors"
                )


def byte_extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s data pointer to the end of its last element (0 when it is empty): the
    memory a kernel may touch through it, strides included."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()


def _share_an_element(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether views ``a`` and ``b`` of one shape, strides and dtype reach a common element (True
    also when that cannot be told cheaply). Their offset must be a sum of per-dimension index
    differences times strides; with strides that nest (each larger than everything the smaller
    ones reach), at most two digits fit each dimension, so the search is tiny."""
    delta, rem = divmod(b.data_ptr() - a.data_ptr(), a.element_size())
    if rem:
        return True  # not element-aligned to each other: judged by ranges
    return _offset_reachable(tuple(a.shape), a.stride(), delta)


def _nested_dims(shape: tuple, strides: tuple) -> tuple[list, list] | None:
    """The dimensions longer than 1 as ``(stride, size)``, smallest stride first, and ``reach``
    (``reach[k]``: the largest offset ``dims[:k]`` span), when each stride passes everything the
    smaller ones reach (so no two elements share an address); None when they do not nest (an
    expanded or overlapping view, or one of the rare layouts that interleave without overlapping)."""
    dims = sorted((s, n) for s, n in zip(strides, shape) if n > 1)
    reach = [0]
    for s, n in dims:
        if s <= reach[-1]:
            return None
        reach.append(reach[-1] + (n - 1) * s)
    return dims, reach


def _strides_nest(shape: tuple, strides: tuple) -> bool:
    """Whether ``strides`` nest (:func:`_nested_dims`): no two elements share an address. True when
    a size or stride is symbolic (a traced call: the real call checks its concrete ones)."""
    if not all(type(x) is int for x in (*shape, *strides)):
        return True
    return _nested_dims(shape, strides) is not None


@functools.lru_cache(maxsize=256)  # a buffer's views keep one offset call after call
def _offset_reachable(shape: tuple, strides: tuple, delta: int) -> bool:
    """Whether ``delta`` (elements) is ``sum((i_k - j_k) * strides[k])`` with ``|i_k - j_k| <
    shape[k]``: two views of this shape and strides, ``delta`` apart, share an element."""
    nested = _nested_dims(shape, strides)
    if nested is None:
        return True  # strides that do not nest (an expanded or overlapping layout)
    dims, reach = nested

    def fits(rest: int, k: int) -> bool:
        if k == 0:
            return rest == 0
        s, n = dims[k - 1]
        lo, hi = -(-(rest - reach[k - 1]) // s), (rest + reach[k - 1]) // s  # digits leaving a reachable rest
        return any(fits(rest - d * s, k - 1) for d in range(max(lo, 1 - n), min(hi, n - 1) + 1))

    return fits(delta, len(dims))


def out_overlap_error(out: torch.Tensor, inputs: dict) -> ValueError | None:
    """The error for an ``out`` whose memory overlaps one of ``inputs`` (name -> tensor), else
    None. The kernels read their inputs while other programs write ``out``, so an overlap
    (``out`` the same memory as q included) would give a wrong answer, not an error. Judged by
    address ranges, and for an input of ``out``'s shape, strides and dtype (q interleaved with
    ``out`` in one buffer: ``buf[:, 0]``, ``buf[:, 1]``) by the elements they reach."""
    lo, hi = out.data_ptr(), out.data_ptr() + byte_extent(out)
    for name, t in inputs.items():
        t_lo, t_hi = t.data_ptr(), t.data_ptr() + byte_extent(t)
        if not (t_lo < hi and lo < t_hi):
            continue
        if t.shape == out.shape and t.stride() == out.stride() and t.dtype == out.dtype and not _share_an_element(t, out):
            continue
        return ValueError(
            f"{OP_NAME}: out overlaps {name} in memory (out spans bytes [{lo:#x}, {hi:#x}), {name} "
            f"[{t_lo:#x}, {t_hi:#x})); expected an out apart from the inputs (the op does not compute in place)"
        )
    return None
