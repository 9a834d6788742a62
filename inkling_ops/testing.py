"""Building random rel_attn calls: paged KV caches with shuffled pages, ragged batches.

Used by the tests, the demo and the benchmark, so all three exercise the same layouts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch


@dataclass
class RelAttnCase:
    """The tensors and scalars of one call; ``kwargs()`` feeds :func:`inkling_ops.rel_attn`."""

    q: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_table: torch.Tensor
    cache_seqlens: torch.Tensor
    cu_seqlens_q: torch.Tensor
    rel_logits: torch.Tensor
    max_seqlen_q: int
    softmax_scale: float
    window_size: tuple[int, int]
    q_lens: list[int] = field(default_factory=list)
    kv_lens: list[int] = field(default_factory=list)
    packed_kv: bool = False
    strided_index: bool = False

    def kwargs(self) -> dict:
        return dict(
            block_table=self.block_table,
            cache_seqlens=self.cache_seqlens,
            cu_seqlens_q=self.cu_seqlens_q,
            rel_logits=self.rel_logits,
            max_seqlen_q=self.max_seqlen_q,
            softmax_scale=self.softmax_scale,
            window_size=self.window_size,
        )

    def args(self) -> tuple:
        return (self.q, self.key_cache, self.value_cache)

    def problem(self, num_splits: int = 0):
        """The call's static facts (``RelAttnProblem``) as the op's validation builds them: what
        a backend's ``why_not`` and the dispatcher's ``plan`` take."""
        from .validation import check_call

        return check_call(
            self.q, self.key_cache, self.value_cache, self.block_table, self.cache_seqlens, self.cu_seqlens_q,
            self.rel_logits, self.max_seqlen_q, self.softmax_scale, self.window_size, True, num_splits, None,
        )  # fmt: skip

    def run_triton(self, out: torch.Tensor, *, num_splits: int, config):
        """The Triton kernels on this case with an explicit split count and launch configuration
        (``FwdConfig``), bypassing the dispatcher: for the tuner, the profiler and kernel tests.

        Equivalent PyTorch: ``inkling_ops.rel_attn(*self.args(), **self.kwargs(), out=out)``.
        """
        from .backends.triton_backend import run_triton
        from .problem import RelAttnArgs

        args = RelAttnArgs(
            self.q, self.key_cache, self.value_cache, self.block_table, self.cache_seqlens, self.cu_seqlens_q,
            self.rel_logits,
        )
        return run_triton(
            args, out, softmax_scale=self.softmax_scale, window_left=self.window_size[0],
            max_seqlen_q=self.max_seqlen_q, num_splits=num_splits, config=config,
        )  # fmt: skip

    def reference_fp32(self) -> torch.Tensor:
        """The reference backend's output on fp32 copies of the inputs (on the case's device): the
        expectation low-precision backends are compared with.

        Equivalent PyTorch: ``inkling_ops.rel_attn_reference`` of ``self`` in float32.
        """
        from .reference import rel_attn_reference

        out = torch.zeros(self.q.shape, dtype=torch.float32, device=self.q.device)
        rel_attn_reference(
            self.q.float(), self.key_cache.float(), self.value_cache.float(), self.block_table, self.cache_seqlens,
            self.cu_seqlens_q, self.rel_logits.float(), out, softmax_scale=self.softmax_scale,
            window_left=self.window_size[0],
        )  # fmt: skip
        return out

    def triton_config(self):
        """The Triton backend's default launch configuration (``FwdConfig``) for this case, as
        the dispatcher picks it from the case's compile-key quantities."""
        from .heuristics import bucket_max_seqlen_q
        from .kernels.triton_configs import fwd_config

        return fwd_config(
            head_dim=self.q.shape[2], q_per_kv=self.q.shape[1] // self.key_cache.shape[2],
            max_seqlen_q_bucket=bucket_max_seqlen_q(self.max_seqlen_q), window_left=self.window_size[0],
            rel_extent=self.rel_logits.shape[-1], page_size=self.key_cache.shape[1],
        )  # fmt: skip

    def to(self, device: str | torch.device) -> RelAttnCase:
        """The same case on ``device`` (packed K/V stay views of one packed tensor, strided index
        tensors views of their wider ones)."""
        if self.packed_kv:
            packed = self.key_cache._base.to(device)
            key_cache, value_cache = packed[:, 0], packed[:, 1]
        else:
            key_cache, value_cache = self.key_cache.to(device), self.value_cache.to(device)
        index = {name: getattr(self, name) for name in ("block_table", "cache_seqlens", "cu_seqlens_q")}
        index = {name: _every_other(t._base.to(device)) if self.strided_index else t.to(device) for name, t in index.items()}
        return dataclasses.replace(
            self, q=self.q.to(device), key_cache=key_cache, value_cache=value_cache, rel_logits=self.rel_logits.to(device),
            **index,
        )  # fmt: skip


def _every_other(wide: torch.Tensor) -> torch.Tensor:
    """Columns 0, 2, 4, ... of ``wide``: a view with stride 2 along its last dimension."""
    return wide[..., ::2]


def _interleaved(t: torch.Tensor, garbage: int) -> torch.Tensor:
    """``t`` as every other column of a tensor twice as wide whose other columns hold ``garbage``."""
    wide = torch.full((*t.shape[:-1], 2 * t.shape[-1]), garbage, dtype=t.dtype)
    view = _every_other(wide)
    view.copy_(t)
    return view


def make_case(
    q_lens: list[int],
    kv_lens: list[int],
    *,
    num_heads: int = 4,
    num_kv_heads: int = 1,
    head_dim: int = 32,
    rel_extent: int = 16,
    page_size: int = 16,
    window_left: int = -1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    packed_kv: bool = False,
    spare_blocks: int = 3,
    extra_tokens: int = 0,
    extra_table_cols: int = 1,
    softmax_scale: float | None = None,
    generator: torch.Generator | None = None,
    strided_index: bool = False,
) -> RelAttnCase:
    """A random call with one request per (q_len, kv_len) pair.

    Pages of every request are a random permutation of the cache's blocks. ``packed_kv`` makes
    key_cache and value_cache strided views of one (num_blocks, 2, page, Hkv, D) tensor, as vLLM
    stores them. ``extra_tokens`` adds rows to q past the last request; ``spare_blocks`` adds
    blocks no request uses; ``extra_table_cols`` widens the block table past what is needed.
    Unused blocks and table entries are filled with garbage (NaN in K/V, huge ids in the table)
    so that a kernel that reads them shows it. ``strided_index`` makes block_table, cache_seqlens
    and cu_seqlens_q every other column of tensors twice as wide, with garbage in the columns
    between (views a serving engine may pass, e.g. one column of a metadata tensor).
    """
    if len(q_lens) != len(kv_lens):
        raise ValueError(f"q_lens ({len(q_lens)}) and kv_lens ({len(kv_lens)}) must have one entry per request")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    pages_per_req = [-(-kv // page_size) for kv in kv_lens]
    num_blocks = sum(pages_per_req) + spare_blocks
    num_blocks = max(num_blocks, 1)
    width = max(pages_per_req + [0]) + extra_table_cols
    num_tokens = sum(q_lens) + extra_tokens

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)

    if packed_kv:
        kv = randn(num_blocks, 2, page_size, num_kv_heads, head_dim)
        key_cache, value_cache = kv[:, 0], kv[:, 1]
    else:
        key_cache = randn(num_blocks, page_size, num_kv_heads, head_dim)
        value_cache = randn(num_blocks, page_size, num_kv_heads, head_dim)
    perm = torch.randperm(num_blocks, generator=g)
    block_table = torch.full((len(q_lens), max(width, 1)), 1 << 30, dtype=torch.int32)
    used = torch.zeros(num_blocks, dtype=torch.bool)
    at = 0
    for b, n in enumerate(pages_per_req):
        block_table[b, :n] = perm[at : at + n].to(torch.int32)
        used[perm[at : at + n]] = True
        at += n
    # Garbage where nobody should read: unused blocks, and slots past each request's length.
    key_cache[~used] = float("nan")
    value_cache[~used] = float("nan")
    for b, kv in enumerate(kv_lens):
        n = pages_per_req[b]
        if n and kv % page_size:
            last = int(block_table[b, n - 1])
            key_cache[last, kv % page_size :] = float("nan")
            value_cache[last, kv % page_size :] = float("inf")

    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    case = RelAttnCase(
        q=randn(num_tokens, num_heads, head_dim),
        key_cache=key_cache,
        value_cache=value_cache,
        block_table=block_table,
        cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        rel_logits=randn(num_tokens, num_heads, rel_extent),
        max_seqlen_q=max(q_lens + [1]),
        softmax_scale=softmax_scale if softmax_scale is not None else 1.0 / head_dim,
        window_size=(window_left, 0) if window_left >= 0 else (-1, -1),
        q_lens=list(q_lens),
        kv_lens=list(kv_lens),
        packed_kv=packed_kv,
    )
    if strided_index:
        case = dataclasses.replace(
            case, strided_index=True, block_table=_interleaved(case.block_table, 1 << 30),
            cache_seqlens=_interleaved(case.cache_seqlens, 1 << 30), cu_seqlens_q=_interleaved(case.cu_seqlens_q, -(1 << 30)),
        )  # fmt: skip
    return case.to(device) if str(device) != "cpu" else case
