"""Compile keys: everything that selects a distinct compiled kernel, and nothing else.

A :class:`CompileKey` is derived from a :class:`~inkling_ops.problem.RelAttnProblem` by pure
functions (no tensors, no device queries: device facts are passed in). Quantities that vary
from step to step (token count, number of requests, KV lengths) enter only through buckets
or through the split count, which is itself a function of buckets, so a serving
configuration produces a finite set of keys that :mod:`inkling_ops.serving` enumerates.

The key is also the cache key of the compiled kernels (docs/compile_keys.md): besides the
problem's static facts it carries the layout facts a backend specialises its code on
(:class:`KVLayout`), read from the call's tensor metadata by :func:`layout_of` (strides and
data pointers only: no device values, so it is safe under CUDA-graph capture).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from .kernels.arch import arch_capability
from .kernels.triton_configs import slot_shift
from .heuristics import DEFAULT_SPLIT_POLICY, SplitPolicy, bucket_max_seqlen_q, bucket_pow2, num_splits
from .problem import RelAttnProblem


@dataclass(frozen=True, order=True)
class CompileKey:
    """Identity of one compiled kernel variant (a dataclass, so it hashes and prints)."""

    dtype: str
    kv_dtype: str
    head_dim: int
    q_per_kv: int
    page_size: int
    rel_extent: int
    causal: bool
    window_left: int
    max_seqlen_q_bucket: int
    num_splits: int
    arch: str
    backend: str
    #: KV heads (the kernel's NUM_KV_HEADS: the grid's head index is split into request and head)
    num_kv_heads: int = 1
    #: K and V have the same block and slot strides (one address computation serves both)
    kv_same_strides: bool = True
    #: every key row of the cache has an int32 index ``block * (block_stride // slot_stride) + slot``
    kv_row_i32: bool = True
    #: log2 of the slot stride when kv_row_i32 and it is a power of two (a shift), else -1
    kv_slot_shift: int = -1
    #: every pointer 16-byte aligned and every specialised stride a multiple of 16 elements
    #: (the compiler may then vectorise loads and stores); False: compiled without those hints
    aligned: bool = True
    #: one program per real M tile, numbered across the requests, instead of the dense grid of the
    #: longest request's M tiles for every request (a backend's ``compact_grid`` rule; Triton: False)
    compact_grid: bool = False

    # The key is hashed on every call (a backend's table of compiled kernels): the hash is computed
    # once per instance and kept outside the fields (never pickled: str hashes differ per process).
    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, name) for name in self.__dataclass_fields__))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}


class KVLayout(NamedTuple):
    """The layout facts of one call's tensors that select compiled code (see :class:`CompileKey`).

    ``slot_stride``: elements between consecutive key slots of a page (0: the standard
    ``num_kv_heads * head_dim`` of a cache laid out (num_blocks, page_size, Hkv, D), which vLLM's
    packed K/V views ``kv[:, 0]`` / ``kv[:, 1]`` of a (num_blocks, 2, page_size, Hkv, D) cache keep
    too). The default is that standard layout, aligned: what an enumeration of a serving
    configuration assumes.
    """

    same_strides: bool = True
    row_i32: bool = True
    slot_stride: int = 0
    aligned: bool = True


STANDARD_LAYOUT = KVLayout()


@dataclass(frozen=True)
class DeviceFacts:
    """What the heuristics may know about the device; queried once by the dispatcher."""

    arch: str  # "sm_90a", "sm_80", ..., or "cpu"
    num_sms: int
    capability: tuple[int, int] | None = None  # CUDA compute capability; None: read from arch

    def __post_init__(self) -> None:
        if self.capability is None:  # "sm_90a" -> (9, 0), "sm_100" -> (10, 0); off CUDA (0, 0)
            cap = arch_capability(self.arch) if self.arch.startswith("sm_") else (0, 0)
            object.__setattr__(self, "capability", cap)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def split_count(
    problem: RelAttnProblem, facts: DeviceFacts, policy: SplitPolicy = DEFAULT_SPLIT_POLICY
) -> int:
    """The split count a call runs with: the caller's if given (> 0), else the heuristic's."""
    if problem.num_splits > 0:
        return problem.num_splits
    return num_splits(
        max_seqlen_q_bucket=bucket_max_seqlen_q(problem.max_seqlen_q),
        num_reqs_bucket=bucket_pow2(problem.num_reqs),
        num_kv_heads=problem.num_kv_heads,
        kv_bound_bucket=bucket_pow2(problem.kv_capacity),
        window_left=problem.window_left,
        num_sms=facts.num_sms,
        policy=policy,
        rel_extent=problem.rel_extent,
    )


def layout_of(args, out: torch.Tensor) -> KVLayout:
    """The :class:`KVLayout` of one call's tensors (``args``: a ``RelAttnArgs``), from their
    strides, first dimension and data pointers (host metadata only).

    Aligned: the eight tensors' data pointers are multiples of 16 bytes, the strides the
    Triton kernels specialise (q, out, K and V: every stride but the last) multiples of 16,
    ``rel_logits``' token and head strides multiples of 8 (16 bytes, what the CuTe kernel's bias
    copies need) and the last dimensions of q and ``rel_logits`` contiguous. A call that is not
    aligned runs Triton's unhinted variant by default; the CuTe backend would copy q or
    ``rel_logits`` on every such call, so it is not chosen for it (``why_not_default``).
    """
    q, k, v, table, seqlens, cu, rel = args  # RelAttnArgs order
    ks, vs, qs, os_, rs = k.stride(), v.stride(), q.stride(), out.stride(), rel.stride()
    block, slot = ks[0], ks[1]
    same = block == vs[0] and slot == vs[1]
    row_i32 = same and slot > 0 and block % slot == 0 and k.size(0) * (block // slot) < 2**31
    bits = (
        q.data_ptr() | k.data_ptr() | v.data_ptr() | rel.data_ptr() | table.data_ptr() | seqlens.data_ptr()
        | cu.data_ptr() | out.data_ptr() | qs[0] | qs[1] | block | slot | ks[2] | vs[0] | vs[1] | vs[2] | os_[0] | os_[1]
        | (rs[0] | rs[1]) << 1
    )  # fmt: skip
    aligned = not bits & 15 and qs[2] == 1 and rs[2] == 1
    return _new_layout(KVLayout, (same, row_i32, slot, aligned))  # KVLayout(...), without its Python __new__


_new_layout = tuple.__new__


#: compile_key's results by their inputs: a call computes its key from a dictionary lookup, and
#: equal keys are one object (so tables keyed on them compare by identity)
_KEYS: dict[tuple, CompileKey] = {}
_MAX_KEYS = 4096


def compile_key(
    problem: RelAttnProblem,
    *,
    arch: str,
    backend: str,
    splits: int,
    layout: KVLayout = STANDARD_LAYOUT,
    compact_grid: bool = False,
) -> CompileKey:
    """The key of the kernels that run ``problem`` with ``splits`` KV splits on tensors laid out
    as ``layout`` (default: the standard, aligned layout of a serving configuration), on the
    compact grid when ``compact_grid`` (the backend's choice, :meth:`Backend.compact_grid`)."""
    m = problem.max_seqlen_q
    inputs = (
        problem.dtype, problem.kv_dtype, problem.head_dim, problem.num_heads, problem.num_kv_heads,
        problem.page_size, problem.rel_extent, problem.causal, problem.window_left,
        1 << max(0, m - 1).bit_length(), splits, arch, backend, layout, compact_grid,
    )  # fmt: skip
    key = _KEYS.get(inputs)
    if key is None:
        if len(_KEYS) >= _MAX_KEYS:
            _KEYS.clear()
        key = _KEYS[inputs] = _make_key(
            problem, arch=arch, backend=backend, splits=splits, layout=layout, compact_grid=compact_grid
        )
    return key


def _make_key(
    problem: RelAttnProblem, *, arch: str, backend: str, splits: int, layout: KVLayout, compact_grid: bool
) -> CompileKey:
    row_i32 = layout.row_i32
    return CompileKey(
        dtype=dtype_name(problem.dtype),
        kv_dtype=dtype_name(problem.kv_dtype),
        head_dim=problem.head_dim,
        q_per_kv=problem.q_per_kv,
        page_size=problem.page_size,
        rel_extent=problem.rel_extent,
        causal=problem.causal,
        window_left=problem.window_left,
        max_seqlen_q_bucket=bucket_max_seqlen_q(problem.max_seqlen_q),
        num_splits=splits,
        arch=arch,
        backend=backend,
        num_kv_heads=problem.num_kv_heads,
        kv_same_strides=layout.same_strides,
        kv_row_i32=row_i32,
        kv_slot_shift=slot_shift(layout.slot_stride or problem.num_kv_heads * problem.head_dim) if row_i32 else -1,
        aligned=layout.aligned,
        compact_grid=compact_grid,
    )
