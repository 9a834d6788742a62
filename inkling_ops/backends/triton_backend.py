"""The Triton backend: paged prefill/extend and split-KV decode (inkling_ops/kernels/triton_*.py).

The CUDA default. On CPU tensors it runs only under Triton's interpreter (``TRITON_INTERPRET=1``),
which the tests use; it is never the CPU default. Split-KV workspace is allocated through torch,
so under CUDA-graph capture it comes from the graph's memory pool; nothing syncs with the host.

Compiled kernels are keyed by the call's :class:`~inkling_ops.compile_keys.CompileKey` and nothing
else: :func:`kernel_plan` maps a key to its launch configuration and the specs of every kernel it
launches (the forward passes, the combine of a split key whose forward does not merge its splits),
:meth:`TritonBackend.compile` compiles
them without tensors (for the key's arch, on any machine), and :meth:`TritonBackend.run` finds a
call's kernels in memory, then in the persistent store (:mod:`inkling_ops.kernel_cache`), and
compiles only when both miss (after :func:`inkling_ops.strict.check_compile`).
"""

from __future__ import annotations

import operator
import os
from typing import NamedTuple

import torch

from .. import kernel_cache, strict
from ..compile_keys import CompileKey, DeviceFacts
from ..kernels.arch import cuda_arch
from ..heuristics import SplitPolicy
from ..problem import RelAttnArgs, RelAttnProblem
from ..workspace import arrival_counts, fp32_workspace
from .base import CUDA_GRID_YZ_MAX, Backend, index_tensors_packed, with_packed_index_tensors

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
#: Triton's interpreter (read once, as the kernel modules read it at import): no compiled kernels
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

_kernel_modules_cache: tuple = ()


def _kernel_modules():
    """(triton_configs, triton_fwd, triton_combine), imported on first use (so that importing
    inkling_ops needs no Triton) and then kept: an import statement per call costs host time."""
    global _kernel_modules_cache
    if not _kernel_modules_cache:
        from ..kernels import triton_combine, triton_configs, triton_fwd

        _kernel_modules_cache = (triton_configs, triton_fwd, triton_combine)
    return _kernel_modules_cache


class KernelPlan(NamedTuple):
    """What a compile key launches: the configuration, then one spec per launch in order (the
    forward passes, then the combine of a split key whose forward does not merge its splits)."""

    config: object  # triton_configs.FwdConfig
    specs: tuple  # triton_launch.KernelSpec, one per launch
    constexprs: tuple = ()  # the forward launches' FwdConstexprs, in order (the combine has none)


def kernel_plan(key: CompileKey) -> KernelPlan:
    """The launches of ``key`` (whose arch must be a CUDA one, e.g. ``"sm_90a"``), from the key alone.

    The same decisions as :func:`run_triton` on a call with that key: a two-pass prefill when the
    configuration has a plain pass, the key is unsplit and the layer has plain tiles; a split key
    adds the combine unless its forward merges the splits itself (``triton_configs.merges_splits``).
    """
    triton_configs, fwd_module, combine_module = _kernel_modules()
    from ..kernels.triton_launch import cuda_target

    arch = cuda_target(key.arch)
    config = triton_configs.fwd_config(
        head_dim=key.head_dim, q_per_kv=key.q_per_kv, max_seqlen_q_bucket=key.max_seqlen_q_bucket,
        window_left=key.window_left, rel_extent=key.rel_extent, page_size=key.page_size,
    )  # fmt: skip
    common = dict(
        group=key.q_per_kv, head_dim=key.head_dim, num_kv_heads=key.num_kv_heads, page_size=key.page_size,
        rel_extent=key.rel_extent, window_left=key.window_left, fp32=key.dtype == "float32",
        ptx_gather=key.dtype in ("bfloat16", "float16"), kv_same_strides=key.kv_same_strides,
        kv_row_i32=key.kv_row_i32,
        # fwd_constexprs takes the slot stride; the key keeps its log2 (0 has none: no shift)
        kv_slot_stride=1 << key.kv_slot_shift if key.kv_slot_shift >= 0 else 0,
    )  # fmt: skip
    spec_args = dict(dtype=key.dtype, kv_dtype=key.kv_dtype, aligned=key.aligned, arch=arch)
    plain = config.plain
    if key.num_splits == 1 and plain is not None and (key.window_left < 0 or key.window_left >= key.rel_extent):
        pass1 = triton_configs.fwd_constexprs(plain, **common, fwd_pass=1)
        pass2 = triton_configs.fwd_constexprs(config, **common, fwd_pass=2, pass1_config=plain)
        specs = (fwd_module.fwd_spec(pass1, plain, **spec_args), fwd_module.fwd_spec(pass2, config, **spec_args))
        return KernelPlan(config, specs, (pass1, pass2))
    constexprs = triton_configs.fwd_constexprs(config, **common, num_splits=key.num_splits)
    specs = (fwd_module.fwd_spec(constexprs, config, **spec_args),)
    if key.num_splits > 1 and not constexprs.MERGE_SPLITS:
        specs += (
            combine_module.combine_spec(
                num_splits=key.num_splits, head_dim=key.head_dim, dtype=key.dtype, aligned=key.aligned, arch=arch
            ),
        )
    return KernelPlan(config, specs, (constexprs,))


class TritonBackend(Backend):
    name = "triton"
    device_types = ("cuda", "cpu")
    default_device_types = ("cuda",)
    split_policy = TRITON_SPLIT_POLICY

    def __init__(self) -> None:
        #: (key, device index) -> (config, launchers): what a call of that key launches
        self._plans: dict[tuple[CompileKey, int], tuple] = {}
        #: spec -> Triton's CompiledKernel (loaded on the device that launches it first)
        self._compiled: dict = {}
        #: spec -> that device; (spec, device) -> the copy other devices launch (_device_kernel)
        self._kernel_device: dict = {}
        self._device_copies: dict = {}
        self._stores: dict[tuple, kernel_cache.KernelStore] = {}
        self._archs: dict[int, str] = {}
        #: how :meth:`compile` and the run path obtained kernels: "memory", "loaded" (persistent
        #: store), "compiled"
        self.compile_stats = dict(memory=0, loaded=0, compiled=0)

    def store(self, arch: str) -> kernel_cache.KernelStore:
        """The persistent store of ``arch`` kernels under the current cache root. Its fingerprint
        holds, besides :func:`~inkling_ops.kernel_cache.fingerprint`'s facts, the ptxas and the
        Triton environment that compile for ``arch`` (:func:`~inkling_ops.kernels.triton_launch.compiler_facts`)."""
        root = kernel_cache.cache_dir()
        store = self._stores.get((root, arch))
        if store is None:
            from ..kernels.triton_launch import compiler_facts

            toolchain = dict(kernel_cache.toolchain_versions(), triton_compiler=compiler_facts(arch))
            facts = kernel_cache.fingerprint(arch, toolchain=toolchain)
            store = self._stores[root, arch] = kernel_cache.KernelStore(arch, root=root, facts=facts)
        return store

    def compile(self, key: CompileKey) -> list:
        """Every kernel ``key`` launches (Triton ``CompiledKernel`` objects), from memory, the
        persistent store, or ``triton.compile`` for the key's arch (which needs no GPU). Compiled
        kernels are written to the store. On a GPU of the key's arch, each kernel is also loaded
        on the current device (its own copy if another device loaded the kept one first)."""
        specs = kernel_plan(key).specs
        kernels = [self._obtain(spec, key) for spec in specs]
        if not _INTERPRETED and torch.cuda.is_available() and self._arch(torch.cuda.current_device()) == key.arch:
            device = torch.cuda.current_device()
            for spec, kernel in zip(specs, kernels):
                self._for_device(spec, kernel, device).run  # noqa: B018  (loads it and builds Triton's launcher)
        return kernels

    def _obtain(self, spec, key: CompileKey, *, on_run_path: bool = False, describe=None):
        compiled = self._compiled.get(spec)
        if compiled is not None:
            self.compile_stats["memory"] += 1
            return compiled
        from ..kernels import triton_launch

        def build() -> dict[str, bytes]:
            if on_run_path:
                strict.check_compile(self.name, key, describe, stored=lambda: self.stored_warm_keys(key.arch))
            return triton_launch.kernel_files(triton_launch.compile_spec(spec))

        compiled, how = self.store(key.arch).obtain(
            spec.digest(), lambda paths: triton_launch.load_kernel(spec, paths), build, describe=repr(spec)
        )
        self.compile_stats[how] += 1
        self._compiled[spec] = compiled
        return compiled

    def _device_kernel(self, spec, key: CompileKey, device: int, describe=None):
        """The compiled kernel of ``spec`` for launches on CUDA device ``device``: the one
        :meth:`_obtain` keeps, for the first device that loads or plans it (a warmup's
        :meth:`compile` on the current device counts), and a copy of it for each other device
        (``triton_launch.device_copy``: Triton loads a kernel on one device only)."""
        return self._for_device(spec, self._obtain(spec, key, on_run_path=True, describe=describe), device)

    def _for_device(self, spec, compiled, device: int):
        """``compiled`` (the kept kernel of ``spec``) if ``device`` loads it first, else that
        device's copy (see :meth:`_device_kernel`)."""
        if self._kernel_device.setdefault(spec, device) == device:
            return compiled
        copy = self._device_copies.get((spec, device))
        if copy is None:
            from ..kernels.triton_launch import device_copy

            copy = self._device_copies[spec, device] = device_copy(compiled)
        return copy

    def _arch(self, device: int) -> str:
        arch = self._archs.get(device)
        if arch is None:
            arch = self._archs[device] = cuda_arch(torch.cuda.get_device_capability(device))
        return arch

    def _kernels(self, key: CompileKey, device: int, problem: RelAttnProblem) -> tuple:
        """``(config, launchers)`` of ``key`` on ``device``: kept from an earlier call, else built
        (:meth:`_plan`, which obtains the kernels; strict mode refuses a compile there)."""
        entry = self._plans.get((key, device))
        return entry if entry is not None else self._plan(key, device, problem)

    def _plan(self, key: CompileKey, device: int, problem: RelAttnProblem) -> tuple:
        from ..kernels.triton_launch import Launcher

        plan = kernel_plan(key)
        describe = lambda: (  # noqa: E731
            f"{problem.num_tokens} tokens, {problem.num_reqs} requests, max_seqlen_q {problem.max_seqlen_q}, "
            f"block table width {problem.max_blocks_per_seq}"
        )
        constexprs = plan.constexprs + (None,) * (len(plan.specs) - len(plan.constexprs))
        launchers = tuple(
            Launcher(self._device_kernel(spec, key, device, describe), values)
            for spec, values in zip(plan.specs, constexprs)
        )
        entry = self._plans[key, device] = (plan.config, launchers)
        return entry

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
        if problem.num_reqs * problem.num_kv_heads > CUDA_GRID_YZ_MAX:  # the forward grid's z
            return (f"{problem.num_reqs} requests x {problem.num_kv_heads} KV heads = {problem.num_reqs * problem.num_kv_heads} "
                    f"programs in one grid dimension; CUDA allows {CUDA_GRID_YZ_MAX}")  # fmt: skip
        if problem.num_splits > CUDA_GRID_YZ_MAX:  # the forward grid's y
            return f"num_splits {problem.num_splits}; at most {CUDA_GRID_YZ_MAX} (a grid dimension)"
        return None

    def launch_plan(self, key: CompileKey, problem: RelAttnProblem) -> tuple[object, int]:
        """The forward configuration of ``key`` (``fwd_config``) and the bytes the call allocates:
        split-KV partial outputs and log-sum-exps (fp32) and, when the forward merges the splits,
        its arrival counts (int32, one per row block); or the two-pass prefill's log-sum-exps."""
        triton_configs = _kernel_modules()[0]
        config = triton_configs.fwd_config(
            head_dim=key.head_dim, q_per_kv=key.q_per_kv, max_seqlen_q_bucket=key.max_seqlen_q_bucket,
            window_left=key.window_left, rel_extent=key.rel_extent, page_size=key.page_size,
        )  # fmt: skip
        rows = problem.num_tokens * problem.num_heads
        if key.num_splits > 1:
            counts = 0
            if triton_configs.merges_splits(key.num_splits):
                counts = _row_blocks(config, key.q_per_kv, problem.grid_seqlen_q) * problem.num_reqs * key.num_kv_heads
            return config, 4 * key.num_splits * rows * (problem.head_dim + 1) + 4 * counts
        if config.plain is not None and (key.window_left < 0 or key.window_left >= key.rel_extent):
            return config, 4 * rows
        return config, 0

    def prepare(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor):
        """The call's launches bound to its shapes and strides (:class:`PreparedTritonCall`), on
        CUDA tensors outside Triton's interpreter; None otherwise, and for a ``rel_logits`` whose
        last dimension is strided or strided index tensors (each call then copies them, in
        :meth:`run`)."""
        if not args.q.is_cuda or _INTERPRETED or args.rel_logits.stride(2) != 1 or not index_tensors_packed(args):
            return None
        _, fwd_module, combine_module = _kernel_modules()
        device = args.q.get_device()
        key = plan.key
        _config, launchers = self._kernels(key, device, problem)
        from ..kernels.triton_launch import BoundLaunch

        num_tokens, num_heads, head_dim = problem.num_tokens, problem.num_heads, problem.head_dim
        common = dict(max_seqlen_q=problem.grid_seqlen_q, num_reqs=problem.num_reqs)
        splits = key.num_splits

        def bound_fwd(launcher, fwd_pass: int) -> BoundLaunch:
            constexprs = launcher.constexprs
            grid = fwd_module.fwd_grid(constexprs, num_splits=splits, **common)
            strides = fwd_module.partial_strides(splits, fwd_pass, num_tokens, num_heads)
            tail = fwd_module.fwd_args_tail(
                args, out, softmax_scale=problem.softmax_scale, partial_strides=strides, constexprs=constexprs
            )
            return BoundLaunch(launcher, grid, tail)

        rows = num_tokens * num_heads
        if splits > 1 and launchers[0].constexprs.MERGE_SPLITS:
            fwd = bound_fwd(launchers[0], 0)
            counts = fwd.grid[0] * fwd.grid[2]  # one per row block
            return PreparedTritonCall(
                device, splits * rows * (head_dim + 1), splits * rows * head_dim, (fwd,), (_FWD_SLOTS["merge"],), counts
            )  # fmt: skip
        if splits > 1:
            grid, tail = combine_module.combine_launch(splits, num_tokens, num_heads, head_dim, problem.num_reqs, out.stride())
            launches = (bound_fwd(launchers[0], 0), BoundLaunch(launchers[1], grid, tail))
            return PreparedTritonCall(
                device, splits * rows * (head_dim + 1), splits * rows * head_dim, launches, (_FWD_SLOTS["split"], _COMBINE_SLOTS)
            )  # fmt: skip
        if len(launchers) == 2:  # the two-pass prefill: its log-sum-exps are the whole workspace
            launches = (bound_fwd(launchers[0], 1), bound_fwd(launchers[1], 2))
            return PreparedTritonCall(device, rows, 0, launches, (_FWD_SLOTS["two_pass"],) * 2)
        return PreparedTritonCall(device, 0, 0, (bound_fwd(launchers[0], 0),), (_FWD_SLOTS["single"],))

    def run(self, plan, problem: RelAttnProblem, args: RelAttnArgs, out: torch.Tensor) -> None:
        """Run the call with the kernels of ``plan.key`` (computed with the call's layout,
        ``compile_keys.layout_of``). On CUDA tensors the kernels come from memory, the persistent
        store or a compile (strict mode refuses the last); under Triton's interpreter they run
        through ``kernel[grid]`` with ``plan.launch``."""
        if args.q.is_cuda and not _INTERPRETED:
            key = plan.key
            config, launchers = self._kernels(key, args.q.get_device(), problem)
            run_triton(
                args, out,
                softmax_scale=problem.softmax_scale, window_left=problem.window_left,
                max_seqlen_q=problem.grid_seqlen_q, num_splits=key.num_splits, config=config, launchers=launchers,
            )  # fmt: skip
            return
        run_triton(
            args, out,
            softmax_scale=problem.softmax_scale, window_left=problem.window_left,
            max_seqlen_q=problem.grid_seqlen_q, num_splits=plan.num_splits, config=plan.launch,
        )  # fmt: skip


class PreparedTritonCall:
    """The launches of one repeated call on CUDA tensors (:meth:`TritonBackend.prepare`): the
    grids and every argument after the pointers are fixed by the call's shapes and strides, so a
    launch only passes the eight tensors' addresses, the workspace's and the current stream.
    ``launches``: ``triton_launch.BoundLaunch`` objects in order; ``pointer_maps``: for each, the
    slots of its leading pointers (0-7: the call's tensors in ``RelAttnArgs`` order then out,
    8: the workspace, 9: the log-sum-exp part of the workspace, 10: the arrival counts of a
    forward that merges its splits, ``arrivals_numel`` of them; 0 when it has none)."""

    __slots__ = ("device", "workspace_numel", "lse_offset", "arrivals_numel", "_steps")

    def __init__(
        self, device: int, workspace_numel: int, lse_offset: int, launches: tuple, pointer_maps: tuple,
        arrivals_numel: int = 0,
    ):  # fmt: skip
        self.device, self.workspace_numel, self.lse_offset = device, workspace_numel, lse_offset
        self.arrivals_numel = arrivals_numel
        self._steps = tuple((launch, operator.itemgetter(*slots)) for launch, slots in zip(launches, pointer_maps))

    def __call__(self, args: RelAttnArgs, pointers: tuple, out: torch.Tensor) -> None:
        stream = _current_stream(self.device)
        if not self.workspace_numel:
            for launch, pick in self._steps:
                launch(stream, pick(pointers))
            return
        # kept per stream between eager calls; under CUDA-graph capture, from the graph's pool. Both
        # tensors stay referenced until the launches are queued: a buffer allocated for this call
        # alone and dropped earlier could be handed to the other one (the counts would then be
        # the partials' memory).
        workspace = fp32_workspace(self.workspace_numel, args.q.device, stream)
        counts = arrival_counts(self.arrivals_numel, args.q.device, stream) if self.arrivals_numel else None
        base = workspace.data_ptr()
        pointers = pointers + (base, base + 4 * self.lse_offset, counts.data_ptr() if counts is not None else 0)
        for launch, pick in self._steps:
            launch(stream, pick(pointers))


def _row_blocks(config, q_per_kv: int, max_seqlen_q: int) -> int:
    """Row blocks of the longest request in a forward launch of ``config`` (its grid's first
    dimension, ``triton_fwd.fwd_grid``)."""
    g_pad = 1 << max(0, q_per_kv - 1).bit_length()
    block_q = max(config.block_m, g_pad) // g_pad
    return -(-max_seqlen_q // block_q)


_current_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else None


#: the forward kernel's eleven leading pointers: q, K, V, rel_logits, block_table, cache_seqlens,
#: cu_seqlens_q, out, part_out, part_lse, arrivals (slots of PreparedTritonCall.pointer_maps;
#: cu_seqlens_q stands in for unused arrivals)
_FWD_SLOTS = {
    "single": (0, 1, 2, 6, 3, 4, 5, 7, 7, 7, 5),
    "split": (0, 1, 2, 6, 3, 4, 5, 7, 8, 9, 5),
    "merge": (0, 1, 2, 6, 3, 4, 5, 7, 8, 9, 10),
    "two_pass": (0, 1, 2, 6, 3, 4, 5, 7, 7, 8, 5),
}
#: the combine's four: part_out, part_lse, out, cu_seqlens_q
_COMBINE_SLOTS = (8, 9, 7, 5)


def run_triton(
    args: RelAttnArgs,
    out: torch.Tensor,
    *,
    softmax_scale: float,
    window_left: int,
    max_seqlen_q: int,
    num_splits: int,
    config,
    launchers: tuple = (),
):
    """Forward kernel (and, with num_splits > 1 and no merge in the forward, the combine) on the
    call's tensors ``args``, writing ``out``, with an explicit launch config.

    The backend's ``run`` uses the tuned config; the tuner (``meta/tools/tuning.py``) calls this
    with candidates. Arguments must already be validated. ``launchers``: the compiled kernels of
    each launch, in order (the backend's, from its compile key); empty: each launch finds the
    variant of its tensors itself.
    """
    _, fwd_module, combine_module = _kernel_modules()
    launch_rel_attn_fwd = fwd_module.launch_rel_attn_fwd
    launch_rel_attn_combine = combine_module.launch_rel_attn_combine

    q, rel_logits = args.q, args.rel_logits
    num_tokens, num_heads, head_dim = q.shape
    if rel_logits.stride(2) != 1:
        # the kernel's bias gather assumes unit stride over d
        args = args._replace(rel_logits=rel_logits.contiguous())
    args = with_packed_index_tensors(args)  # the kernels index them with unit stride
    part_out = part_lse = arrivals = None
    merges = _kernel_modules()[0].merges_splits(num_splits)
    if num_splits > 1:
        # One workspace allocation: partial outputs (S, T, Hq, D) then log-sum-exps (S, T, Hq).
        shape = (num_splits, num_tokens, num_heads)
        rows = num_splits * num_tokens * num_heads
        workspace = torch.empty(rows * (head_dim + 1), dtype=torch.float32, device=q.device)
        part_out = workspace[: rows * head_dim].view(shape + (head_dim,))
        part_lse = workspace[rows * head_dim :].view(shape)
        if merges:  # the forward merges the splits, counting arrivals per row block
            blocks = _row_blocks(config, num_heads // args.key_cache.shape[2], max_seqlen_q)
            counts = blocks * args.cache_seqlens.shape[0] * args.key_cache.shape[2]
            if q.is_cuda:  # kept per stream, as the prepared call's (zeroed in the graph under capture)
                arrivals = arrival_counts(counts, q.device, torch.cuda.current_stream(q.device).cuda_stream)
            else:
                arrivals = torch.zeros(counts, dtype=torch.int32, device=q.device)
    common = dict(softmax_scale=softmax_scale, window_left=window_left, max_seqlen_q=max_seqlen_q)
    plain = config.plain
    if num_splits == 1 and plain is not None and (window_left < 0 or window_left >= rel_logits.shape[2]):
        # Two passes: plain tiles with their own (larger) tiles, then the band/edge/diagonal tiles.
        # Between them each row's partial output lives in ``out`` and its log-sum-exp here.
        lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=q.device)
        first, second = ({"launcher": launcher} for launcher in launchers) if launchers else ({}, {})
        launch_rel_attn_fwd(args, out, **common, num_splits=1, config=plain, part_lse=lse, fwd_pass=1, **first)
        return launch_rel_attn_fwd(
            args, out, **common, num_splits=1, config=config, part_lse=lse, fwd_pass=2, pass1_config=plain, **second
        )
    fwd = {"launcher": launchers[0]} if launchers else {}
    compiled = launch_rel_attn_fwd(
        args, out, **common, num_splits=num_splits, config=config, part_out=part_out, part_lse=part_lse,
        arrivals=arrivals, **fwd,
    )  # fmt: skip
    if num_splits > 1 and not merges:
        launch_rel_attn_combine(part_out, part_lse, out, args.cu_seqlens_q, launchers[1] if launchers else None)
    return compiled
