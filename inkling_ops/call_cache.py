"""The eager hot path: a repeated call found from its metadata in one lookup.

A serving engine calls the op with the same shapes many times (every layer of a step, and the
same token counts step after step). The first call of a signature is validated
(:func:`inkling_ops.validation.check_call`), planned (:func:`inkling_ops.dispatch.plan_call`)
and prepared by its backend (``Backend.prepare``: for Triton, the launches bound to the call's
shapes and strides); the result is kept, and a later call whose tensors have the same shapes,
strides, dtypes, devices (and autograd state) and whose scalars are equal reuses it, so it
costs the lookup, the tensors' addresses and the launches.

The lookup has two levels: a dictionary on the cheap facts (q's shape, the scalar arguments and
their types, the eight data pointers' offsets from 16-byte alignment), then, among the few entries found there,
a check of every tensor's metadata done in C by the tensor guards ``torch.compile`` uses for
its own caches (``torch._C._dynamo.guards.TensorGuards``: dtype, device, dispatch keys,
requires_grad, sizes and strides). Where that class is missing, a Python signature of the same
facts is compared instead. A call whose tensor metadata differs in anything the checks read
is validated again, so bad input always gets its error.

Safe under CUDA-graph capture: nothing here reads device memory or synchronizes; checked mode
(:mod:`inkling_ops.checked`) still checks every call's device metadata.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import checked, dispatch, planning
from .compile_keys import STANDARD_LAYOUT, layout_of
from .problem import RelAttnArgs, RelAttnProblem
from .validation import byte_extent, check_call, check_inference_only, out_overlap_error

try:  # torch.compile's C++ tensor guards (present in every torch this package supports)
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - depends on the torch build
    _TensorGuards = None

#: entries kept at most, over all lookup keys (a caller whose shapes never repeat would otherwise
#: grow the table without bound)
MAX_ENTRIES = 4096
#: entries kept per lookup key (tensor layouts seen with the same q shape and scalars)
MAX_PER_KEY = 8


class _PythonGuards:
    """The fallback of ``TensorGuards``: the same facts, compared as a Python tuple."""

    __slots__ = ("signature",)

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.signature = self._of(tensors)

    @staticmethod
    def _of(tensors) -> tuple:
        return tuple((t.shape, t.stride(), t.dtype, t.device, t.requires_grad) for t in tensors)

    def check(self, *tensors: torch.Tensor) -> bool:
        return self._of(tensors) == self.signature


def _guards(tensors: tuple):
    if _TensorGuards is None:
        return _PythonGuards(*tensors)
    sizes = [list(t.shape) for t in tensors]
    strides = [list(t.stride()) for t in tensors]
    return _TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)


class Entry(NamedTuple):
    """One call signature's validated problem, chosen backend and plan, the backend's prepared
    launch (None: the call goes through ``backend.run``), and the byte extents of q, key_cache,
    value_cache, rel_logits, out, block_table, cache_seqlens and cu_seqlens_q (fixed by the shapes
    and strides the guards check), for the per-call check that out overlaps none of the others."""

    guards: object
    problem: RelAttnProblem
    backend: object
    plan: object
    prepared: object
    extents: tuple


_ENTRIES: dict[tuple, list[Entry]] = {}
_count = 0


def clear() -> None:
    """Forget every entry (the backend list changed, or a test wants a cold start)."""
    global _count
    _ENTRIES.clear()
    _count = 0


planning._ON_CHANGE.append(clear)  # a new backend may change which backend an entry names


def _new_entry(lookup, tensors, max_seqlen_q, softmax_scale, window_size, causal, num_splits, requested) -> Entry:
    global _count
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, out = tensors
    problem = check_call(
        q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
        max_seqlen_q, softmax_scale, window_size, causal, num_splits, out,
    )  # fmt: skip
    args = RelAttnArgs(*tensors[:7])
    layout = layout_of(args, out) if q.is_cuda else STANDARD_LAYOUT
    backend, plan = dispatch.plan_call(problem, q.device, requested, layout)
    prepared = backend.prepare(plan, problem, args, out) if problem.num_tokens and problem.num_reqs else None
    extents = tuple(
        byte_extent(t) for t in (q, key_cache, value_cache, rel_logits, out, block_table, cache_seqlens, cu_seqlens_q)
    )
    entry = Entry(_guards(tensors), problem, backend, plan, prepared, extents)
    if lookup is not None:
        if _count >= MAX_ENTRIES:
            clear()
        bucket = _ENTRIES.setdefault(lookup, [])
        if len(bucket) >= MAX_PER_KEY:
            _count -= len(bucket)
            bucket.clear()
        bucket.append(entry)
        _count += 1
    return entry


def run_out(
    q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits,
    max_seqlen_q, softmax_scale, window_size, causal, num_splits, requested, out,
) -> None:  # fmt: skip
    """Validate (or recognise), plan and run one call of ``rel_attn_out`` on real tensors,
    writing ``out``. Raises the validation's ``ValueError`` / ``TypeError`` for bad input."""
    tensors = (q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, out)
    entry = None
    try:
        pointers = (
            q.data_ptr(), key_cache.data_ptr(), value_cache.data_ptr(), block_table.data_ptr(),
            cache_seqlens.data_ptr(), cu_seqlens_q.data_ptr(), rel_logits.data_ptr(), out.data_ptr(),
        )  # fmt: skip
        p0, p1, p2, p3, p4, p5, p6, p7 = pointers
        # 0 when all eight are 16-byte aligned (the common case, one test); else each one's offset,
        # since a backend's prepared launch may rely on some of them being aligned (CuTe: q, K, V,
        # rel_logits, out) and not others
        align = (p0 | p1 | p2 | p3 | p4 | p5 | p6 | p7) & 15 and (
            p0 & 15, p1 & 15, p2 & 15, p3 & 15, p4 & 15, p5 & 15, p6 & 15, p7 & 15
        )
        if type(window_size) is not tuple and type(window_size) is not list:
            raise TypeError  # (an iterator or a mapping would unpack here: the checks refuse it)
        left, right = window_size
        # the scalars' types too: 1, 1.0 and True hash alike, and validation refuses some of them
        lookup = (
            q.shape, max_seqlen_q, softmax_scale, left, right, causal, num_splits, requested, align,
            type(max_seqlen_q), type(softmax_scale), type(num_splits), type(left), type(right), type(causal),
        )  # fmt: skip
        for candidate in _ENTRIES.get(lookup, ()):
            if candidate.guards.check(*tensors):
                entry = candidate
                break
    except (AttributeError, TypeError, ValueError, RuntimeError):
        # not a tensor, an unhashable scalar, a window of other than two values: the checks say which
        lookup = pointers = None

    if entry is None:
        if lookup is not None and torch.is_grad_enabled():  # before a compile: fail at once
            check_inference_only(q, key_cache, value_cache, rel_logits, out)
        entry = _new_entry(lookup, tensors, max_seqlen_q, softmax_scale, window_size, causal, num_splits, requested)
        if pointers is None:
            pointers = tuple([t.data_ptr() for t in tensors])
    if torch.is_grad_enabled():
        check_inference_only(q, key_cache, value_cache, rel_logits, out)
    problem = entry.problem
    args = RelAttnArgs(q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits)
    if checked.is_checked_mode():
        checked.check_device_values(problem, block_table, cache_seqlens, cu_seqlens_q)
    if problem.num_tokens == 0 or problem.num_reqs == 0:
        return
    # out apart from what the kernels read (a few comparisons; the extents come with the entry)
    p0, p1, p2, p3, p4, p5, p6, p7 = pointers
    e_q, e_k, e_v, e_rel, e_out, e_table, e_lens, e_cu = entry.extents
    end = p7 + e_out
    if (
        (p0 < end and p7 < p0 + e_q) or (p6 < end and p7 < p6 + e_rel) or (p1 < end and p7 < p1 + e_k)
        or (p2 < end and p7 < p2 + e_v) or (p3 < end and p7 < p3 + e_table) or (p4 < end and p7 < p4 + e_lens)
        or (p5 < end and p7 < p5 + e_cu)
    ):  # fmt: skip
        error = out_overlap_error(
            out,
            dict(
                q=q, key_cache=key_cache, value_cache=value_cache, rel_logits=rel_logits, block_table=block_table,
                cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
            ),
        )  # fmt: skip
        if error is not None:  # (None: q interleaved with out in one buffer, no element shared)
            raise error
    device = q.get_device()  # -1 on the CPU
    if device >= 0 and device != _current_cuda_device():
        # the kernels launch on the current device's context and stream: make the tensors' device
        # current for the call (a model spread over GPUs in one process calls layers on each)
        with torch.cuda.device(device):
            _launch(entry, problem, args, pointers, out)
    elif entry.prepared is not None:  # (the common case, without _launch's frame)
        entry.prepared(args, pointers, out)
    else:
        entry.backend.run(entry.plan, problem, args, out)


def _launch(entry: Entry, problem: RelAttnProblem, args: RelAttnArgs, pointers: tuple, out: torch.Tensor) -> None:
    if entry.prepared is not None:
        entry.prepared(args, pointers, out)
    else:
        entry.backend.run(entry.plan, problem, args, out)


#: the current CUDA device's index (CUDA is initialised: the call has a CUDA tensor)
_current_cuda_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
