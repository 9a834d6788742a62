"""Device workspace of the calls that need one (split-KV partials, the two-pass prefill's
log-sum-exps), reused from call to call on the same stream.

A repeated eager call would otherwise allocate its workspace through torch at every call, a
measurable part of a split-KV decode's host time (``meta/host_overhead.md``). Instead each CUDA
stream keeps one fp32 buffer, grown to the largest workspace asked for on it, and every call on
that stream writes it: calls on one stream run in order, so a call never writes the buffer while
an earlier call on the same stream still reads it, and calls on different streams never share
one. A buffer that is replaced or released goes back to torch's allocator only once the work
queued on its stream is done (``record_stream``).

Two cases allocate per call through torch instead:

- under CUDA-graph capture of the current stream (the graph then owns its workspace, taken from
  its private pool, and a replay never touches the buffers kept here);
- a workspace larger than :data:`REUSE_MAX_BYTES` (such calls run for long enough on the GPU
  that the allocation's host time does not matter, and the memory is not held between calls).

A split-KV launch that merges its splits in the kernel also counts, per row block, the splits
that have finished (:func:`arrival_counts`): int32 counts that must be zero before the launch,
and that the launch leaves zero. Each stream keeps one such buffer too, allocated zeroed once;
under capture the call allocates it zeroed through torch, so the graph zeroes it at each replay.

The buffers live until :func:`release_workspaces` (or the process's end): at most
:data:`REUSE_MAX_BYTES` per stream that ran such a call. Streams are told apart by their device and CUDA
handle; a stream destroyed while its work is still running, whose handle a new stream then
receives, would share its buffer with that work.
"""

from __future__ import annotations

import os

import torch

#: the largest workspace kept between calls, per stream (bytes); a larger one is allocated per call
REUSE_MAX_BYTES = 32 << 20

#: (device index, CUDA stream handle) -> (fp32 buffer, torch stream); the device too, because
#: every device's default stream has the handle 0
_BUFFERS: dict[tuple, tuple[torch.Tensor, object]] = {}
_COUNTS: dict[tuple, tuple[torch.Tensor, object]] = {}  # the same -> (int32 zeros, torch stream)

_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def fp32_workspace(numel: int, device: torch.device, stream: int) -> torch.Tensor:
    """A flat fp32 CUDA tensor of at least ``numel`` elements on ``device`` for a call launched on
    the current stream, whose handle is ``stream``; its contents are undefined.

    Equivalent PyTorch: ``torch.empty(numel, dtype=torch.float32, device=device)``."""
    return _kept(numel, device, stream, _BUFFERS, torch.empty, torch.float32)


def arrival_counts(numel: int, device: torch.device, stream: int) -> torch.Tensor:
    """A flat int32 CUDA tensor of at least ``numel`` zeros on ``device`` for a call launched on
    the current stream, whose handle is ``stream``. The call must leave them zero (the kernel that
    counts in them sets each count back once it is done with it).

    Equivalent PyTorch: ``torch.zeros(numel, dtype=torch.int32, device=device)``."""
    return _kept(numel, device, stream, _COUNTS, torch.zeros, torch.int32)


def _kept(numel: int, device: torch.device, stream: int, buffers: dict, make, dtype: torch.dtype) -> torch.Tensor:
    """``buffers``' kept tensor for ``stream`` if it holds ``numel`` elements, else a grown one;
    ``make(numel, dtype=dtype, device=device)`` per call under capture or over the size cap."""
    if 4 * numel > REUSE_MAX_BYTES or _capturing is None or _capturing():
        return make(numel, dtype=dtype, device=device)
    slot = (device.index, stream)
    kept = buffers.get(slot)
    if kept is None or kept[0].numel() < numel:
        user = torch.cuda.current_stream(device) if device.type == "cuda" else None  # None: the unit tests' stand-in
        buffer = _allocate_outside_pools(make, numel, device, dtype)
        if kept is not None:
            _drop(kept)
        buffers[slot] = (buffer, user)
        return buffer
    return kept[0]


_ALLOCATOR = None  # concurrent.futures.ThreadPoolExecutor of one thread, made at the first growth


def _forget_after_fork() -> None:
    # a forked child has none of the parent's threads: an executor it inherited would never run
    global _ALLOCATOR
    _ALLOCATOR = None
    _BUFFERS.clear()
    _COUNTS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _allocate_outside_pools(make, numel: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``make(numel, dtype=dtype, device=device)`` (``torch.empty`` or ``torch.zeros``), run by a
    thread of ours (zeroing is done on that thread's stream, and waited for).

    The calling thread's allocations may be routed to a private memory pool: torch.compile's
    CUDA-graph trees run their warm-up eagerly with every allocation of the thread going to the
    graphs' pool, and refuse tensors there that outlive the run. Our thread is never routed so.
    Its allocation belongs to that thread's current stream, the default one; :func:`_drop`
    records the stream that used the buffer before handing it back."""
    global _ALLOCATOR
    if _ALLOCATOR is None:
        from concurrent.futures import ThreadPoolExecutor

        _ALLOCATOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inkling_ops_workspace")
    return _ALLOCATOR.submit(_allocate, make, numel, device, dtype).result()


def _allocate(make, numel: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    buffer = make(numel, dtype=dtype, device=device)
    if make is not torch.empty and device.type == "cuda":
        # filled on this thread's (default) stream: done before the caller's stream uses it
        torch.cuda.current_stream(device).synchronize()
    return buffer


def _drop(kept) -> None:
    """Hand a kept buffer back to torch's allocator once the work queued on its stream is done."""
    buffer, user = kept
    if user is not None:
        buffer.record_stream(user)


def release_workspaces() -> int:
    """Drop every kept workspace buffer (to torch's caching allocator, once the work queued on its
    stream is done); returns the bytes released. Later calls allocate afresh."""
    released = kept_bytes()
    for buffers in (_BUFFERS, _COUNTS):
        for kept in buffers.values():
            _drop(kept)
        buffers.clear()
    return released


def kept_bytes() -> int:
    """Bytes of workspace (and arrival counts) kept between calls, over all streams."""
    return sum(4 * buffer.numel() for buffers in (_BUFFERS, _COUNTS) for buffer, _ in buffers.values())
