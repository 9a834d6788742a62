"""Warmup: run one call of every compile key of a serving configuration before serving.

:func:`warmup` walks the same ``(max_seqlen_q bucket, request-count bucket)`` pairs that
:func:`inkling_ops.serving.enumerate_compile_keys` walks, builds one small call for each pair
whose key it has not run yet, and runs it on the device, so that the kernels of every key are
compiled (and land in the backend's on-disk cache) before the first request.

The calls are small: every request's KV length equals its new tokens, the block table has the
configuration's width, and all requests read the same few pages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from . import dispatch
from .compile_keys import CompileKey, compile_key, split_count
from .problem import RelAttnArgs
from .serving import ServingConfig, problem_for, representative_calls


@dataclass(frozen=True)
class WarmupSummary:
    """What one :func:`warmup` did."""

    backend: str
    keys: tuple[CompileKey, ...]
    seconds: float

    def __str__(self) -> str:
        return f"warmup: {len(self.keys)} compile keys on backend {self.backend!r} in {self.seconds:.1f} s"


def representative_args(
    config: ServingConfig, *, max_seqlen_q: int, num_reqs: int, device: torch.device
) -> tuple[RelAttnArgs, torch.Tensor]:
    """One valid call of ``config`` with ``num_reqs`` requests and the given ``max_seqlen_q``.

    Request 0 has ``max_seqlen_q`` new tokens, every other request one; KV lengths equal the new
    tokens. Returns the argument bundle and an ``out`` buffer. Values are random (never zeros).
    """
    if max_seqlen_q < 1 or num_reqs < 1:
        raise ValueError(f"warmup: max_seqlen_q is {max_seqlen_q} and num_reqs {num_reqs}; expected both >= 1")
    q_lens = [max_seqlen_q] + [1] * (num_reqs - 1)
    num_tokens = sum(q_lens)
    dtype, kv_dtype = config.dtype, config.kv_dtype or config.dtype
    pages = -(-max_seqlen_q // config.page_size)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape, dt):
        return torch.randn(*shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dt)

    key_cache = randn(pages, config.page_size, config.num_kv_heads, config.head_dim, dt=kv_dtype)
    value_cache = randn(pages, config.page_size, config.num_kv_heads, config.head_dim, dt=kv_dtype)
    block_table = torch.zeros(num_reqs, config.max_blocks_per_seq, dtype=torch.int32)
    block_table[:, :pages] = torch.arange(pages, dtype=torch.int32)
    cu = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    args = RelAttnArgs(
        q=randn(num_tokens, config.num_heads, config.head_dim, dt=dtype),
        key_cache=key_cache,
        value_cache=value_cache,
        block_table=block_table.to(device),
        cache_seqlens=torch.tensor(q_lens, dtype=torch.int32, device=device),
        cu_seqlens_q=cu.to(device),
        rel_logits=randn(num_tokens, config.num_heads, config.rel_extent, dt=dtype),
    )
    return args, torch.empty_like(args.q)


def warmup(
    config: ServingConfig,
    *,
    device: torch.device | str | None = None,
    backend: str | None = None,
    progress: bool = True,
) -> WarmupSummary:
    """Run one call per compile key of ``config`` on ``device`` (default: the current CUDA device).

    ``backend``: the backend the serving calls will use (None: the dispatcher's default choice).
    Shows a progress bar (tqdm, when installed) unless ``progress`` is False. Returns what it did.

    Equivalent PyTorch: for every key of ``enumerate_compile_keys(config, ...)``, one
    ``inkling_ops.rel_attn(...)`` call whose problem has that key.
    """
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    facts = dispatch.device_facts(device)
    todo: dict[CompileKey, tuple[int, int]] = {}
    chosen = None
    max_q = min(config.max_num_batched_tokens, config.max_model_len)
    for q_bucket, reqs in representative_calls(config):
        max_seqlen_q = min(q_bucket, max_q)
        problem = problem_for(config, num_tokens=max_seqlen_q + reqs - 1, num_reqs=reqs, max_seqlen_q=max_seqlen_q)
        problem = problem._replace(device_type=device.type)
        chosen = dispatch.select_backend(problem, facts, backend)
        splits = 1 if chosen.split_policy is None else split_count(problem, facts, chosen.split_policy)
        key = compile_key(problem, arch=facts.arch, backend=chosen.name, splits=splits)
        todo.setdefault(key, (max_seqlen_q, reqs))

    items = sorted(todo.items())
    bar = _progress(len(items), enabled=progress)
    start = time.perf_counter()
    with torch.inference_mode():
        for key, (max_seqlen_q, reqs) in items:
            bar.set_description(f"q<={key.max_seqlen_q_bucket} reqs={reqs} splits={key.num_splits}")
            args, out = representative_args(config, max_seqlen_q=max_seqlen_q, num_reqs=reqs, device=device)
            torch.ops.inkling.rel_attn_out(
                *args, max_seqlen_q=max_seqlen_q, softmax_scale=1.0 / config.head_dim,
                window_size=[config.window_left, 0] if config.window_left >= 0 else [-1, -1],
                backend=key.backend, out=out,
            )  # fmt: skip
            bar.update(1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    bar.close()
    name = chosen.name if chosen is not None else (backend or "none")
    return WarmupSummary(backend=name, keys=tuple(key for key, _ in items), seconds=time.perf_counter() - start)


class _PlainProgress:
    """A stand-in for tqdm when it is not installed: prints nothing until ``close``."""

    def __init__(self, total: int):
        self.total, self.n = total, 0

    def set_description(self, text: str) -> None:
        pass

    def update(self, n: int) -> None:
        self.n += n

    def close(self) -> None:
        pass


def _progress(total: int, *, enabled: bool):
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, unit="key")
        except ImportError:
            pass
    return _PlainProgress(total)
