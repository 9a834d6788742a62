"""Warmup: compile every compile key of a serving configuration before serving.

:func:`warmup` enumerates the keys of a configuration for a target device
(:func:`inkling_ops.serving.enumerate_compile_keys`) and has the key's backend compile each one
from the key alone (``Backend.compile``): no tensors, no kernel launch, and for the Triton and
CuTe backends no GPU either, so a build machine can fill the persistent kernel store (:mod:`inkling_ops.kernel_cache`)
for the GPU that will serve, given its :class:`~inkling_ops.compile_keys.DeviceFacts`. The
serving process computes the same keys and finds every kernel in the store (same versions, same
arch: the store's fingerprint).

A backend that cannot compile without tensors (its ``compile`` raises NotImplementedError) is
warmed by running one small call per key on the device instead (:func:`representative_args`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from . import dispatch, strict
from .compile_keys import CompileKey, DeviceFacts
from .problem import RelAttnArgs
from .serving import ServingConfig, enumerate_compile_keys, problem_for


@dataclass(frozen=True)
class WarmupSummary:
    """What one :func:`warmup` did: the keys, and how their kernels were obtained (``compiled``
    now, ``loaded`` from the persistent store, or ``shared`` with a key warmed before: prefill
    buckets of one layer share kernels)."""

    backend: str
    arch: str
    keys: tuple[CompileKey, ...]
    seconds: float
    compiled: int = 0
    loaded: int = 0
    shared: int = 0
    launched: int = 0  # keys warmed by running a call (backends that cannot compile from a key)

    def __str__(self) -> str:
        kernels = f"{self.compiled} kernels compiled, {self.loaded} loaded from the cache"
        if self.launched:
            kernels += f", {self.launched} keys warmed by a call"
        return (
            f"warmup: {len(self.keys)} compile keys on backend {self.backend!r} for {self.arch}: "
            f"{kernels} in {self.seconds:.1f} s"
        )


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
    facts: DeviceFacts | None = None,
    backend: str | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> WarmupSummary:
    """Compile every compile key of ``config`` for a device with ``facts`` into the kernel store.

    ``facts``: the target device (``DeviceFacts(arch="sm_90a", num_sms=132)`` on a machine without
    it); None: those of ``device`` (default: the current CUDA device, else the CPU).
    ``backend``: the backend the serving calls will use (None: the dispatcher's default choice for
    each call on the target, which may be more than one backend; the summary's ``backend`` then
    joins their names with ``+``). ``device`` is used only by a backend that must run calls to
    warm (see the module docstring). Shows a progress bar (tqdm, when installed) unless ``progress`` is False. Records
    the keys with ``strict.note_warmed`` and in the backends' stores (``Backend.record_warmed``),
    whose keys name a missing key's field in strict mode's error in a later process. Returns what
    it did.

    Equivalent PyTorch: for every key of ``enumerate_compile_keys(config, facts=facts, ...)``,
    ``backend.compile(key)``.
    """
    if facts is None:
        device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        facts = dispatch.device_facts(device)
    target = "cuda" if facts.arch.startswith("sm_") else "cpu"
    max_q = min(config.max_num_batched_tokens, config.max_model_len)
    if backend is not None:  # it must run this configuration's calls (else the error says why)
        probe = problem_for(config, num_tokens=1, num_reqs=1, max_seqlen_q=1)._replace(device_type=target)
        backend = dispatch.select_backend(probe, facts, backend)[0].name
    # None: per call, the backend the dispatcher picks on the target
    keys = sorted(enumerate_compile_keys(config, facts=facts, backend=backend))
    backends = {name: dispatch.get_backend(name) for name in sorted({key.backend for key in keys})}

    before = {name: dict(getattr(b, "compile_stats", {})) for name, b in backends.items()}
    launched = 0
    bar = _progress(len(keys), enabled=progress)
    start = time.perf_counter()
    for key in keys:
        bar.set_description(f"{key.backend} q<={key.max_seqlen_q_bucket} splits={key.num_splits}")
        try:
            backends[key.backend].compile(key)
        except NotImplementedError:
            _warm_by_a_call(config, key, max_q=max_q, device=device)
            launched += 1
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - start
    counts = dict(compiled=0, loaded=0, memory=0)
    for name, b in backends.items():
        own = [key for key in keys if key.backend == name]
        strict.note_warmed(name, own)
        b.record_warmed(own)  # for later processes' strict messages
        after = getattr(b, "compile_stats", {})
        for field in counts:
            counts[field] += after.get(field, 0) - before[name].get(field, 0)
    return WarmupSummary(
        backend="+".join(backends) or (backend or ""), arch=facts.arch, keys=tuple(keys), seconds=seconds,
        compiled=counts["compiled"], loaded=counts["loaded"], shared=counts["memory"], launched=launched,
    )  # fmt: skip


def _warm_by_a_call(config: ServingConfig, key: CompileKey, *, max_q: int, device) -> None:
    """One call with ``key``'s bucket on ``device``, for a backend that compiles only when it runs
    (two requests for a key of the compact grid, which a backend chooses for two or more)."""
    device = torch.device(device if device is not None else "cuda")
    max_seqlen_q = min(key.max_seqlen_q_bucket, max_q)
    num_reqs = 2 if key.compact_grid else 1
    args, out = representative_args(config, max_seqlen_q=max_seqlen_q, num_reqs=num_reqs, device=device)
    with torch.inference_mode():
        torch.ops.inkling.rel_attn_out(
            *args, max_seqlen_q=max_seqlen_q, softmax_scale=1.0 / config.head_dim,
            window_size=[config.window_left, 0] if config.window_left >= 0 else [-1, -1],
            num_splits=key.num_splits, backend=key.backend, out=out,
        )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
