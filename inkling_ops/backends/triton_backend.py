"""The Triton backend: paged prefill/extend and split-KV decode (inkling_ops/kernels/triton_*.py).

The CUDA default. On CPU tensors it runs only under Triton's interpreter (``TRITON_INTERPRET=1``),
which the tests use; it is never the CPU default. Split-KV workspace is allocated through torch,
so under CUDA-graph capture it comes from the graph's memory pool; nothing syncs with the host.
"""

from __future__ import annotations

import os

import torch

from ..compile_keys import DeviceFacts
from ..heuristics import SplitPolicy, bucket_max_seqlen_q
from ..problem import RelAttnArgs, RelAttnProblem
from .base import Backend

#: Split-KV policy of the Triton decode path, from the H200 sweeps (meta/TUNING.md): global decode
#: was near its best over a wide range of split counts and long single requests fastest at the
#: most splits tried, so two programs per SM and at least 256 keys per split, up to 256 splits.
#: Single-token decode on sliding layers whose window lies inside E runs one program per SM,
#: rounded down, and splits as short as 128 keys: with its configuration (``fwd_config``) that
#: was close to the fastest split count from 4 to 256 requests.
TRITON_SPLIT_POLICY = SplitPolicy(
    max_split_q=16, programs_per_sm=2, min_keys_per_split=256, max_splits=256,
    band_only_programs_per_sm=1, band_only_min_keys_per_split=128,
)  # fmt: skip
SUPPORTED_HEAD_DIMS = (32, 64, 128, 256)

_kernel_modules_cache: tuple = ()


def _kernel_modules():
    """(triton_configs, triton_fwd, triton_combine), imported on first use (so that importing
    inkling_ops needs no Triton) and then kept: an import statement per call costs host time."""
    global _kernel_modules_cache
    if not _kernel_modules_cache:
        from ..kernels import triton_combine, triton_configs, triton_fwd

        _kernel_modules_cache = (triton_configs, triton_fwd, triton_combine)
    return _kernel_modules_cache


class TritonBackend(Backend):
    name = "triton"
    device_types = ("cuda", "cpu")
    default_device_types = ("cuda",)
    split_policy = TRITON_SPLIT_POLICY

    def is_available(self) -> str | None:
        try:
            import triton  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the environment
            return f"triton is not importable ({exc}); pip install 'inkling_ops[triton]'"
        return None

    def why_not(self, problem: RelAttnProblem, facts: DeviceFacts) -> str | None:
        if problem.device_type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") != "1":
            return "on CPU tensors Triton runs only under its interpreter (TRITON_INTERPRET=1)"
        if problem.device_type == "cuda" and facts.capability < (8, 0):
            return f"needs compute capability 8.0 or newer, the device is {facts.arch}"
        if problem.head_dim not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {problem.head_dim} is not one of {SUPPORTED_HEAD_DIMS}"
        if problem.q_per_kv > 64:
            return f"{problem.q_per_kv} query heads per KV head; at most 64"
        return None

    def run(self, problem: RelAttnProblem, splits: int, args: RelAttnArgs, out: torch.Tensor) -> None:
        config = _kernel_modules()[0].fwd_config(
            head_dim=problem.head_dim,
            q_per_kv=problem.q_per_kv,
            max_seqlen_q_bucket=bucket_max_seqlen_q(problem.max_seqlen_q),
            window_left=problem.window_left,
            rel_extent=problem.rel_extent,
            page_size=problem.page_size,
        )
        run_triton(
            args, out,
            softmax_scale=problem.softmax_scale, window_left=problem.window_left,
            max_seqlen_q=problem.max_seqlen_q, num_splits=splits, config=config,
        )  # fmt: skip


def run_triton(
    args: RelAttnArgs,
    out: torch.Tensor,
    *legacy: torch.Tensor,
    softmax_scale: float,
    window_left: int,
    max_seqlen_q: int,
    num_splits: int,
    config,
    launch_fwd=None,
):
    """Forward kernel (and, with num_splits > 1, the combine) on the call's tensors ``args``,
    writing ``out``, with an explicit launch config.

    The backend's ``run`` uses the tuned config; the tuner (``meta/tools/tuning.py``) calls this
    with candidates. Arguments must already be validated. ``launch_fwd``: another copy of
    ``launch_rel_attn_fwd`` (same signature) to launch instead, through the same passes,
    workspace and combine (to time an older kernel module).

    ``legacy``: transitional, for callers that still pass the seven tensors and ``out`` one by one
    in ``RelAttnArgs`` order (``run_triton(q, key_cache, ..., rel_logits, out, ...)``, as
    ``inkling_ops.testing.RelAttnCase.run_triton`` does until it passes the bundle).
    """
    if legacy:
        if len(legacy) != 6:
            raise TypeError(
                f"run_triton takes (args, out) or the seven tensors and out; got {2 + len(legacy)} positional arguments"
            )
        args, out = RelAttnArgs(args, out, *legacy[:5]), legacy[5]
    _, fwd_module, combine_module = _kernel_modules()
    launch_rel_attn_fwd = launch_fwd or fwd_module.launch_rel_attn_fwd
    launch_rel_attn_combine = combine_module.launch_rel_attn_combine

    q, rel_logits = args.q, args.rel_logits
    num_tokens, num_heads, head_dim = q.shape
    if rel_logits.stride(2) != 1:
        # the kernel's bias gather assumes unit stride over d
        args = args._replace(rel_logits=rel_logits.contiguous())
    part_out = part_lse = None
    if num_splits > 1:
        # One workspace allocation: partial outputs (S, T, Hq, D) then log-sum-exps (S, T, Hq).
        shape = (num_splits, num_tokens, num_heads)
        rows = num_splits * num_tokens * num_heads
        workspace = torch.empty(rows * (head_dim + 1), dtype=torch.float32, device=q.device)
        part_out = workspace[: rows * head_dim].view(shape + (head_dim,))
        part_lse = workspace[rows * head_dim :].view(shape)
    common = dict(softmax_scale=softmax_scale, window_left=window_left, max_seqlen_q=max_seqlen_q)
    plain = config.plain
    if num_splits == 1 and plain is not None and (window_left < 0 or window_left >= rel_logits.shape[2]):
        # Two passes: plain tiles with their own (larger) tiles, then the band/edge/diagonal tiles.
        # Between them each row's partial output lives in ``out`` and its log-sum-exp here.
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=q.device)
        launch_rel_attn_fwd(args, out, **common, num_splits=1, config=plain, part_lse=lse, fwd_pass=1)
        return launch_rel_attn_fwd(
            args, out, **common, num_splits=1, config=config, part_lse=lse, fwd_pass=2, pass1_config=plain
        )
    compiled = launch_rel_attn_fwd(
        args, out, **common, num_splits=num_splits, config=config, part_out=part_out, part_lse=part_lse
    )
    if num_splits > 1:
        launch_rel_attn_combine(part_out, part_lse, out, args.cu_seqlens_q)
    return compiled
