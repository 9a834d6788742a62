"""Benchmark of ``torch.ops.inkling.rel_attn`` against the peers of anchors.md (lab tool, not the product).

Run from the repository root on the GPU machine::

    python meta/bench/benchmark.py [--out DIR] [--quick] [--clocks eager,graph] [--cases-filter decode]

and on a CPU machine, to exercise everything except the GPU-only peers::

    python meta/bench/benchmark.py --smoke --device cpu --out /tmp/bench
    python meta/bench/benchmark.py --dry-run
    python meta/bench/benchmark.py --plot meta/bench/bench_records.jsonl --png meta/bench.png

What one run does, per case (anchors.md / bench_cases.json) and page size:

1. Builds bf16 inputs on the device: random q, K, V, rel_logits (never zeros), every request with
   ``q_len`` new tokens at the end of ``kv_len``, pages of every request a random permutation of the
   cache's blocks (two spare blocks hold NaN), softmax_scale = 1/head_dim. The same dense K/V feed
   the paged caches (every page size) and the dense peers.
2. Runs each peer: ``ours`` (``inkling_ops.rel_attn(..., out=preallocated)``), ``fa4_scoremod`` and
   ``fa4_nobias`` (flash-attn-4's CuTe DSL paged varlen kernel, with the bias as the score_mod vLLM
   ships for Inkling on Hopper (:func:`vllm_inkling_score_mod`), and without bias), ``flex``
   (FlexAttention, compiled, bias as score_mod, dense K/V) and ``sdpa_nobias``
   (``F.scaled_dot_product_attention``, dense, no bias, global layers only). A peer that cannot run
   says why (``unavailable`` / ``skipped``) instead of stopping the run.
3. Checks each peer against a float64 dense reference on a few query rows of the first and last
   request (relative L2 error; above ``--tol`` (2e-2) the result is flagged but still timed).
4. Times it on both clocks, every case and peer (``--clocks`` narrows it):

   - ``eager``: ``triton.testing.do_bench(..., return_mode="median")``, L2 flushed before every
     call, each call launched from the host, so launch cost is included: a case whose GPU time is
     near the peer's host launch cost (~100-200 us for ours and flash-attn-4) measures the host;
   - ``graph``: the median of CUDA-graph replays of one call, L2 flushed before each replay, after
     ``--warmup-ms`` of untimed replays; the host is left out. A peer that cannot be captured (the
     reference backend, a failed capture) says so in place of a time.

   Eager first, then graph; ``--clock-rounds N`` measures them in N rounds of alternating order
   and records each clock's median over its rounds (and the rounds themselves): on the long
   cases the GPU's power cap moves back-to-back loops of one call by up to 13%, and a single
   round's graph loop starts on a GPU its eager loop has heated.

   Also records the first-call time (includes compiles) and the device memory one warm call
   allocates beyond its inputs (``torch.cuda.max_memory_allocated`` delta).
5. Measures eager host overhead per call on a tiny decode (see :func:`measure_host_overhead`).

Accounting, as anchors.md defines it: TFLOP/s counts ``4 * head_dim * Hq`` per visible
(query, key) pair (causal, window-limited); GB/s counts the K+V bytes that must be read
(window-limited on sliding layers) + q + out + rel_logits bytes, once, the same count for every peer
of a case. Records go to ``meta/bench/bench_records.jsonl`` (one JSON line per case, page size and
peer; fields in :func:`make_record`) and, with ``--out DIR``, also to ``DIR``; the full log goes to
``meta/bench/bench_last.log`` (and ``DIR``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import importlib.metadata
import itertools
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Root of the repository (this file is <root>/meta/bench/benchmark.py).
REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run as ``python meta/bench/benchmark.py``: import this checkout's inkling_ops
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

# anchors.md's accounting, one copy: the product's small benchmark defines it
from inkling_ops.bench import kv_positions_read_per_request, visible_pairs_per_request  # noqa: E402,F401

#: Where the shared case file lives next to the repo on the development machine (absent on the GPU).
SHARED_CASES = REPO_ROOT.parent / "shared" / "bench_cases.json"
BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_RECORDS = BENCH_DIR / "bench_records.jsonl"
DEFAULT_LOG = BENCH_DIR / "bench_last.log"
#: How this tool is invoked (recorded in every record's ``command``).
COMMAND = "python meta/bench/benchmark.py"

#: Relative L2 error above which a result is flagged (vLLM's bf16 tolerance).
DEFAULT_TOL = 2e-2
#: Query lengths up to this are "decode": GB/s is their headline metric, CUDA graphs apply.
DECODE_MAX_Q = 16
#: The reference backend is skipped on cases with more visible pairs than this (it is slow).
DEFAULT_REFERENCE_MAX_PAIRS = 1 << 26
#: Spare cache blocks no request uses; they hold NaN so a peer that reads them shows it.
SPARE_BLOCKS = 2
#: Why the dense peers (SDPA, FlexAttention) skip a mixed batch.
MIXED_DENSE_REASON = "a mixed batch (a chunk and decodes) has no dense (B, H, L, D) layout for this peer"
#: Label of the host-overhead pseudo-case in the records.
HOST_CASE = "host_overhead_tiny_decode"

ALL_PEERS = ("ours", "fa4_scoremod", "fa4_nobias", "flex", "sdpa_nobias")
#: Input dtypes ``--dtype`` accepts (both 2 bytes, so the byte accounting holds).
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}

# The 7 cases of /work/shared/bench_cases.json (anchors.md). The repo travels to the GPU machine
# without ../shared, so they are embedded; ``--cases PATH`` overrides them.
EMBEDDED_CASES: tuple[dict, ...] = (
    dict(name="prefill8k_global", num_reqs=1, q_len=8192, kv_len=8192, hq=8, hkv=1, d=128, rel_extent=1024, window_left=-1),
    dict(name="prefill32k_global", num_reqs=1, q_len=32768, kv_len=32768, hq=8, hkv=1, d=128, rel_extent=1024, window_left=-1),
    dict(name="chunk2k_on16k_x4", num_reqs=4, q_len=2048, kv_len=16384, hq=8, hkv=1, d=128, rel_extent=1024, window_left=-1),
    dict(name="prefill8k_local", num_reqs=1, q_len=8192, kv_len=8192, hq=8, hkv=2, d=128, rel_extent=512, window_left=511),
    dict(name="decode_b64_8k", num_reqs=64, q_len=1, kv_len=8192, hq=8, hkv=1, d=128, rel_extent=1024, window_left=-1),
    dict(name="decode_b64_8k_local", num_reqs=64, q_len=1, kv_len=8192, hq=8, hkv=2, d=128, rel_extent=512, window_left=511),
    dict(name="decode_b1_128k", num_reqs=1, q_len=1, kv_len=131072, hq=8, hkv=1, d=128, rel_extent=1024, window_left=-1),
)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchCase:
    """One benchmark shape: ``num_reqs`` requests, each ``q_len`` new tokens at the end of ``kv_len``,
    then ``decodes`` requests of one new token each, also at ``kv_len`` (a serving-shaped batch: a
    prefill chunk and many decodes in one call). Packed rows: the ``num_reqs`` chunks first, then
    the decodes; ``max_seqlen_q`` is ``q_len``.
    """

    name: str
    num_reqs: int
    q_len: int
    kv_len: int
    hq: int
    hkv: int
    d: int
    rel_extent: int
    window_left: int = -1
    decodes: int = 0

    def __post_init__(self):
        if not (self.num_reqs >= 1 and 1 <= self.q_len <= self.kv_len):
            raise ValueError(f"case {self.name!r}: need num_reqs >= 1 and 1 <= q_len <= kv_len, got {self}")
        if self.hq % self.hkv:
            raise ValueError(f"case {self.name!r}: hq ({self.hq}) must be a multiple of hkv ({self.hkv})")
        if self.rel_extent < 1 or self.window_left < -1:
            raise ValueError(f"case {self.name!r}: need rel_extent >= 1 and window_left >= -1, got {self}")
        if self.decodes < 0:
            raise ValueError(f"case {self.name!r}: decodes must be >= 0, got {self.decodes}")

    @property
    def total_reqs(self) -> int:
        """Requests in the call: the ``num_reqs`` chunks and the ``decodes``."""
        return self.num_reqs + self.decodes

    @property
    def q_lens(self) -> tuple[int, ...]:
        """Each request's new tokens, in packed order."""
        return (self.q_len,) * self.num_reqs + (1,) * self.decodes

    @property
    def mixed(self) -> bool:
        """Chunks and decodes of different lengths in one call (no dense (B, H, L, D) layout)."""
        return self.decodes > 0 and self.q_len > 1

    def row(self, b: int, i: int) -> int:
        """The packed row of request ``b``'s ``i``-th new token."""
        return b * self.q_len + i if b < self.num_reqs else self.num_reqs * self.q_len + (b - self.num_reqs) + i

    def describe(self) -> str:
        """``N x (q Q, kv K)`` and, for a mixed batch, ``+ D decodes``."""
        text = f"{self.num_reqs} x (q {self.q_len}, kv {self.kv_len})"
        return text + (f" + {self.decodes} decodes" if self.decodes else "")

    @property
    def num_tokens(self) -> int:
        return self.num_reqs * self.q_len + self.decodes

    @property
    def is_local(self) -> bool:
        return self.window_left >= 0

    @property
    def is_decode(self) -> bool:
        return self.q_len <= DECODE_MAX_Q

    @property
    def softmax_scale(self) -> float:
        """Inkling's scale: 1/head_dim (q and k are RMS-normed)."""
        return 1.0 / self.d

    @property
    def window_size(self) -> tuple[int, int]:
        """``window_size`` as rel_attn takes it."""
        return (self.window_left, 0) if self.is_local else (-1, -1)

    def spec(self) -> dict:
        return dataclasses.asdict(self)


def case_from_dict(entry: dict) -> BenchCase:
    """A :class:`BenchCase` from one JSON entry; says which key is missing or unknown."""
    names = {f.name for f in dataclasses.fields(BenchCase)}
    unknown = set(entry) - names
    if unknown:
        raise ValueError(f"bench case {entry.get('name', entry)!r} has unknown keys {sorted(unknown)}; expected {sorted(names)}")
    missing = {f.name for f in dataclasses.fields(BenchCase) if f.default is dataclasses.MISSING} - set(entry)
    if missing:
        raise ValueError(f"bench case {entry.get('name', entry)!r} lacks keys {sorted(missing)}")
    return BenchCase(**entry)


def load_cases(path: str | Path | None) -> tuple[list[BenchCase], str]:
    """Cases from ``path``, else from the shared JSON next to the repo if present, else the embedded copy.

    Returns the cases and where they came from.
    """
    if path is None and SHARED_CASES.is_file():
        path = SHARED_CASES
    if path is None:
        return [case_from_dict(dict(c)) for c in EMBEDDED_CASES], "embedded"
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"--cases {path}: cannot read a JSON case file: {exc}") from exc
    entries = data["cases"] if isinstance(data, dict) and "cases" in data else data
    if not isinstance(entries, list):
        raise SystemExit(f"--cases {path}: expected a list of cases or an object with a 'cases' list")
    return [case_from_dict(e) for e in entries], str(path)


def filter_cases(cases: Iterable[BenchCase], pattern: str | None) -> list[BenchCase]:
    """Cases whose name contains any of the comma-separated substrings in ``pattern`` (all if None)."""
    if not pattern:
        return list(cases)
    parts = [p.strip() for p in pattern.split(",") if p.strip()]
    return [c for c in cases if any(p in c.name for p in parts)]


def smoke_case(case: BenchCase) -> BenchCase:
    """A tiny version of ``case`` with the same structure (for CPU smoke runs).

    Lengths shrink 64x (q_len 1 stays 1), at most 4 requests and 3 decodes, E shrinks 16x and a window becomes
    E - 1, so the bias band, the window and the causal diagonal all still matter. The name gets
    an ``@smoke`` suffix so smoke records never pass for real ones.
    """
    q_len = 1 if case.q_len == 1 else max(16, case.q_len // 64)
    kv_len = max(q_len, case.kv_len // 64)
    rel_extent = max(8, case.rel_extent // 16)
    return dataclasses.replace(
        case,
        name=f"{case.name}@smoke",
        num_reqs=min(case.num_reqs, 4),
        decodes=min(case.decodes, 3),
        q_len=q_len,
        kv_len=kv_len,
        rel_extent=rel_extent,
        window_left=rel_extent - 1 if case.is_local else -1,
    )


# ---------------------------------------------------------------------------------------------
# Accounting (pure functions; anchors.md definitions)
# ---------------------------------------------------------------------------------------------


def visible_pairs(case: BenchCase) -> int:
    return sum(visible_pairs_per_request(q, case.kv_len, case.window_left) for q in case.q_lens)


def flop_count(case: BenchCase) -> int:
    """4 * d * Hq per visible pair (QK^T and PV, 2 flops per multiply-add)."""
    return 4 * case.d * case.hq * visible_pairs(case)


def byte_count(case: BenchCase, elem_bytes: int = 2) -> int:
    """K+V bytes that must be read (window-limited) + q + out + rel_logits bytes, each once."""
    kv = 2 * sum(kv_positions_read_per_request(q, case.kv_len, case.window_left) for q in case.q_lens) * case.hkv * case.d
    q_and_out = 2 * case.num_tokens * case.hq * case.d
    rel = case.num_tokens * case.hq * case.rel_extent
    return elem_bytes * (kv + q_and_out + rel)


def tflops(case: BenchCase, ms: float) -> float:
    return flop_count(case) / (ms * 1e-3) / 1e12


def gbps(case: BenchCase, ms: float) -> float:
    return byte_count(case) / (ms * 1e-3) / 1e9


def headline_metric(case: BenchCase) -> str:
    """The metric the table shows: GB/s for decode, TFLOP/s otherwise."""
    return "GB/s" if case.is_decode else "TFLOP/s"


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


@dataclass
class CaseInputs:
    """The tensors of one case, shared by every page size and peer.

    q (T, Hq, D), rel_logits (T, Hq, E), k_dense / v_dense (B, kv_len, Hkv, D); B = total_reqs,
    T = num_tokens, request b owns rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (``BenchCase.row``).
    """

    case: BenchCase
    q: torch.Tensor
    rel_logits: torch.Tensor
    k_dense: torch.Tensor
    v_dense: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cache_seqlens: torch.Tensor
    generator: torch.Generator

    @property
    def device(self) -> torch.device:
        return self.q.device


@dataclass
class PagedInputs:
    """Paged caches (num_blocks, page, Hkv, D) holding ``CaseInputs``' K/V through ``block_table``."""

    page_size: int
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor


@dataclass
class DenseInputs:
    """Unpaged (B, H, L, D) tensors for the dense peers (contiguous)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


def make_inputs(case: BenchCase, device: torch.device, seed: int, dtype: torch.dtype = torch.bfloat16) -> CaseInputs:
    """Random inputs for ``case``, built directly on ``device`` (fast for the 32K and 128K cases)."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=dtype)

    b, t = case.total_reqs, case.num_tokens
    cu_seqlens_q = torch.tensor([0, *itertools.accumulate(case.q_lens)], device=device, dtype=torch.int32)
    return CaseInputs(
        case=case,
        q=randn(t, case.hq, case.d),
        rel_logits=randn(t, case.hq, case.rel_extent),
        k_dense=randn(b, case.kv_len, case.hkv, case.d),
        v_dense=randn(b, case.kv_len, case.hkv, case.d),
        cu_seqlens_q=cu_seqlens_q,
        cache_seqlens=torch.full((b,), case.kv_len, device=device, dtype=torch.int32),
        generator=g,
    )


def make_paged(inputs: CaseInputs, page_size: int, spare_blocks: int = SPARE_BLOCKS) -> PagedInputs:
    """Scatter the dense K/V into pages: each request's pages are a random permutation of the blocks.

    The tail of a request's last page (when kv_len is not a multiple of page_size) holds finite
    random values (FA4's TMA page loads read whole pages); spare blocks hold NaN.
    """
    case, device = inputs.case, inputs.device
    pages = -(-case.kv_len // page_size)
    used = case.total_reqs * pages
    num_blocks = used + spare_blocks
    perm = torch.randperm(num_blocks, generator=inputs.generator, device=device)
    block_table = perm[:used].view(case.total_reqs, pages).to(torch.int32).contiguous()

    def paged(dense: torch.Tensor) -> torch.Tensor:
        cache = torch.full((num_blocks, page_size, case.hkv, case.d), float("nan"), device=device, dtype=dense.dtype)
        pad = pages * page_size - case.kv_len
        if pad:
            filler = torch.randn(case.total_reqs, pad, case.hkv, case.d, generator=inputs.generator, device=device, dtype=dense.dtype)
            dense = torch.cat([dense, filler], dim=1)
        cache[perm[:used]] = dense.reshape(used, page_size, case.hkv, case.d)
        return cache

    return PagedInputs(page_size, paged(inputs.k_dense), paged(inputs.v_dense), block_table)


def make_dense(inputs: CaseInputs) -> DenseInputs:
    """(B, H, L, D) contiguous copies for SDPA and FlexAttention (one request per batch row).

    A mixed batch has no such layout (its requests' q_len differ): :class:`Unavailable`.
    """
    case = inputs.case
    if case.mixed:
        raise Unavailable(MIXED_DENSE_REASON, status="skipped")
    q = inputs.q.view(case.num_reqs, case.q_len, case.hq, case.d).transpose(1, 2).contiguous()
    return DenseInputs(q, inputs.k_dense.transpose(1, 2).contiguous(), inputs.v_dense.transpose(1, 2).contiguous())


def dense_to_packed(out: torch.Tensor) -> torch.Tensor:
    """(B, Hq, q_len, D) -> (B * q_len, Hq, D), the packed row order of q."""
    b, h, l, d = out.shape
    return out.transpose(1, 2).reshape(b * l, h, d)


# ---------------------------------------------------------------------------------------------
# Correctness: a float64 dense reference on a few rows
# ---------------------------------------------------------------------------------------------


def check_rows(case: BenchCase) -> list[tuple[int, int]]:
    """(request, query row) pairs checked: first, second, middle and last two rows of the first and
    last chunk, and of the first and last decode."""

    def local(q_len):
        return sorted({i for i in (0, 1, q_len // 2, q_len - 2, q_len - 1) if 0 <= i < q_len})

    reqs = sorted({0, case.num_reqs - 1} | ({case.num_reqs, case.total_reqs - 1} if case.decodes else set()))
    return [(b, i) for b in reqs for i in local(case.q_lens[b])]


def reference_rows(inputs: CaseInputs, rows: Sequence[tuple[int, int]], with_bias: bool) -> torch.Tensor:
    """rel_attn (contract section 1) for the given rows, densely in float64: (len(rows), Hq, D)."""
    case = inputs.case
    group = case.hq // case.hkv
    outs = []
    for b, i in rows:
        t = case.row(b, i)
        q_abs = case.kv_len - case.q_lens[b] + i
        lo = 0 if case.window_left < 0 else max(0, q_abs - case.window_left)
        keys = inputs.k_dense[b, lo : q_abs + 1].double().repeat_interleave(group, dim=1)  # (n, Hq, D)
        vals = inputs.v_dense[b, lo : q_abs + 1].double().repeat_interleave(group, dim=1)
        logits = case.softmax_scale * torch.einsum("hd,nhd->hn", inputs.q[t].double(), keys)
        if with_bias:
            dist = q_abs - torch.arange(lo, q_abs + 1, device=inputs.device)
            bias = inputs.rel_logits[t].double()[:, dist.clamp(max=case.rel_extent - 1)]
            logits = logits + torch.where(dist < case.rel_extent, bias, torch.zeros_like(bias))
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(logits, dim=-1), vals))
    return torch.stack(outs)


def relative_l2(packed_out: torch.Tensor, rows: Sequence[tuple[int, int]], ref: torch.Tensor, case: BenchCase) -> float:
    """||out - ref|| / ||ref|| over the checked rows (NaN propagates, and is flagged)."""
    got = torch.stack([packed_out[case.row(b, i)].double() for b, i in rows])
    return float(torch.linalg.vector_norm(got - ref) / torch.linalg.vector_norm(ref))


# ---------------------------------------------------------------------------------------------
# Peers
# ---------------------------------------------------------------------------------------------


class Unavailable(Exception):
    """A peer cannot run here (software, hardware or policy); the message says why."""

    def __init__(self, reason: str, status: str = "unavailable"):
        super().__init__(reason)
        self.status = status


@dataclass
class Prepared:
    """A peer ready to run one case: ``fn()`` launches it and returns its output."""

    fn: Callable[[], torch.Tensor]
    to_packed: Callable[[torch.Tensor], torch.Tensor] = lambda out: out
    capturable: bool = True
    #: why ``capturable`` is False (said in the graph column)
    uncapturable_reason: str = ""
    backend: str | None = None
    note: str = ""


class Peer:
    """An implementation to time. Subclasses set ``name``, ``biased`` and ``dense`` and implement ``prepare``."""

    name = ""
    #: computes the Inkling bias (checked against the biased reference) or not
    biased = True
    #: reads dense, unpaged K/V: one measurement serves every page size
    dense = False

    def unavailable(self, case: BenchCase, device: torch.device) -> str | None:
        """Why this peer cannot run ``case`` on ``device`` (software or hardware missing), or None."""
        return None

    def skipped(self, case: BenchCase) -> str | None:
        """Why this benchmark does not run this peer on ``case`` by policy, or None (a dense peer
        skips a mixed batch: :func:`make_dense` has no layout for it)."""
        return MIXED_DENSE_REASON if self.dense and case.mixed else None

    def prepare(self, inputs: CaseInputs, paged: PagedInputs | None, dense: DenseInputs | None) -> Prepared:
        raise NotImplementedError


class OursPeer(Peer):
    """``inkling_ops.rel_attn(..., out=preallocated)``, with the default or a named backend."""

    biased = True
    dense = False

    def __init__(self, backend: str | None, reference_max_pairs: int):
        self.backend = backend
        self.reference_max_pairs = reference_max_pairs
        self.name = "ours" if backend is None else f"ours[{backend}]"

    def resolve(self, inputs: CaseInputs, paged: PagedInputs, out: torch.Tensor) -> tuple[str, int]:
        """The backend and split count the dispatcher picks for this call (host-only planning)."""
        from inkling_ops import dispatch
        from inkling_ops.validation import check_call

        case = inputs.case
        problem = check_call(
            inputs.q, paged.key_cache, paged.value_cache, paged.block_table, inputs.cache_seqlens,
            inputs.cu_seqlens_q, inputs.rel_logits, case.q_len, case.softmax_scale, list(case.window_size),
            True, 0, out,
        )  # fmt: skip
        try:
            backend, plan = dispatch.plan_call(problem, inputs.device, self.backend)
        except ValueError as exc:
            raise Unavailable(str(exc)) from exc
        return backend.name, plan.num_splits

    def prepare(self, inputs, paged, dense):
        from inkling_ops.api import rel_attn

        case = inputs.case
        out = torch.empty_like(inputs.q)
        backend, splits = self.resolve(inputs, paged, out)
        if backend == "reference" and visible_pairs(case) > self.reference_max_pairs:
            raise Unavailable(
                f"the reference backend is slow: {visible_pairs(case):.3g} visible pairs > --reference-max-pairs "
                f"{self.reference_max_pairs:.3g}",
                status="skipped",
            )
        kwargs = dict(
            block_table=paged.block_table,
            cache_seqlens=inputs.cache_seqlens,
            cu_seqlens_q=inputs.cu_seqlens_q,
            rel_logits=inputs.rel_logits,
            max_seqlen_q=case.q_len,
            softmax_scale=case.softmax_scale,
            window_size=case.window_size,
            out=out,
            backend=self.backend,
        )

        def fn():
            return rel_attn(inputs.q, paged.key_cache, paged.value_cache, **kwargs)

        # The reference backend reads metadata on the host: it cannot be captured in a CUDA graph.
        return Prepared(
            fn, capturable=backend != "reference", uncapturable_reason="the reference backend reads metadata on the host",
            backend=backend, note=f"backend={backend} splits={splits}",
        )  # fmt: skip


# --- flash-attn-4 ---------------------------------------------------------------------------

_VLLM_SCORE_MODS: dict[int, Callable] = {}


def vllm_inkling_score_mod(rel_extent: int) -> Callable:
    """The flash-attn-4 ``score_mod`` of the ``fa4_scoremod`` peer: the Inkling bias, computed as vLLM does it.

    This is the peer's definition, so it mirrors, operation for operation, the score_mod that vLLM
    ships for Inkling on Hopper (``vllm/models/inkling/nvidia/ops/fa4_rel_attention.py``,
    ``_get_score_mod``): the distance and the packed query row as one-element vectors, the
    distance's scalar clamped into ``[0, E - 1]`` by two scalar conditional expressions (the DSL
    turns them into selects), one load of ``rel_logits[row, h, index]`` converted to float32, kept
    when the clamp left the distance unchanged and 0 otherwise, added to the scores. Until
    2026-12-01 this peer used a home-made score_mod (vector ``where``s through register tensors)
    that was 27-38% slower than vLLM's; timing against a slower score_mod than the one users run
    inflates our ratios (meta/BENCHMARKS.md, "Correction").

    flash-attn-4 calls it as ``score_mod(scores, b_idx, h_idx, q_idx=, kv_idx=, seqlen_info=,
    aux_tensors=)`` with one-element TensorSSA vectors, ``scores`` already multiplied by
    softmax_scale, ``q_idx`` / ``kv_idx`` request-local and ``seqlen_info`` a ``SeqlenInfoQK``
    (``offset_q``, ``seqlen_q``, ``seqlen_k``); ``aux_tensors=[rel_logits]``, (T, Hq, E).

    Equivalent PyTorch, per score: ``d = q_idx + seqlen_k - seqlen_q - kv_idx;
    scores + (rel_logits[offset_q + q_idx, h, d] if 0 <= d < E else 0)``.

    One function object per ``rel_extent`` (cached: E is a compile-time constant, and flash-attn-4
    keys its compile cache on the function). Imports the CuTe DSL only when called.
    """
    if rel_extent in _VLLM_SCORE_MODS:
        return _VLLM_SCORE_MODS[rel_extent]
    import cutlass
    import cutlass.cute as cute

    @cute.jit
    def inkling_rel_bias(scores, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
        bias_table = aux_tensors[0]
        distance = (q_idx + (seqlen_info.seqlen_k - seqlen_info.seqlen_q)) - kv_idx
        row = seqlen_info.offset_q + q_idx
        d0 = distance[0]
        column = d0 if d0 >= 0 else 0
        column = column if column < rel_extent else rel_extent - 1
        bias = bias_table[row[0], h_idx[0], column]
        bias = cutlass.Float32(bias) if d0 == column else cutlass.Float32(0.0)
        return scores + bias

    _VLLM_SCORE_MODS[rel_extent] = inkling_rel_bias
    return inkling_rel_bias


def import_fa4() -> Callable:
    """``flash_attn.cute.flash_attn_varlen_func``, or :class:`Unavailable` saying why not."""
    try:
        module = importlib.import_module("flash_attn.cute")
        return module.flash_attn_varlen_func
    except Exception as exc:  # ImportError, or a CUDA/DSL error raised while importing
        raise Unavailable(f"cannot import flash_attn.cute (flash-attn-4): {type(exc).__name__}: {exc}") from exc


def call_fa4(
    varlen_fn: Callable,
    case: BenchCase,
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cache_seqlens: torch.Tensor,
    block_table: torch.Tensor,
    rel_logits: torch.Tensor | None,
) -> torch.Tensor:
    """One paged-varlen flash-attn-4 call as vLLM makes it on Hopper; the bias when ``rel_logits`` is given."""
    biased = rel_logits is not None
    out, _lse = varlen_fn(
        q,
        key_cache,
        value_cache,
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=case.q_len,
        seqused_k=cache_seqlens,
        page_table=block_table,
        softmax_scale=case.softmax_scale,
        causal=True,
        window_size=(case.window_left, 0) if case.is_local else (None, None),
        num_splits=1,
        score_mod=vllm_inkling_score_mod(case.rel_extent) if biased else None,
        aux_tensors=[rel_logits] if biased else None,
    )
    return out


class Fa4Peer(Peer):
    """flash-attn-4's CuTe DSL kernel, paged varlen, ``num_splits=1``; the bias as vLLM's ``score_mod``."""

    dense = False

    def __init__(self, with_bias: bool):
        self.biased = with_bias
        self.name = "fa4_scoremod" if with_bias else "fa4_nobias"

    def unavailable(self, case, device):
        if device.type != "cuda":
            return f"flash-attn-4 runs on CUDA only (device is {device.type})"
        major, minor = torch.cuda.get_device_capability(device)
        if major < 9:
            return f"flash-attn-4's paged kernel needs SM90 or newer (device is sm_{major}{minor})"
        try:
            import_fa4()
        except Unavailable as exc:
            return str(exc)
        return None

    def prepare(self, inputs, paged, dense):
        varlen_fn = import_fa4()
        rel = inputs.rel_logits if self.biased else None

        def fn():
            return call_fa4(
                varlen_fn, inputs.case, inputs.q, paged.key_cache, paged.value_cache,
                inputs.cu_seqlens_q, inputs.cache_seqlens, paged.block_table, rel,
            )  # fmt: skip

        return Prepared(fn)


# --- FlexAttention ----------------------------------------------------------------------------

_FLEX_COMPILED: Callable | None = None


def compiled_flex() -> Callable:
    """``flex_attention`` under ``torch.compile(dynamic=False)``, built once; static shapes per case."""
    global _FLEX_COMPILED
    if _FLEX_COMPILED is None:
        from torch.nn.attention.flex_attention import flex_attention

        # Every case recompiles (new shapes, new captured tensors); keep dynamo from giving up.
        config = torch._dynamo.config
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(config, knob):
                setattr(config, knob, max(getattr(config, knob), 64))
        _FLEX_COMPILED = torch.compile(flex_attention, dynamic=False)
    return _FLEX_COMPILED


def flex_mods(case: BenchCase, rel_dense: torch.Tensor | None) -> tuple[Callable, Callable | None]:
    """(mask_mod, score_mod) for FlexAttention over dense (B, H, L, D) tensors, one request per batch row.

    ``rel_dense`` is (B, Hq, q_len, E); the query at ``q_idx`` sits at ``q_idx + kv_len - q_len``.
    """
    offset, window, extent = case.kv_len - case.q_len, case.window_left, case.rel_extent

    def mask_mod(b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        visible = distance >= 0
        if window >= 0:
            visible = visible & (distance <= window)
        return visible

    if rel_dense is None:
        return mask_mod, None

    def score_mod(score, b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        bias = rel_dense[b, h, q_idx, distance.clamp(0, extent - 1)]
        in_band = (distance >= 0) & (distance < extent)
        return score + torch.where(in_band, bias, torch.zeros_like(bias))

    return mask_mod, score_mod


class FlexPeer(Peer):
    """FlexAttention (compiled on CUDA, eager on CPU by default), bias as score_mod, dense K/V, GQA."""

    name = "flex"
    biased = True
    dense = True

    def __init__(self, mode: str = "auto"):
        if mode not in ("auto", "compile", "eager"):
            raise ValueError(f"--flex-mode is {mode!r}; expected auto, compile or eager")
        self.mode = mode

    def unavailable(self, case, device):
        try:
            importlib.import_module("torch.nn.attention.flex_attention")
        except Exception as exc:
            return f"cannot import torch.nn.attention.flex_attention: {type(exc).__name__}: {exc}"
        return None

    def prepare(self, inputs, paged, dense):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        case, device = inputs.case, inputs.device
        compile_it = self.mode == "compile" or (self.mode == "auto" and device.type == "cuda")
        rel_dense = inputs.rel_logits.view(case.num_reqs, case.q_len, case.hq, case.rel_extent).transpose(1, 2).contiguous()
        mask_mod, score_mod = flex_mods(case, rel_dense)
        # Uncompiled mask creation materializes (B, q_len, kv_len) booleans: compile it for big cases.
        big_mask = device.type == "cuda" and case.num_reqs * case.q_len * case.kv_len > (1 << 28)
        block_mask = create_block_mask(mask_mod, case.num_reqs, None, case.q_len, case.kv_len, device=device, _compile=big_mask)
        if compile_it:
            attend = compiled_flex()
        else:
            attend = flex_attention  # eager on purpose (CPU smoke runs): its "use torch.compile" advice is noise
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

        def fn():
            return attend(dense.q, dense.k, dense.v, score_mod=score_mod, block_mask=block_mask, scale=case.softmax_scale, enable_gqa=True)

        return Prepared(fn, to_packed=dense_to_packed, note="compiled" if compile_it else "eager")


# --- SDPA ---------------------------------------------------------------------------------------


class SdpaPeer(Peer):
    """``F.scaled_dot_product_attention`` on dense K/V without the bias; global layers only."""

    name = "sdpa_nobias"
    biased = False
    dense = True

    def skipped(self, case):
        if case.is_local:
            return "SDPA has no sliding-window mask (anchors.md skips it on sliding layers)"
        return super().skipped(case)

    def prepare(self, inputs, paged, dense):
        import torch.nn.functional as F

        case = inputs.case
        kwargs = dict(scale=case.softmax_scale, enable_gqa=True)
        if case.q_len == case.kv_len:
            kwargs["is_causal"] = True  # top-left and bottom-right causal coincide
            note = "is_causal=True"
        elif case.q_len == 1:
            note = "no mask (one query sees every key)"
        else:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(case.q_len, case.kv_len)
            note = "attn_mask=causal_lower_right"

        def fn():
            return F.scaled_dot_product_attention(dense.q, dense.k, dense.v, **kwargs)

        return Prepared(fn, to_packed=dense_to_packed, note=note)


def make_peers(names: Sequence[str], backends: Sequence[str | None], reference_max_pairs: int, flex_mode: str) -> list[Peer]:
    """The peers to run, in table order; ``ours`` expands to one peer per backend."""
    unknown = [n for n in names if n not in ALL_PEERS]
    if unknown:
        raise SystemExit(f"--peers: unknown peer(s) {unknown}; expected a subset of {list(ALL_PEERS)}")
    peers: list[Peer] = []
    for name in names:
        if name == "ours":
            peers.extend(OursPeer(b, reference_max_pairs) for b in backends)
        elif name == "fa4_scoremod":
            peers.append(Fa4Peer(with_bias=True))
        elif name == "fa4_nobias":
            peers.append(Fa4Peer(with_bias=False))
        elif name == "flex":
            peers.append(FlexPeer(flex_mode))
        elif name == "sdpa_nobias":
            peers.append(SdpaPeer())
    return peers


# ---------------------------------------------------------------------------------------------
# Timing and measurements
# ---------------------------------------------------------------------------------------------


#: The two clocks every table gives: eager calls timed by do_bench (host launches included) and
#: CUDA-graph replay (device time only).
CLOCKS = ("eager", "graph")


@dataclass(frozen=True)
class TimingConfig:
    """How to time: do_bench's warmup/rep (ms), CUDA-graph replays, CPU repetitions, which clocks."""

    warmup_ms: int = 25
    rep_ms: int = 100
    graph_reps: int = 100
    cpu_reps: int = 5
    host_calls: int = 500
    #: how CUDA-graph replays flush the L2 before each timed replay: "zero" writes a 256 MB buffer
    #: (as ``do_bench`` does; it leaves the L2 full of dirty lines, so a short memory-bound kernel
    #: also pays for writing up to its own read volume back to DRAM), "read" reads it (clean lines).
    #: do_bench (the eager clock) always zeroes.
    l2_flush: str = "zero"
    #: the clocks measured (a subset of :data:`CLOCKS`; both by default)
    clocks: tuple[str, ...] = CLOCKS
    #: rounds of the clocks' loops, in alternating order (eager then graph, graph then eager, ...);
    #: each clock's figure is the median of its rounds. On the long cases the GPU's power cap
    #: moves back-to-back loops of one call by up to 13%, whichever runs first
    #: (meta/BENCHMARKS.md, "An H100 on 2026-12-05"); one round, eager first, is the default.
    clock_rounds: int = 1

    def __post_init__(self):
        if isinstance(self.clock_rounds, bool) or not isinstance(self.clock_rounds, int) or self.clock_rounds < 1:
            raise ValueError(f"TimingConfig: clock_rounds={self.clock_rounds!r}; expected an int >= 1")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_first_call(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[torch.Tensor, float]:
    """Run ``fn`` once (this includes any compile), wait for it; return its output and the seconds taken."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def time_do_bench(fn: Callable, cfg: TimingConfig) -> float:
    """Median ms of ``triton.testing.do_bench`` (L2 flushed before every timed call)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=cfg.warmup_ms, rep=cfg.rep_ms, return_mode="median"))


L2_FLUSHES = ("zero", "read")


def l2_flusher(kind: str, device: torch.device) -> Callable[[], None]:
    """A function that evicts the L2 by touching a 256 MB buffer (larger than the H200's 60 MB L2).

    - ``"zero"``: ``buf.zero_()``, as ``triton.testing.do_bench`` flushes; the L2 is left holding
      dirty lines of the buffer;
    - ``"read"``: ``buf.sum()`` over int32 words; the L2 is left holding clean lines.

    Equivalent PyTorch: ``lambda: buf.zero_()`` or ``lambda: buf.view(torch.int32).sum()``.
    """
    if kind not in L2_FLUSHES:
        raise ValueError(f"l2_flush={kind!r}; expected one of {', '.join(L2_FLUSHES)}")
    buf = torch.empty(256 << 20, dtype=torch.int8, device=device)
    if kind == "zero":
        return lambda: buf.zero_()
    words = buf.view(torch.int32).zero_()  # defined contents, then a read-only pass per flush
    return lambda: words.sum()


def capture_graph(fn: Callable, device: torch.device) -> torch.cuda.CUDAGraph:
    """A CUDA graph of one ``fn`` call, captured after three warm calls on a side stream (as
    capture requires), the device synchronized before and after the capture."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize(device)
    return graph


def time_cuda_graph(fn: Callable, cfg: TimingConfig, device: torch.device) -> float:
    """Median ms of replaying a CUDA graph of one ``fn`` call, with the L2 flushed (eagerly) before each replay.

    Like ``do_bench``, the timed replays follow ``cfg.warmup_ms`` of untimed ones (each with its
    flush), so they do not start on a GPU that has been idle (for the host-side checks before
    it): without that warmup, the 1 x 128K decode measured 34.3-34.6 us inside the benchmark
    and 33.0-33.4 us when timed in a process of its own (meta/logs/why_decode128k_16f519e.log).
    """
    graph = capture_graph(fn, device)
    flush = l2_flusher(cfg.l2_flush, device)
    warm_start, warm_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    warm_start.record()
    flush()
    graph.replay()
    warm_end.record()
    torch.cuda.synchronize(device)
    for _ in range(int(cfg.warmup_ms / max(warm_start.elapsed_time(warm_end), 1e-3))):
        flush()
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(cfg.graph_reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(cfg.graph_reps)]
    for start, end in zip(starts, ends, strict=True):
        flush()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize(device)
    del graph
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def time_cpu(fn: Callable, cfg: TimingConfig) -> float:
    """Median wall ms of ``cfg.cpu_reps`` calls (CPU runs only)."""
    fn()
    times = []
    for _ in range(cfg.cpu_reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def utc_now(timespec: str = "milliseconds") -> str:
    """The wall clock, UTC, in ISO 8601 (to the millisecond, as the records' windows carry it;
    the records' ``timestamp`` and ``recorded_at`` to the second)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec=timespec)


def time_clocks(prepared: Prepared, cfg: TimingConfig, device: torch.device) -> dict:
    """Both clocks of one prepared peer: ``{eager,graph}_ms`` (None where not measured),
    ``{eager,graph}_timing`` and ``{eager,graph}_window``, and with ``cfg.clock_rounds`` > 1
    ``{eager,graph}_rounds`` (each round's figure, in measurement order).

    ``*_timing`` names the method, or says why there is no time: ``n/a (cpu)`` for the graph
    clock on CPU, ``not capturable: ...`` for a peer that synchronizes with the host, ``capture
    failed: ...``, ``not measured (--clocks)``. ``*_window`` is ``[start, end]`` (:func:`utc_now`)
    of that clock's whole measurement, warmup and capture included, or None where none ran: what
    ``meta/tools/smi_clocks.py`` joins with an nvidia-smi log to give each measurement its SM clock.
    With several rounds a clock's window spans its first round's start to its last round's end,
    and its figure is the median of its rounds; the rounds alternate which clock goes first.
    """
    result: dict = {}
    for clock in CLOCKS:
        result[f"{clock}_ms"], result[f"{clock}_timing"], result[f"{clock}_window"] = None, "not measured (--clocks)", None
    if device.type != "cuda":
        if "eager" in cfg.clocks:
            start = utc_now()
            result["eager_ms"], result["eager_timing"] = time_cpu(prepared.fn, cfg), f"cpu wall clock, median of {cfg.cpu_reps}"
            result["eager_window"] = [start, utc_now()]
        result["graph_timing"] = "n/a (cpu)"
        return result
    rounds = cfg.clock_rounds
    measured: dict[str, list[float]] = {clock: [] for clock in CLOCKS}
    methods = dict(
        eager=f"triton do_bench median (L2 flushed), warmup={cfg.warmup_ms}ms rep={cfg.rep_ms}ms",
        graph=f"CUDA graph replay median of {cfg.graph_reps} after {cfg.warmup_ms} ms of warmup replays "
        f"({'L2 flushed' if cfg.l2_flush == 'zero' else f'L2 flushed by {cfg.l2_flush}'})",
    )
    graph_ok = "graph" in cfg.clocks
    if graph_ok and not prepared.capturable:
        result["graph_timing"] = f"not capturable: {prepared.uncapturable_reason or 'host-synchronizing peer'}"
        graph_ok = False
    for r in range(rounds):
        for clock in (CLOCKS if r % 2 == 0 else CLOCKS[::-1]):
            if clock not in cfg.clocks or (clock == "graph" and not graph_ok):
                continue
            start = utc_now()
            try:
                ms = time_do_bench(prepared.fn, cfg) if clock == "eager" else time_cuda_graph(prepared.fn, cfg, device)
            except RuntimeError as exc:
                if clock == "eager":
                    raise
                synchronize(device)  # raises again if the context is broken: the run stops there
                result["graph_timing"] = f"capture failed: {first_line(exc)}"
                graph_ok = False
                ms = None
            window = result[f"{clock}_window"]
            result[f"{clock}_window"] = [start if window is None else window[0], utc_now()]
            if ms is not None:
                measured[clock].append(ms)
    for clock in CLOCKS:
        if measured[clock]:
            result[f"{clock}_ms"] = statistics.median(measured[clock])
            result[f"{clock}_timing"] = methods[clock] + ("" if rounds == 1 else f"; median of {rounds} rounds, orders alternating")
            if rounds > 1:
                result[f"{clock}_rounds"] = measured[clock]
    return result


def clock_ms(record: dict, clock: str) -> float | None:
    """A record's time on ``clock`` ("eager" or "graph"), for new and old records alike.

    Records since issue 15 carry ``eager_ms`` and ``graph_ms``. Older ones carry one time,
    ``median_ms``, on the clock their ``timing`` names: CUDA-graph replay when it starts with
    "CUDA graph", else eager (do_bench, or the CPU wall clock).
    """
    if "eager_ms" in record or "graph_ms" in record:
        return record.get(f"{clock}_ms")
    ms = record.get("median_ms")
    old_clock = "graph" if str(record.get("timing") or "").startswith("CUDA graph") else "eager"
    return ms if clock == old_clock else None


def measure_memory_mb(fn: Callable, device: torch.device) -> float | None:
    """Device memory (MB) one warm call allocates beyond what exists before it (peak delta); None on CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del out
    return (peak - before) / 2**20


def first_line(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:limit]


# ---------------------------------------------------------------------------------------------
# Logging, environment, records
# ---------------------------------------------------------------------------------------------


class Log:
    """Prints short lines (through tqdm when a bar is active) and writes everything to log files."""

    def __init__(self, paths: Sequence[Path], quiet: bool = False):
        self.files = []
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            self.files.append(open(p, "w"))
        self.quiet = quiet
        self.bar = None

    def detail(self, message: str) -> None:
        """To the log files only."""
        for f in self.files:
            f.write(message + "\n")
            f.flush()

    def info(self, message: str) -> None:
        """To the console and the log files."""
        self.detail(message)
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        for f in self.files:
            f.close()


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_state(explicit_sha: str | None) -> tuple[str | None, bool | None]:
    """(SHA, dirty) of the repo; ``explicit_sha`` (``--git-sha`` or $INKLING_GIT_SHA) wins. Tolerates no git."""
    sha = explicit_sha or os.environ.get("INKLING_GIT_SHA")
    dirty = None
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        if sha is None:
            sha = head or None
        if sha and head.startswith(sha):  # else the tree is not a checkout of that commit (a copied tree): unknown
            status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True)
            dirty = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return sha, dirty


def environment(device: torch.device, git_sha: str | None, argv: Sequence[str]) -> dict:
    """What every record repeats: when, where, which versions, which code, which command."""
    sha, dirty = git_state(git_sha)
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        cap = f"sm_{major}{minor}"
    else:
        gpu, cap = f"cpu ({platform.processor() or platform.machine()})", None
    return {
        "timestamp": utc_now("seconds"),
        "gpu": gpu,
        "arch": cap,
        "device": str(device),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": package_version("triton"),
            "cutlass_dsl": package_version("nvidia-cutlass-dsl"),
            "flash_attn_4": package_version("flash-attn-4"),
            "quack_kernels": package_version("quack-kernels"),
            "inkling_ops": package_version("inkling_ops") or getattr(importlib.import_module("inkling_ops"), "__version__", None),
        },
        "git_sha": sha,
        "git_dirty": dirty,
        "argv": list(argv),
        "command": shlex.join(argv),
    }


def make_record(env: dict, case: BenchCase, page_size: int, peer: str, **fields) -> dict:
    """One JSON record: environment, case, page size, peer, then the measurement fields.

    Per clock (``eager``: do_bench, launches included; ``graph``: CUDA-graph replay):
    ``{clock}_ms``, ``{clock}_tflops``, ``{clock}_gbps`` (None where that clock has no time) and
    ``{clock}_timing`` (the method, or why there is no time), and since 2026-12-04 ``{clock}_window``
    (the measurement's UTC start and end, :func:`time_clocks`). Records before issue 15 had one
    ``median_ms`` / ``tflops`` / ``gbps`` / ``timing`` instead (:func:`clock_ms` reads both).
    """
    record = dict(env)
    record.update(case=case.name, case_spec=case.spec(), page_size=page_size, peer=peer)
    record.update(
        status=fields.pop("status", "ok"),
        reason=fields.pop("reason", None),
        eager_ms=None,
        eager_tflops=None,
        eager_gbps=None,
        eager_timing=None,
        graph_ms=None,
        graph_tflops=None,
        graph_gbps=None,
        graph_timing=None,
        rel_err=None,
        err_flag=None,
        mem_mb=None,
        first_call_s=None,
        flops=flop_count(case),
        bytes=byte_count(case),
        backend=None,
        note="",
    )
    record.update(fields)
    record["recorded_at"] = utc_now("seconds")
    return record


class RecordSink:
    """Collects records and appends each one to the JSON-lines files at once (a killed run keeps what it measured)."""

    def __init__(self, paths: Iterable[Path]):
        self.paths = list(paths)
        self.records: list[dict] = []
        for path in self.paths:
            path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, record: dict) -> None:
        self.records.append(record)
        line = json.dumps(record) + "\n"
        for path in self.paths:
            with open(path, "a") as f:
                f.write(line)


# ---------------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------------


def run_peer(peer: Peer, inputs: CaseInputs, paged: PagedInputs | None, dense: DenseInputs | None, env: dict, cfg: TimingConfig, tol: float, log: Log) -> dict:
    """Prepare, first-call, check, measure memory and time one peer on one case; always returns a record."""
    case, device = inputs.case, inputs.device
    page_size = paged.page_size if paged is not None else 0
    skip = peer.skipped(case)
    if skip is not None:
        return make_record(env, case, page_size, peer.name, status="skipped", reason=skip)
    reason = peer.unavailable(case, device)
    if reason is not None:
        return make_record(env, case, page_size, peer.name, status="unavailable", reason=reason)
    stage = "prepare"
    try:
        prepared = peer.prepare(inputs, paged, dense)
        stage = "first call"
        out, first_s = time_first_call(prepared.fn, device)
        stage = "check"
        rows = check_rows(case)
        ref = reference_rows(inputs, rows, with_bias=peer.biased)
        err = relative_l2(prepared.to_packed(out), rows, ref, case)
        del out
        stage = "memory"
        mem = measure_memory_mb(prepared.fn, device)
        stage = "timing"
        clocks = time_clocks(prepared, cfg, device)
    except Unavailable as exc:
        return make_record(env, case, page_size, peer.name, status=exc.status, reason=str(exc))
    except Exception as exc:
        log.detail(f"{case.name} page {page_size} {peer.name}: failed at {stage}:\n{traceback.format_exc()}")
        synchronize(device)  # a broken CUDA context raises here and ends the run
        return make_record(env, case, page_size, peer.name, status="error", reason=f"{stage}: {first_line(exc)}")
    for clock in CLOCKS:
        ms = clocks[f"{clock}_ms"]
        clocks[f"{clock}_tflops"] = None if ms is None else tflops(case, ms)
        clocks[f"{clock}_gbps"] = None if ms is None else gbps(case, ms)
    flagged = not (err <= tol)  # NaN is flagged too
    return make_record(
        env, case, page_size, peer.name,
        **clocks, rel_err=err, err_flag=flagged, mem_mb=mem, first_call_s=first_s, backend=prepared.backend,
        note=("; ".join(x for x in (prepared.note, "checked against the biased reference" if peer.biased else "checked against the unbiased reference") if x)),
    )  # fmt: skip


def describe(record: dict) -> str:
    """One log line for a record: both clocks, then the checks."""
    head = f"  {record['case']:<22} p{record['page_size']:<4} {record['peer']:<18}"
    if record["status"] != "ok":
        return f"{head} {record['status']}: {record['reason']}"
    case = BenchCase(**record["case_spec"])
    parts = []
    for clock in CLOCKS:
        ms = clock_ms(record, clock)
        if ms is None:
            parts.append(f"{clock} {record.get(f'{clock}_timing') or '-'}")
        else:
            parts.append(f"{clock} {_num(ms, 4)} ms {_num(tflops(case, ms))} TFLOP/s {_num(gbps(case, ms))} GB/s")
    mem = "" if record["mem_mb"] is None else f" mem {record['mem_mb']:.1f} MB"
    flag = "  ** rel_err above tolerance **" if record["err_flag"] else ""
    return f"{head} {' | '.join(parts)}  rel_err {record['rel_err']:.2e}  first call {record['first_call_s']:.2f} s{mem}  [{record['note']}]{flag}"


def run_case(case: BenchCase, page_sizes: Sequence[int], peers: Sequence[Peer], device: torch.device, dtype: torch.dtype, seed: int, env: dict, cfg: TimingConfig, tol: float, log: Log, sink: RecordSink, on_step: Callable[[str], None] = lambda label: None) -> None:
    """Every peer at every page size on one case; dense peers are measured once and reported per page size."""
    inputs = make_inputs(case, device, seed, dtype)
    dense_records: dict[str, dict] = {}
    for page_size in page_sizes:
        paged = make_paged(inputs, page_size)
        dense = None
        for peer in peers:
            if peer.dense and peer.name in dense_records:
                rec = dict(dense_records[peer.name], page_size=page_size)
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + f"dense layout: measured once, at page size {page_sizes[0]}"
            else:
                if peer.dense and dense is None and peer.skipped(case) is None:
                    dense = make_dense(inputs)
                rec = run_peer(peer, inputs, paged, dense if peer.dense else None, env, cfg, tol, log)
                if peer.dense:
                    dense_records[peer.name] = rec
            sink.add(rec)
            log.info(describe(rec))
        del paged, dense
        on_step(f"{case.name} page {page_size}")
    del inputs
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Host overhead
# ---------------------------------------------------------------------------------------------

HOST_METHOD = (
    "tiny decode (1 request, q_len 1, kv_len 256, 8/1 heads, page 16): N back-to-back eager calls, one "
    "synchronize at the end, wall time / N; gpu_us_per_call is the same call's device time (CUDA-graph "
    "replay, do_bench where capture fails; records up to commit 0ed5212 used do_bench, which also counts host gaps). "
    "When gpu_us_per_call is well below host_us_per_call the loop is host-bound and host_us_per_call is the "
    "eager host overhead; 'noop' is the same loop over a one-element in-place add (a bare kernel launch)."
)


def measure_host_overhead(peers: Sequence[Peer], device: torch.device, dtype: torch.dtype, env: dict, cfg: TimingConfig, seed: int, log: Log, sink: RecordSink) -> None:
    """Eager host overhead per call of ours (each backend), sdpa_nobias and fa4_scoremod on a tiny decode."""
    case = BenchCase(HOST_CASE, num_reqs=1, q_len=1, kv_len=256, hq=8, hkv=1, d=128, rel_extent=1024)
    inputs = make_inputs(case, device, seed, dtype)
    paged, dense = make_paged(inputs, 16), make_dense(inputs)
    scratch = torch.zeros(1, device=device)
    candidates: list[tuple[str, Callable[[], Prepared]]] = [("noop", lambda: Prepared(lambda: scratch.add_(1)))]
    for peer in peers:
        if isinstance(peer, (OursPeer, SdpaPeer)) or (isinstance(peer, Fa4Peer) and peer.biased):
            candidates.append((peer.name, lambda peer=peer: _prepare_if_available(peer, inputs, paged, dense)))
    n = cfg.host_calls if device.type == "cuda" else max(5, cfg.cpu_reps * 4)
    for name, prepare in candidates:
        try:
            prepared = prepare()
            for _ in range(3):
                prepared.fn()
            synchronize(device)
            start = time.perf_counter()
            for _ in range(n):
                prepared.fn()
            synchronize(device)
            host_us = (time.perf_counter() - start) / n * 1e6
            gpu_us = _device_us(prepared.fn, cfg, device) if device.type == "cuda" else None
        except Unavailable as exc:
            sink.add(make_record(env, case, 16, name, status=exc.status, reason=str(exc), note=HOST_METHOD))
            continue
        except Exception as exc:
            log.detail(f"host overhead {name}:\n{traceback.format_exc()}")
            synchronize(device)
            sink.add(make_record(env, case, 16, name, status="error", reason=first_line(exc), note=HOST_METHOD))
            continue
        bound = None if gpu_us is None else ("gpu" if gpu_us > 0.5 * host_us else "host")
        sink.add(
            make_record(env, case, 16, name, host_us_per_call=host_us, gpu_us_per_call=gpu_us, bound=bound, calls=n, backend=prepared.backend, timing="host loop", note=HOST_METHOD)
        )
        gpu_text = "" if gpu_us is None else f", device {gpu_us:.1f} us ({bound}-bound)"
        log.info(f"  host overhead {name:<18} {host_us:.1f} us/call over {n} calls{gpu_text}")


def _device_us(fn: Callable, cfg: TimingConfig, device: torch.device) -> float:
    """Device time of one call in µs: CUDA-graph replay, which leaves the host out.

    do_bench's event pair also counts the wait for a slow host launch path once it outlasts the
    L2 flush, which made tiny calls look GPU-bound; it is the fallback when capture fails.
    """
    try:
        return time_cuda_graph(fn, cfg, device) * 1e3
    except Exception:  # noqa: BLE001 - e.g. a peer that syncs; fall back to do_bench
        torch.cuda.synchronize(device)
        return time_do_bench(fn, cfg) * 1e3


def _prepare_if_available(peer: Peer, inputs: CaseInputs, paged: PagedInputs, dense: DenseInputs) -> Prepared:
    skip = peer.skipped(inputs.case)
    if skip is not None:
        raise Unavailable(skip, status="skipped")
    reason = peer.unavailable(inputs.case, inputs.device)
    if reason is not None:
        raise Unavailable(reason)
    return peer.prepare(inputs, paged, dense if peer.dense else None)


# ---------------------------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------------------------


def format_table(records: Sequence[dict]) -> str:
    """Case x peer x clock: ms, headline metric (TFLOP/s or GB/s) and the peer's time over ours, per clock.

    Every peer has an ``eager`` column (do_bench, host launches included) and a ``graph`` column
    (CUDA-graph replay) side by side; the ratio in each compares the two times on that clock.
    Reads old single-clock records too (:func:`clock_ms`); their other clock shows ``-``.
    """
    timed = [r for r in records if r["case"] != HOST_CASE]
    if not timed:
        return "(no benchmark records)"
    peers = list(dict.fromkeys(r["peer"] for r in timed))
    baseline = next((p for p in peers if p.startswith("ours")), None)
    rows = list(dict.fromkeys((r["case"], r["page_size"]) for r in timed))
    by_key = {(r["case"], r["page_size"], r["peer"]): r for r in timed}
    columns = [(p, clock) for p in peers for clock in CLOCKS]
    table = []
    for case_name, page in rows:
        base = by_key.get((case_name, page, baseline)) if baseline else None
        base_ms = {clock: clock_ms(base, clock) if base and base["status"] == "ok" else None for clock in CLOCKS}
        cells = [_cell(by_key.get((case_name, page, p)), clock, base_ms[clock]) for p, clock in columns]
        table.append((case_name, page, cells))
    names = [f"{p} {clock}" for p, clock in columns]
    name_w = max(len("case"), *(len(c) for c, _, _ in table))
    widths = [max(len(n), *(len(cells[k]) for _, _, cells in table)) for k, n in enumerate(names)]
    header = f"{'case':<{name_w}} {'page':>4} | " + " | ".join(f"{n:<{w}}" for n, w in zip(names, widths, strict=True))
    lines = [
        "cell: median ms, TFLOP/s (T, prefill) or GB/s (G, decode), and x = peer time / "
        f"{baseline or 'ours'} time on the same clock (>1: ours faster); ! = rel_err above tolerance",
        "clocks: eager = triton do_bench of eager calls (host launches included), graph = CUDA-graph replay (device only)",
        header,
        "-" * len(header),
    ]
    for case_name, page, cells in table:
        lines.append((f"{case_name:<{name_w}} {page:>4} | " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True))).rstrip())
    host = [r for r in records if r["case"] == HOST_CASE and r["status"] == "ok"]
    if host:
        lines.append("eager host overhead per call (tiny decode): " + ", ".join(f"{r['peer']} {r['host_us_per_call']:.1f} us" for r in host))
    return "\n".join(lines)


def _cell(record: dict | None, clock: str, base_ms: float | None) -> str:
    """One table cell: a record's time on ``clock``, or why it has none."""
    if record is None:
        return "-"
    if record["status"] != "ok":
        return {"unavailable": "n/a", "skipped": "skip", "error": "ERROR"}.get(record["status"], record["status"])
    ms = clock_ms(record, clock)
    if ms is None:
        why = str(record.get(f"{clock}_timing") or "")
        for short in ("n/a (cpu)", "not capturable", "capture failed", "not measured"):
            if why.startswith(short):
                return short
        return "-"
    decode = record["case_spec"]["q_len"] <= DECODE_MAX_Q
    metric = f"{_num(record['bytes'] / (ms * 1e6))}G" if decode else f"{_num(record['flops'] / (ms * 1e9))}T"
    ratio = f" {ms / base_ms:.2f}x" if base_ms else ""
    flag = "!" if record["err_flag"] else ""
    return f"{_num(ms, 4)}ms {metric}{ratio}{flag}"


def _num(x: float, digits: int = 3) -> str:
    """``digits`` significant digits without exponent for the usual range (227, 0.606, 0.00158)."""
    return f"{x:.{digits}g}" if 1e-4 <= abs(x) < 10**digits else f"{x:.0f}" if abs(x) >= 10**digits else f"{x:.2g}"


# ---------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------


def latest_run(records: Sequence[dict]) -> list[dict]:
    """Records of the last run in the file: same (git_sha, timestamp) as the last record."""
    if not records:
        return []
    key = (records[-1].get("git_sha"), records[-1].get("timestamp"))
    return [r for r in records if (r.get("git_sha"), r.get("timestamp")) == key]


def plot_records(jsonl: Path, png: Path) -> int:
    """Bars of median time per case (and page size) for each peer, log scale, from the latest run: one panel per clock."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"matplotlib is not importable ({exc}); no plot written. Install it (pip install matplotlib) and rerun.")
        return 1
    try:
        records = [json.loads(line) for line in Path(jsonl).read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        print(f"--plot {jsonl}: cannot read JSON lines: {exc}")
        return 1
    run = [r for r in latest_run(records) if r.get("status") == "ok" and r.get("case") != HOST_CASE]
    clocks = [c for c in CLOCKS if any(clock_ms(r, c) for r in run)]
    if not clocks:
        print(f"--plot {jsonl}: the latest run has no timed records")
        return 1
    groups = list(dict.fromkeys((r["case"], r["page_size"]) for r in run))
    peers = list(dict.fromkeys(r["peer"] for r in run))
    width = 0.8 / len(peers)
    fig, axes = plt.subplots(len(clocks), 1, figsize=(max(8, 1.1 * len(groups)), 4.5 * len(clocks)), squeeze=False)
    for ax, clock in zip(axes[:, 0], clocks, strict=True):
        ms = {(r["case"], r["page_size"], r["peer"]): clock_ms(r, clock) for r in run if clock_ms(r, clock)}
        for k, peer in enumerate(peers):
            xs = [i + (k - (len(peers) - 1) / 2) * width for i, g in enumerate(groups) if (*g, peer) in ms]
            ys = [ms[(*g, peer)] for g in groups if (*g, peer) in ms]
            ax.bar(xs, ys, width=width, label=peer)
        ax.set_yscale("log")
        ax.set_ylabel(f"{clock}: median ms (log)")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{c}\npage {p}" for c, p in groups], rotation=45, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    first = run[0]
    axes[0, 0].set_title(
        f"rel_attn vs peers on {first.get('gpu')} ({first.get('timestamp')}, {str(first.get('git_sha'))[:10]}); "
        "eager = do_bench (launches included), graph = CUDA-graph replay",
        fontsize=9,
    )
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    print(f"wrote {png} ({len(groups)} case/page groups, {len(peers)} peers, clocks {', '.join(clocks)})")
    return 0


# ---------------------------------------------------------------------------------------------
# flash-attn-4 compile check on CPU (fake tensors)
# ---------------------------------------------------------------------------------------------


def check_fa4_compile(cases: Sequence[BenchCase], page_sizes: Sequence[int], log: Log) -> int:
    """Compile our flash-attn-4 calls for SM90 on this (possibly GPU-less) machine with fake tensors.

    Needs flash_attn.cute and nvidia-cutlass-dsl importable. Catches signature and score_mod
    errors before a GPU visit; says nothing about numerics. The DSL reads ``CUTE_DSL_ARCH`` when
    cutlass is imported, so this must run before anything imports it.
    """
    for var, value in FA4_FAKE_COMPILE_ENV.items():
        os.environ.setdefault(var, value)
    try:
        varlen_fn = import_fa4()
    except Unavailable as exc:
        log.info(f"fa4 compile check: {exc}")
        return 1
    from torch._subclasses.fake_tensor import FakeTensorMode

    failures = 0
    for case in cases:
        for page in page_sizes:
            for biased in (True, False):
                label = f"{case.name} page {page} {'fa4_scoremod' if biased else 'fa4_nobias'}"
                start = time.perf_counter()
                try:
                    with FakeTensorMode():
                        _fa4_fake_call(varlen_fn, case, page, biased)
                    log.info(f"  compiled  {label} ({time.perf_counter() - start:.1f} s)")
                except Exception as exc:
                    failures += 1
                    log.info(f"  FAILED    {label}: {first_line(exc)}")
                    log.detail(traceback.format_exc())
    return 1 if failures else 0


#: Environment for compiling flash-attn-4's SM90 kernels on a machine without a GPU (H200: 132 SMs).
FA4_FAKE_COMPILE_ENV = {"FLASH_ATTENTION_ARCH": "sm_90a", "CUTE_DSL_ARCH": "sm_90a", "FLASH_ATTENTION_NUM_SMS": "132"}


def _fa4_fake_call(varlen_fn: Callable, case: BenchCase, page: int, biased: bool) -> None:
    """One :func:`call_fa4` on fake CUDA tensors shaped like ``case`` (inside a FakeTensorMode)."""
    dev, bf16 = "cuda", torch.bfloat16
    pages = -(-case.kv_len // page)
    blocks = case.total_reqs * pages + SPARE_BLOCKS
    call_fa4(
        varlen_fn, case,
        torch.empty(case.num_tokens, case.hq, case.d, dtype=bf16, device=dev),
        torch.empty(blocks, page, case.hkv, case.d, dtype=bf16, device=dev),
        torch.empty(blocks, page, case.hkv, case.d, dtype=bf16, device=dev),
        torch.empty(case.total_reqs + 1, dtype=torch.int32, device=dev),
        torch.empty(case.total_reqs, dtype=torch.int32, device=dev),
        torch.empty(case.total_reqs, pages, dtype=torch.int32, device=dev),
        torch.empty(case.num_tokens, case.hq, case.rel_extent, dtype=bf16, device=dev) if biased else None,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise SystemExit(f"{what} is {text!r}; expected comma-separated integers like 16,128") from exc
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"{what} is {text!r}; expected positive integers")
    return values


def parse_clocks(text: str) -> tuple[str, ...]:
    clocks = tuple(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))
    if not clocks or any(c not in CLOCKS for c in clocks):
        raise SystemExit(f"--clocks is {text!r}; expected a comma-separated subset of {','.join(CLOCKS)}")
    return clocks


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", metavar="PATH", help="JSON case file (default: ../shared/bench_cases.json if present, else the embedded 7 cases)")
    p.add_argument("--cases-filter", metavar="SUBSTR[,SUBSTR]", help="run only cases whose name contains one of these substrings")
    p.add_argument("--page-sizes", default="16,128", help="comma-separated page sizes (default 16,128)")
    p.add_argument("--peers", default=",".join(ALL_PEERS), help=f"comma-separated subset of {','.join(ALL_PEERS)}")
    p.add_argument("--backends", default="default", help="backends of ours to time, e.g. triton,reference ('default': the dispatcher's choice)")
    p.add_argument("--reference-max-pairs", type=int, default=DEFAULT_REFERENCE_MAX_PAIRS, help="skip the reference backend on cases with more visible pairs (default 2^26)")
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES), help="input dtype (default bfloat16, as in anchors.md; float16 for CPU runs of the Triton backend under TRITON_INTERPRET=1, whose bf16 tl.dot is wrong in triton 3.9)")
    p.add_argument("--tol", type=float, default=DEFAULT_TOL, help="relative L2 error above which a result is flagged (default 2e-2)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (do_bench warmup 5 ms, rep 25 ms; 20 graph replays)")
    p.add_argument("--warmup-ms", type=int, default=None, help="do_bench warmup (default 25, --quick 5)")
    p.add_argument("--rep-ms", type=int, default=None, help="do_bench rep (default 100, --quick 25)")
    p.add_argument("--clocks", default=",".join(CLOCKS), help="comma-separated clocks to measure for every case and peer: eager (do_bench, launches included), graph (CUDA-graph replay); default both")
    p.add_argument("--clock-rounds", type=_positive_int, default=1, help="measure the clocks in N rounds of alternating order (eager then graph, then graph then eager, ...) and record each clock's median over its rounds (default 1: eager, then graph); long cases run under the GPU's power cap, which moves back-to-back loops by up to 13%%")
    p.add_argument("--l2-flush", default="zero", choices=L2_FLUSHES, help="how CUDA-graph replays flush the L2: zero (default; a 256 MB zero_, as do_bench, leaving dirty lines) or read (a read of it, leaving clean lines)")
    p.add_argument("--flex-mode", default="auto", choices=("auto", "compile", "eager"), help="FlexAttention compiled or eager (auto: compiled on CUDA)")
    p.add_argument("--no-host-overhead", action="store_true", help="skip the eager host-overhead measurement")
    p.add_argument("--smoke", action="store_true", help="tiny versions of the cases, few repetitions (for CPU checks); writes records only with --out/--records")
    p.add_argument("--dry-run", action="store_true", help="print the plan (cases, accounting, peer availability) and exit")
    p.add_argument("--out", metavar="DIR", help="also write bench_records.jsonl and bench.log to DIR")
    p.add_argument("--records", metavar="PATH", help=f"JSON-lines file to append to (default {DEFAULT_RECORDS.relative_to(REPO_ROOT)}; 'none' to skip)")
    p.add_argument("--log", metavar="PATH", help=f"full log file (default {DEFAULT_LOG.relative_to(REPO_ROOT)}; 'none' to skip)")
    p.add_argument("--git-sha", help="record this SHA (default: $INKLING_GIT_SHA, else git rev-parse HEAD)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--plot", metavar="JSONL", help="draw the latest run of this records file and exit (needs --png)")
    p.add_argument("--png", metavar="PATH", default=None, help="where --plot writes its image")
    p.add_argument("--check-fa4-compile", action="store_true", help="compile our flash-attn-4 calls for SM90 with fake tensors (works without a GPU) and exit")
    return p


def resolve_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available here (use --device cpu --smoke on a CPU machine)")
    if device.type not in ("cuda", "cpu"):
        raise SystemExit(f"--device is {name!r}; expected cuda or cpu")
    return device


def output_paths(args: argparse.Namespace) -> tuple[list[Path], list[Path]]:
    """(records files, log files) this run writes."""

    def chosen(value: str | None, default: Path) -> list[Path]:
        if value is not None:
            return [] if value.lower() == "none" else [Path(value)]
        return [] if args.smoke else [default]  # smoke runs leave meta/ alone unless asked

    records, logs = chosen(args.records, DEFAULT_RECORDS), chosen(args.log, DEFAULT_LOG)
    if args.out:
        out = Path(args.out)
        records.append(out / "bench_records.jsonl")
        logs.append(out / "bench.log")
    return records, logs


def timing_config(args: argparse.Namespace) -> TimingConfig:
    quick = args.quick or args.smoke
    return TimingConfig(
        warmup_ms=args.warmup_ms if args.warmup_ms is not None else (5 if quick else 25),
        rep_ms=args.rep_ms if args.rep_ms is not None else (25 if quick else 100),
        graph_reps=20 if quick else 100,
        cpu_reps=2 if args.smoke else 5,
        host_calls=100 if quick else 500,
        l2_flush=args.l2_flush,
        clocks=parse_clocks(args.clocks),
        clock_rounds=args.clock_rounds,
    )


def print_plan(cases: Sequence[BenchCase], page_sizes: Sequence[int], peers: Sequence[Peer], device: torch.device, log: Log) -> None:
    """Accounting and peer availability per case, without building tensors."""
    for case in cases:
        log.info(
            f"{case.name}: {case.describe()}, heads {case.hq}/{case.hkv}, d {case.d}, "
            f"E {case.rel_extent}, window {case.window_left}; pairs {visible_pairs(case):,}, "
            f"{flop_count(case) / 1e9:.2f} GFLOP, {byte_count(case) / 1e6:.2f} MB; pages {list(page_sizes)}"
        )
        for peer in peers:
            skip = peer.skipped(case)
            reason = f"skipped: {skip}" if skip else peer.unavailable(case, device)
            log.info(f"    {peer.name:<18} {'runs' if reason is None else reason}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.plot:
        if not args.png:
            raise SystemExit("--plot needs --png PATH")
        return plot_records(Path(args.plot), Path(args.png))

    cases, source = load_cases(args.cases)
    cases = filter_cases(cases, args.cases_filter)
    if not cases:
        raise SystemExit(f"--cases-filter {args.cases_filter!r} matches no case")
    if args.smoke:
        cases = [smoke_case(c) for c in cases]
    page_sizes = parse_int_list(args.page_sizes, "--page-sizes")
    backends = [None if b in ("default", "") else b for b in args.backends.split(",")]
    peers = make_peers([p.strip() for p in args.peers.split(",") if p.strip()], backends, args.reference_max_pairs, args.flex_mode)

    if args.check_fa4_compile:
        log = Log([])
        return check_fa4_compile(cases, page_sizes, log)

    device = resolve_device(args.device)
    record_paths, log_paths = output_paths(args)
    log = Log([] if args.dry_run else log_paths)
    cmd_argv = [*COMMAND.split(), *(sys.argv[1:] if argv is None else argv)]
    dtype = DTYPES[args.dtype]
    env = environment(device, args.git_sha, cmd_argv)
    env.update(cases_source=source, dtype=args.dtype, smoke=args.smoke)
    log.info(f"rel_attn benchmark on {env['gpu']} ({env['device']}), torch {torch.__version__}, git {env['git_sha']}, cases from {source}")
    log.detail(json.dumps(env, indent=1))
    if args.dry_run:
        print_plan(cases, page_sizes, peers, device, log)
        return 0

    cfg = timing_config(args)
    sink = RecordSink(record_paths)
    started = time.perf_counter()
    previous_handler = signal.signal(signal.SIGTERM, _terminate)  # a killed run still prints its table
    try:
        with torch.no_grad(), _progress(len(cases) * len(page_sizes), args.no_progress, log) as step:
            for case in cases:
                log.info(f"{case.name}: {case.describe()}, heads {case.hq}/{case.hkv}, E {case.rel_extent}, window {case.window_left}")
                run_case(case, page_sizes, peers, device, dtype, args.seed, env, cfg, args.tol, log, sink, on_step=step)
            if not args.no_host_overhead:
                log.info("eager host overhead:")
                measure_host_overhead(peers, device, dtype, env, cfg, args.seed, log, sink)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        table = format_table(sink.records)
        log.detail(f"total wall time {time.perf_counter() - started:.1f} s; records appended to {[str(p) for p in record_paths]}")
        log.detail(table)
        log.close()
        print(f"\n(total {time.perf_counter() - started:.0f} s; records: {', '.join(map(str, record_paths)) or 'not written'}; log: {', '.join(map(str, log_paths)) or 'not written'})")
        print(table, flush=True)
    return 0


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _progress(total: int, disabled: bool, log: Log):
    """Progress over (case, page size) steps; yields the callback to call after each step.

    A tqdm bar when tqdm is importable and stderr is a terminal; otherwise (e.g. output captured
    to a file on the GPU machine) one ``[done/total]`` line per step, which reads better in a log.
    """
    bar = None
    if not disabled and sys.stderr.isatty():
        try:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="cases x page sizes", unit="step", file=sys.stderr, dynamic_ncols=True)
        except ImportError:
            bar = None
    done = 0

    def step(label: str) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(1)
        elif not disabled:
            log.info(f"[{done}/{total}] done: {label}")

    log.bar = bar
    try:
        yield step
    finally:
        log.bar = None
        if bar is not None:
            bar.close()


if __name__ == "__main__":
    sys.exit(main())
