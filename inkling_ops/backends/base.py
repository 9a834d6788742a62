"""The interface every kernel backend implements.

A backend declares what it supports and says why not (``why_not``), so the dispatcher can pick
one or explain a refusal, it runs a validated call (``run``), and it compiles the kernels of a
compile key ahead of time, without tensors (``compile``; nothing for a backend that compiles
nothing). Backends import nothing from
the dispatcher or the op registration.
"""

from __future__ import annotations

import abc
import dataclasses

import torch

from ..compile_keys import STANDARD_LAYOUT, CompileKey, DeviceFacts, KVLayout
from ..heuristics import SplitPolicy
from ..problem import RelAttnArgs, RelAttnProblem


#: CUDA's limit on a launch grid's y and z dimensions (x reaches 2**31 - 1)
CUDA_GRID_YZ_MAX = 65535


class Backend(abc.ABC):
    """One implementation of rel_attn for one or more device types."""

    #: short name, as passed in ``backend=`` and recorded in compile keys.
    name: str = ""
    #: device types ("cpu", "cuda") the backend can run on when asked for by name.
    device_types: tuple[str, ...] = ()
    #: device types on which the dispatcher may choose it by default.
    default_device_types: tuple[str, ...] = ()
    #: how the backend splits the KV range of short-query calls; None: it never splits.
    split_policy: SplitPolicy | None = None

    def is_available(self) -> str | None:
        """None if the backend's software is importable here, else why not."""
        return None

    def why_not_default(self, problem: RelAttnProblem, facts: DeviceFacts, layout: KVLayout = STANDARD_LAYOUT) -> str | None:
        """None if the dispatcher's default choice may pick this backend for ``problem`` (on one
        of ``default_device_types``) with its tensors laid out as ``layout``, else why it is not
        preferred there: a pure rule of where it is faster. Such a backend is passed over silently
        (it could run the call; another is better), unlike one that cannot (``why_not``).
        Default: preferred wherever it runs."""
        return None

    @abc.abstractmethod
    def why_not(self, problem: RelAttnProblem, facts: DeviceFacts) -> str | None:
        """None if this backend runs ``problem`` on a device with ``facts``, else the reason it cannot."""

    def compact_grid(self, problem: RelAttnProblem) -> bool:
        """Whether a call of ``problem`` runs on the compact grid (one program per real M tile,
        numbered across the requests) rather than the dense one (the longest request's M tiles for
        every request): a pure rule that enters the compile key (``CompileKey.compact_grid``).
        Default: never (a backend whose kernels have one grid)."""
        return False

    def launch_plan(self, key: CompileKey, problem: RelAttnProblem) -> tuple[object, int]:
        """``(launch configuration, workspace bytes)`` of a call of ``problem`` with ``key``: what
        :class:`inkling_ops.planning.Plan` records. Pure. Default: no configuration, no workspace."""
        return None, 0

    @abc.abstractmethod
    def run(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor) -> None:
        """Write the result of a validated call (``problem``, its tensors ``args``) into ``out``,
        as ``plan`` (an :class:`inkling_ops.planning.Plan` of this backend) says."""

    def prepare(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor):
        """A launch of this call made ahead, for a caller that will repeat it on tensors with the
        same shapes, strides, dtypes and device (another step, another layer): a callable
        ``prepared(args, pointers, out)`` (``pointers``: the eight tensors' ``data_ptr()``, in
        ``RelAttnArgs`` order then ``out``) that does what ``run(plan, problem, args, out)``
        does, with the per-call work that depends only on that metadata done once here. None:
        the backend has no such shortcut (the caller then calls :meth:`run`)."""
        return None

    def compile(self, key: CompileKey) -> list:
        """Compile (or load from the persistent store) every kernel a call with ``key`` launches,
        without tensors and without launching; returns them. A backend with nothing to compile
        (the reference) returns an empty list."""
        return []

    def store(self, arch: str):
        """The persistent kernel store (``kernel_cache.KernelStore``) of this backend's ``arch``
        kernels, or None for a backend that keeps nothing on disk (the default)."""
        return None

    def record_warmed(self, keys) -> None:
        """Record ``keys``, which a warmup compiled or loaded, in this backend's store, so that a
        later process that loads from it names the field a missing key differs in (strict mode's
        message; :meth:`stored_warm_keys`). Nothing for a backend without a store."""
        by_arch: dict[str, list] = {}
        for key in keys:
            by_arch.setdefault(key.arch, []).append(dataclasses.asdict(key))
        for arch, fields in by_arch.items():
            store = self.store(arch)
            if store is not None and store.directory.is_dir():  # kernels went there (not so under the interpreter)
                store.note_keys(fields)

    def stored_warm_keys(self, arch: str) -> list[CompileKey]:
        """This backend's keys that warmups recorded in its ``arch`` store (records of other
        backends, or of fields this version's keys lack, left out)."""
        store = self.store(arch)
        keys = []
        for fields in store.noted_keys() if store is not None else ():
            try:
                key = CompileKey(**fields)
            except TypeError:
                continue
            if key.backend == self.name:
                keys.append(key)
        return keys


def _unit_last_stride(t: torch.Tensor) -> bool:
    return t.shape[-1] <= 1 or t.stride(-1) == 1


def index_tensors_packed(args: RelAttnArgs) -> bool:
    """Whether ``args``' index tensors are as the kernels read them: ``cache_seqlens`` and
    ``cu_seqlens_q`` with unit stride, ``block_table`` with unit stride along a row (its rows
    may be any distance apart). A valid call may pass views that are not (``meta[:, 0]``,
    ``table[:, ::2]``, an ``expand``): :func:`with_packed_index_tensors` copies them."""
    return _unit_last_stride(args.block_table) and _unit_last_stride(args.cache_seqlens) and _unit_last_stride(args.cu_seqlens_q)


def with_packed_index_tensors(args: RelAttnArgs) -> RelAttnArgs:
    """``args`` with each index tensor that :func:`index_tensors_packed` finds strided replaced
    by a packed copy (a device copy: no host sync, capturable in a CUDA graph).

    Equivalent PyTorch: ``args._replace(block_table=args.block_table.contiguous(), ...)``."""
    if index_tensors_packed(args):
        return args
    return args._replace(**{
        name: getattr(args, name).contiguous()
        for name in ("block_table", "cache_seqlens", "cu_seqlens_q") if not _unit_last_stride(getattr(args, name))
    })  # fmt: skip
