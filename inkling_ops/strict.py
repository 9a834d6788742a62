"""Strict mode: no kernel compiles on the hot path.

A serving process warms every compile key of its configuration first (:mod:`inkling_ops.warmup`),
then turns strict mode on. From then on a call whose kernels are neither in memory nor in the
persistent cache raises :class:`StrictCompileError` instead of compiling, naming the key and what
about it was not warmed.

    with inkling_ops.strict_compiles():
        serve()
    # or INKLING_OPS_STRICT=1 in the environment (read at import)

A backend calls :func:`check_compile` just before it would compile a key. This module imports
nothing else of the package, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator

def _strict_from_environment(value: str | None) -> bool:
    """``INKLING_OPS_STRICT``: an integer (0 off, any other on), true / yes / on, or false / no /
    off (or unset, or empty). Anything else fails the import with a ``ValueError`` naming it."""
    word = (value or "").strip().lower()
    if word in ("", "false", "no", "off"):
        return False
    if word in ("true", "yes", "on"):
        return True
    try:
        return int(word) != 0
    except ValueError:
        raise ValueError(f"INKLING_OPS_STRICT is {value!r}; expected an integer (0: off), true, yes or on, "
                         "or false, no or off") from None  # fmt: skip


_state = {"strict": _strict_from_environment(os.environ.get("INKLING_OPS_STRICT"))}
#: keys a warmup has compiled or loaded in this process, by backend name (for the error's hint)
_warmed: dict[str, set] = {}


class StrictCompileError(RuntimeError):
    """A compile was needed on the hot path while strict mode was on."""


def is_strict() -> bool:
    """Whether strict mode is on."""
    return _state["strict"]


def set_strict(enabled: bool) -> None:
    """Turn strict mode on or off for the whole process."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_strict: argument 'enabled' must be a bool, got {type(enabled).__name__}")
    _state["strict"] = enabled


@contextlib.contextmanager
def strict_compiles(enabled: bool = True) -> Iterator[None]:
    """Strict mode on (or off) inside the block; the previous setting comes back after it."""
    previous = _state["strict"]
    set_strict(enabled)
    try:
        yield
    finally:
        _state["strict"] = previous


def note_warmed(backend: str, keys: Iterable) -> None:
    """Record keys that a warmup compiled or loaded (they feed the hint of the error)."""
    _warmed.setdefault(backend, set()).update(keys)


def warmed_keys(backend: str) -> frozenset:
    """The keys :func:`note_warmed` recorded for ``backend`` in this process."""
    return frozenset(_warmed.get(backend, ()))


#: the ServingConfig field (or fields) behind each compile-key field, for the error's hint
CONFIG_FIELD = {
    "dtype": "dtype", "kv_dtype": "kv_dtype", "head_dim": "head_dim", "q_per_kv": "num_heads / num_kv_heads",
    "num_kv_heads": "num_kv_heads", "page_size": "page_size", "rel_extent": "rel_extent",
    "window_left": "window_left", "max_seqlen_q_bucket": "max_num_batched_tokens (max_seqlen_q up to it)",
    "num_splits": "max_num_seqs and max_model_len (the split count follows the request count and the block-table width), or the warmup's --num-sms",
    "arch": "the warmup's device (--arch)", "backend": "the warmup's backend",
    "kv_same_strides": "the KV cache layout (K and V strides differ)", "kv_row_i32": "the KV cache size (rows past int32)",
    "kv_slot_shift": "the KV cache layout (slot stride)", "aligned": "tensor alignment (a pointer or stride not 16-byte aligned)",
}  # fmt: skip


def nearest_difference(key, known: Iterable) -> str:
    """``"field=value (warmed: value)"`` for the fields in which ``key`` differs from the closest of
    ``known`` (fewest differing fields), or a note that nothing was warmed. Keys are dataclasses."""
    known = list(known)
    if not known:
        return "no key of this backend was warmed in this process or recorded in the kernel store"
    fields = [f.name for f in dataclasses.fields(key)]

    def differing(other) -> list[str]:
        return [f for f in fields if getattr(key, f) != getattr(other, f)]

    closest = min(known, key=lambda other: len(differing(other)))
    return ", ".join(
        f"{f}={getattr(key, f)!r} (warmed: {getattr(closest, f)!r}; configuration field: {CONFIG_FIELD.get(f, f)})"
        for f in differing(closest)
    )


def check_compile(backend: str, key, describe: Callable[[], str] | None = None,
                  stored: Callable[[], Iterable] | None = None) -> None:  # fmt: skip
    """Raise :class:`StrictCompileError` if strict mode is on; a backend calls this before it compiles ``key``.

    ``describe``: an optional function returning more about the call (shapes), for the message.
    ``stored``: an optional function returning the keys warmups recorded in the kernel store
    (a process that loads its kernels from a store another machine filled warmed none itself);
    they join this process's warmed keys in the message's nearest difference.
    """
    if not _state["strict"]:
        return
    detail = f"; the call: {describe()}" if describe is not None else ""
    known = sorted(set(warmed_keys(backend)) | set(stored() if stored is not None else ()), key=repr)
    if key in known:
        why = ("Warmed, but its compiled kernel is no longer in the kernel store (removed, broken, or the "
               "store moved: INKLING_OPS_CACHE_DIR)")
    else:
        why = f"Not warmed: {nearest_difference(key, known)}"
    raise StrictCompileError(
        f"inkling::rel_attn: strict mode is on and backend {backend!r} would compile {key} on the hot path. "
        f"{why}{detail}. Warm this configuration first "
        "(inkling_ops.warmup / python -m inkling_ops warmup) or leave strict mode (INKLING_OPS_STRICT=0)."
    )
