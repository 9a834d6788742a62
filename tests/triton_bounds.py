"""Bounds checks for Triton's interpreter (TRITON_INTERPRET=1), for the tests of bad metadata.

The interpreter runs a kernel's loads and stores on raw host addresses: a load past a tensor
reads whatever lies there and a store corrupts it, so an out-of-bounds access shows, if at all,
as a crash or a changed value. Inside ``bounds_checked()`` every active lane of every load,
store and atomic must address bytes inside the extent of one of the launch's tensor arguments;
the first one that does not raises :class:`OutOfBounds` naming the kernel, the access and the
nearest tensor argument.

It wraps private parts of ``triton.runtime.interpreter`` (``GridExecutor._init_args_hst`` and
``InterpreterBuilder``'s masked load, masked store and atomic read-modify-write);
:func:`unavailable_reason` says when this Triton lacks them, so a test can skip by name instead
of checking nothing.
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import torch

_BUILDER_METHODS = {
    "create_masked_load": ("self", "ptrs", "mask", "other", "cache_policy", "is_volatile"),
    "create_masked_store": ("self", "ptrs", "value", "mask", "cache_policy"),
    "create_atomic_rmw": ("self", "rmwOp", "ptr", "val", "mask", "sem", "scope"),
}


class OutOfBounds(RuntimeError):
    """A kernel under :func:`bounds_checked` addressed memory outside its tensor arguments."""


def unavailable_reason() -> str | None:
    """None when this Triton's interpreter has the parts :func:`bounds_checked` wraps, with the
    signatures it expects; otherwise what is missing."""
    try:
        import triton.runtime.interpreter as interp
    except ImportError as exc:
        return f"triton's interpreter cannot be imported ({exc})"
    if not hasattr(interp.GridExecutor, "_init_args_hst") or not hasattr(interp, "_get_np_dtype"):
        return "triton.runtime.interpreter lacks GridExecutor._init_args_hst or _get_np_dtype"
    for name, params in _BUILDER_METHODS.items():
        method = getattr(interp.InterpreterBuilder, name, None)
        if method is None or tuple(inspect.signature(method).parameters) != params:
            return f"InterpreterBuilder.{name} is missing or has another signature"
    return None


def _extent(t: torch.Tensor) -> tuple[int, int] | None:
    """``[first byte, one past the last byte)`` a tensor's view spans, or None when it is empty."""
    if t.numel() == 0:
        return None
    span = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


@contextlib.contextmanager
def bounds_checked():
    """Check every interpreted kernel access inside the block (see the module docstring)."""
    import triton.runtime.interpreter as interp

    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"bounds_checked: {reason}")
    launch: dict = {"ranges": [], "kernel": "?"}
    builder = interp.InterpreterBuilder
    saved = {name: getattr(builder, name) for name in _BUILDER_METHODS}
    saved_init = interp.GridExecutor._init_args_hst

    def init_args(self, args_dev, kwargs):
        args, kw = saved_init(self, args_dev, kwargs)
        names = list(self.arg_names)
        ranges = []
        for i, value in enumerate([*args, *kw.values()]):
            if isinstance(value, torch.Tensor) and (extent := _extent(value)) is not None:
                ranges.append((*extent, names[i] if i < len(names) else "?"))
        launch.update(ranges=ranges, kernel=getattr(self.fn, "__name__", "?"))
        return args, kw

    def check(ptrs, mask, nbytes: int, what: str) -> None:
        addresses = np.asarray(ptrs.data).astype(np.uint64)
        active = np.ones(addresses.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask.data).astype(bool), addresses.shape)
        addresses = addresses[active]
        if addresses.size == 0:
            return
        inside = np.zeros(addresses.shape, bool)
        for lo, hi, _ in launch["ranges"]:
            inside |= (addresses >= lo) & (addresses + nbytes <= hi)
        if not inside.all():
            bad = int(addresses[~inside][0])
            lo, hi, name = min(launch["ranges"], key=lambda r: min(abs(bad - r[0]), abs(bad - r[1])))
            raise OutOfBounds(
                f"{what} in {launch['kernel']} at grid {tuple(interp.interpreter_builder.grid_idx)}: "
                f"{int((~inside).sum())} lane(s), the first {bad - lo:+d} bytes from the start of "
                f"'{name}' ({hi - lo} bytes)"
            )

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        check(ptrs, mask, np.dtype(interp._get_np_dtype(ptrs.get_element_ty())).itemsize, "load")
        return saved["create_masked_load"](self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        check(ptrs, mask, value.data.dtype.itemsize, "store")
        return saved["create_masked_store"](self, ptrs, value, mask, cache_policy)

    def atomic(self, rmwOp, ptr, val, mask, sem, scope):  # noqa: N803 (the interpreter's name)
        check(ptr, mask, val.data.dtype.itemsize, "atomic")
        return saved["create_atomic_rmw"](self, rmwOp, ptr, val, mask, sem, scope)

    interp.GridExecutor._init_args_hst = init_args
    builder.create_masked_load, builder.create_masked_store, builder.create_atomic_rmw = load, store, atomic
    try:
        yield
    except Exception as exc:  # the interpreter wraps a kernel's exception in its own InterpreterError
        cause = exc
        while cause is not None and not isinstance(cause, OutOfBounds):
            cause = cause.__cause__ or cause.__context__
        if cause is None or cause is exc:
            raise
        raise OutOfBounds(str(cause)) from exc
    finally:
        interp.GridExecutor._init_args_hst = saved_init
        for name, method in saved.items():
            setattr(builder, name, method)
