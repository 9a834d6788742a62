"""One key, one cache: the CompileKey selects the Triton backend's compiled kernels, and a key
compiles without tensors (for sm_90a on this CPU machine).

- The key changes with every fact the kernels are specialised on (alignment, the KV layout,
  num_kv_heads, ...) and not with what they are not specialised on (max_blocks_per_seq, token
  count, strides that stay multiples of 16).
- The specs of a key reproduce what Triton's JIT specialises for the same aligned call, except
  the ints the specs leave unspecialised on purpose (checked with Triton's own specialisation
  function on the arguments the launch passes).
- ``TritonBackend.compile(key)`` compiles for sm_90a without a GPU, and its cubin is the kernel
  report's; warmup fills the store and a second warmup loads everything from it (subprocesses
  without TRITON_INTERPRET, which this session sets).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inkling_ops import call_cache, kernel_cache, strict
from inkling_ops.backends import triton_backend
from inkling_ops.backends.triton_backend import TritonBackend, kernel_plan
from inkling_ops.compile_keys import STANDARD_LAYOUT, compile_key, layout_of, split_count
from inkling_ops.problem import RelAttnArgs
from inkling_ops.serving import ServingConfig, enumerate_compile_keys
from inkling_ops.testing import make_case
from inkling_ops.validation import check_call

triton = pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
FACTS_H200 = dict(arch="sm_90a", num_sms=132)


def _problem(case, out=None):
    return check_call(
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits, case.max_seqlen_q, case.softmax_scale, case.window_size, True, 0, out,
    )  # fmt: skip


def _args(case) -> RelAttnArgs:
    return RelAttnArgs(
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits,
    )  # fmt: skip


def _key(case, out=None, *, splits=1):
    out = torch.empty_like(case.q) if out is None else out
    problem = _problem(case, out)._replace(device_type="cuda")
    return compile_key(problem, arch="sm_90a", backend="triton", splits=splits, layout=layout_of(_args(case), out))


def _case(**kw):
    base = dict(q_lens=[3, 1], kv_lens=[40, 17], num_heads=4, num_kv_heads=2, head_dim=32, dtype=torch.bfloat16)
    return make_case(**(base | kw))


def _offset(t: torch.Tensor, elements: int = 1) -> torch.Tensor:
    """A copy of ``t`` (same strides) whose data pointer is ``elements`` past a fresh buffer's start."""
    buf = torch.empty(t.numel() + elements, dtype=t.dtype)
    view = buf[elements:].view(t.shape)
    view.copy_(t)
    return view


# --------------------------------------------------------------------------------------------------
# The key and the layout facts
# --------------------------------------------------------------------------------------------------


def test_standard_tensors_have_the_enumerations_default_layout():
    case = _case()
    out = torch.empty_like(case.q)
    layout = layout_of(_args(case), out)
    assert layout._replace(slot_stride=0) == STANDARD_LAYOUT and layout.slot_stride == 2 * 32
    problem = _problem(case)._replace(device_type="cuda")
    assert _key(case) == compile_key(problem, arch="sm_90a", backend="triton", splits=1)  # default layout


def test_vllm_packed_kv_views_are_the_standard_layout():
    """vLLM's K and V are views kv[:, 0] / kv[:, 1] of one (num_blocks, 2, page, Hkv, D) cache: the
    block stride doubles, but K and V share it and the slot stride stays Hkv * D."""
    plain, packed = _case(), _case(packed_kv=True)
    assert packed.key_cache.stride(0) == 2 * plain.key_cache.stride(0)
    assert layout_of(_args(packed), torch.empty_like(packed.q)) == layout_of(_args(plain), torch.empty_like(plain.q))
    assert _key(packed) == _key(plain)


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda c: dict(q=_offset(c.q)), "aligned"),  # a pointer off 16 bytes
        (lambda c: dict(rel_logits=_offset(c.rel_logits)), "aligned"),
        (lambda c: dict(block_table=_offset(c.block_table)), "aligned"),
        # q rows padded by 8 elements (a view of a wider buffer): a token stride no multiple of 16
        (lambda c: dict(q=_wide_rows(c.q, 8)), "aligned"),
        # rel_logits rows padded by 4 distances: a head stride no multiple of 8 (the CuTe kernel's
        # bias copies would need a copy of rel_logits on every call)
        (lambda c: dict(rel_logits=_padded_last(c.rel_logits, 4)), "aligned"),
        (lambda c: dict(rel_logits=_every_other(c.rel_logits)), "aligned"),  # last dim strided
        # V laid out otherwise than K: another block stride
        # (K and V then take separate 64-bit offsets: no int32 rows, no shift)
        (lambda c: dict(value_cache=_padded_blocks(c.value_cache)), "kv_same_strides kv_row_i32 kv_slot_shift"),
        # slot stride 3 * 32 (a padded head axis): not a power of two, no shift
        (lambda c: dict(key_cache=_padded_heads(c.key_cache), value_cache=_padded_heads(c.value_cache)), "kv_slot_shift"),
    ],
    ids=[
        "q-misaligned", "rel-misaligned", "table-misaligned", "q-row-stride-136", "rel-head-stride-pad4",
        "rel-last-dim-strided", "v-other-layout", "slot-stride-96",
    ],
)
def test_the_key_changes_with_every_specialised_layout_fact(change, field):
    import dataclasses

    case = _case()
    base = _key(case)
    changed = _key(dataclasses.replace(case, **change(case)))
    differing = [f.name for f in dataclasses.fields(base) if getattr(base, f.name) != getattr(changed, f.name)]
    assert differing == field.split()


def _wide_rows(q: torch.Tensor, pad: int) -> torch.Tensor:
    """``q`` as a view whose token rows are ``pad`` elements longer than Hq * D."""
    tokens, heads, dim = q.shape
    buf = torch.zeros(tokens, heads * dim + pad, dtype=q.dtype)
    view = buf[:, : heads * dim].unflatten(1, (heads, dim))
    view.copy_(q)
    return view


def _padded_last(t: torch.Tensor, pad: int) -> torch.Tensor:
    """``t`` as a view of a buffer whose last dimension is ``pad`` elements longer."""
    buf = torch.zeros(*t.shape[:-1], t.shape[-1] + pad, dtype=t.dtype)
    view = buf[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _every_other(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a view of every other element of a buffer twice as long in its last dimension."""
    buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    view = buf[..., ::2]
    view.copy_(t)
    return view


def _padded_blocks(cache: torch.Tensor) -> torch.Tensor:
    n, page, heads, dim = cache.shape
    buf = torch.zeros(n, page + 1, heads, dim, dtype=cache.dtype)
    view = buf[:, :page]
    view.copy_(cache)
    return view


def _padded_heads(cache: torch.Tensor) -> torch.Tensor:
    n, page, heads, dim = cache.shape
    buf = torch.zeros(n, page, heads + 1, dim, dtype=cache.dtype)
    view = buf[:, :, :heads]
    view.copy_(cache)
    return view


def test_the_key_changes_with_num_kv_heads_and_the_dtype():
    base = _key(_case())
    assert _key(_case(num_kv_heads=4, num_heads=8)).num_kv_heads == 4
    assert _key(_case(num_kv_heads=4, num_heads=8)) != base
    fewer = _key(_case(num_kv_heads=1, num_heads=2))
    assert fewer.q_per_kv == base.q_per_kv and fewer.num_kv_heads == 1 and fewer != base
    assert _key(_case(dtype=torch.float16)) != base


def test_the_key_ignores_what_is_not_specialised():
    """Block-table width (max_blocks_per_seq, within its capacity bucket), token and request counts
    within their buckets, cache size, and strides that stay multiples of 16 share one key."""
    base = _key(_case())
    assert _key(_case(extra_table_cols=3)) == base  # another block-table width
    assert _key(_case(spare_blocks=40)) == base  # another num_blocks
    assert _key(_case(extra_tokens=5)) == base  # more tokens
    assert _key(_case(q_lens=[4, 1], kv_lens=[41, 3])) == base  # max_seqlen_q 3 -> 4: bucket 4
    case = _case()
    import dataclasses

    wide_q = dataclasses.replace(case, q=_wide_rows(case.q, 16))  # token stride 144, a multiple of 16
    assert wide_q.q.stride(0) == 144 and _key(wide_q) == base


def test_max_blocks_per_seq_is_not_in_the_kernels():
    """Two block-table widths of one capacity bucket (5 and 6 pages of 16: 128 keys): one key at the
    heuristic's split count, and its kernels take the width as an unspecialised int."""
    from inkling_ops.compile_keys import DeviceFacts

    facts = DeviceFacts(**FACTS_H200)
    a, b = _case(extra_table_cols=2), _case(extra_table_cols=3)
    assert (a.block_table.shape[1], b.block_table.shape[1]) == (5, 6)
    keys = []
    for case in (a, b):
        problem = _problem(case)._replace(device_type="cuda")
        keys.append(_key(case, splits=split_count(problem, facts, TritonBackend.split_policy)))
    assert keys[0] == keys[1]
    for spec in kernel_plan(keys[0]).specs:
        names = triton_backend._kernel_modules()[1].rel_attn_fwd_kernel.arg_names
        sig = dict(zip(names, spec.signature))
        assert sig["max_blocks_per_seq"] == sig["stride_bt"] == "i32"
        assert "max_blocks_per_seq" not in spec.divisible and "stride_bt" not in spec.divisible


# --------------------------------------------------------------------------------------------------
# The specs reproduce Triton's JIT specialisation (no compile: Triton's own specialisation function)
# --------------------------------------------------------------------------------------------------

#: ints the specs leave unspecialised on purpose (Triton's JIT would specialise them by value)
NOT_SPECIALISED = {"max_blocks_per_seq", "stride_bt", "stride_ps", "stride_pt", "stride_rt", "stride_rh"}


class _Recorder:
    """Stands in for a jit kernel under the interpreter: records the arguments of each launch."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __getitem__(self, grid):
        return lambda *args, **options: self.calls.append(args)


def _jit_specialisation(fn, args) -> list:
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import JITFunction

    # The interpreter's wrapper keeps the function and its jit arguments: the JIT's view of them.
    jit = JITFunction(fn.fn, do_not_specialize=fn.kwargs.get("do_not_specialize"))
    result = []
    for param, arg in zip(jit.params, args):
        if param.is_constexpr:
            result.append(("constexpr", arg))
        else:
            result.append(native_specialize_impl(CUDABackend, arg, False, not param.do_not_specialize, True))
    return result


@pytest.mark.parametrize(
    "kw, splits",
    [
        (dict(q_lens=[1, 1, 1], kv_lens=[300, 17, 64], num_heads=32, num_kv_heads=2, rel_extent=32), 2),  # merged in the forward
        (dict(q_lens=[1, 1, 1], kv_lens=[300, 17, 64], num_heads=32, num_kv_heads=2, rel_extent=32), 32),  # and the combine
        (dict(q_lens=[40], kv_lens=[300], num_heads=8, num_kv_heads=1, page_size=128, rel_extent=32), 1),  # two passes
        (dict(q_lens=[5, 20], kv_lens=[60, 30], num_heads=4, num_kv_heads=2, window_left=7, rel_extent=16), 1),
    ],
    ids=["split-decode-merged", "split-decode-combined", "two-pass-prefill", "sliding-prefill"],
)
def test_specs_reproduce_the_jit_specialisation(kw, splits, monkeypatch):
    from inkling_ops.kernels import triton_combine, triton_fwd

    case = make_case(**kw, head_dim=32, dtype=torch.bfloat16)
    out = torch.empty_like(case.q)
    key = _key(case, out, splits=splits)
    plan = kernel_plan(key)
    specs = plan.specs
    fwd, comb = _Recorder(triton_fwd.rel_attn_fwd_kernel), _Recorder(triton_combine.rel_attn_combine_kernel)
    monkeypatch.setattr(triton_fwd, "rel_attn_fwd_kernel", fwd)
    monkeypatch.setattr(triton_combine, "rel_attn_combine_kernel", comb)
    problem = _problem(case)
    triton_backend.run_triton(
        _args(case), out, softmax_scale=problem.softmax_scale, window_left=problem.window_left,
        max_seqlen_q=problem.max_seqlen_q, num_splits=splits, config=plan.config,
    )  # fmt: skip
    launches = [(fwd.real, a) for a in fwd.calls] + [(comb.real, a) for a in comb.calls]
    assert len(launches) == len(specs)
    unspecialised_seen = set()
    for spec, (fn, args) in zip(specs, launches):
        constexprs = dict(spec.constexprs)
        for name, sig, (jit_type, jit_spec), arg in zip(fn.arg_names, spec.signature, _jit_specialisation(fn, args), args):
            if sig == "constexpr":
                if name == "ASM_GATHER":  # the interpreter never gathers with PTX; sm_90a does
                    continue
                assert (jit_type, jit_spec) == ("constexpr", constexprs[name]), name
            elif name in spec.divisible:
                assert (jit_type, jit_spec) == (sig, "D"), name
            else:
                assert jit_type == sig, name
                if jit_spec == "D":
                    assert name in NOT_SPECIALISED, f"{name}: Triton's JIT marks it divisible by 16, the spec does not"
                    unspecialised_seen.add(name)
    if splits == 1 and len(specs) == 1:
        assert "max_blocks_per_seq" in unspecialised_seen or case.block_table.shape[1] % 16


# --------------------------------------------------------------------------------------------------
# Strict mode on the run path
# --------------------------------------------------------------------------------------------------


def test_strict_mode_refuses_a_compile_on_the_run_path_but_not_a_store_hit(tmp_path, monkeypatch):
    from inkling_ops.kernels import triton_launch

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(triton_launch, "compile_spec", lambda spec: pytest.fail("compiled under strict mode"))
    monkeypatch.setattr(triton_launch, "load_kernel", lambda spec, paths: ("loaded", spec))
    backend = TritonBackend()
    key = _key(_case())
    (spec,) = kernel_plan(key).specs
    with strict.strict_compiles():
        with pytest.raises(strict.StrictCompileError, match="would compile"):
            backend._obtain(spec, key, on_run_path=True)
        backend.store(key.arch).put(spec.digest(), {"k.json": b"{}", "k.cubin": b"x"})
        assert backend._obtain(spec, key, on_run_path=True) == ("loaded", spec)
        assert backend._obtain(spec, key, on_run_path=True) == ("loaded", spec)  # from memory
    assert backend.compile_stats == dict(memory=1, loaded=1, compiled=0)


def test_the_run_paths_strict_error_compares_with_the_keys_recorded_in_the_store(tmp_path, monkeypatch):
    """Both backends pass the store's recorded warm keys to strict mode's message (a serving
    process that only loads what another machine warmed names the differing field)."""
    import dataclasses

    from inkling_ops.backends.cute_backend import CuteBackend

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(strict, "_warmed", {})
    key = _key(_case())
    for backend, run_path in ((TritonBackend(), lambda b: b._obtain(kernel_plan(key).specs[0], key, on_run_path=True)),
                              (CuteBackend(), lambda b: b._function(dataclasses.replace(key, backend="cute"), on_run_path=True))):  # fmt: skip
        name = backend.name
        warmed = dataclasses.replace(key, backend=name, max_seqlen_q_bucket=64)
        backend.store(key.arch).directory.mkdir(parents=True, exist_ok=True)
        backend.record_warmed([warmed])
        with strict.strict_compiles(), pytest.raises(strict.StrictCompileError) as info:
            run_path(backend)
        assert f"max_seqlen_q_bucket={key.max_seqlen_q_bucket} (warmed: 64; configuration field: max_num_batched_tokens" in str(info.value), name


def test_reference_backend_compiles_nothing():
    from inkling_ops.backends.reference import ReferenceBackend

    assert ReferenceBackend().compile(_key(_case())) == []


# --------------------------------------------------------------------------------------------------
# Compiling for sm_90a without a GPU (subprocesses without TRITON_INTERPRET)
# --------------------------------------------------------------------------------------------------


def _python(code: str, cache: Path, *, timeout: int = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["INKLING_OPS_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


#: The machine code of "decode sliding page 16 unsplit" with one KV head under Triton 3.9.0: the
#: kernel report's digest when the JIT specialised the launch before issue 16 (3f697a4d4e35), with
#: the parameter offsets moved by the arrival-count pointer added since (the same instructions
#: otherwise): the AOT path must compile the same.
PINNED_SASS = {"3.9.0": (1128, "07cd5293d83b")}


def test_compile_on_cpu_gives_the_kernel_reports_machine_code(tmp_path):
    """compile(key) for sm_90a here, through the store (json + cubin reloaded), equals the kernel
    report's fresh compile of the same default variant (from its explicit configuration)."""
    out = _python(
        f"import sys; sys.path.insert(0, {str(ROOT / 'meta' / 'tools')!r})\n"
        "import json, kernel_report as kr\n"
        "from inkling_ops.backends.triton_backend import TritonBackend, kernel_plan\n"
        "from inkling_ops.kernels.triton_configs import slot_shift\n"
        "import dataclasses\n"
        "key = kr.anchor_key(4, 2, 16, 512, 511, 1, 1)\n"
        "one_head = dataclasses.replace(key, num_kv_heads=1, kv_slot_shift=slot_shift(128))\n"
        "rows = []\n"
        "for k, heads in ((key, 2), (one_head, 1)):\n"
        "    (compiled,) = TritonBackend().compile(k)\n"
        "    assert set(compiled.asm) == {'cubin'}, compiled.asm.keys()\n"  # from the store: the binary only
        "    cfg = kernel_plan(k).config\n"
        "    ref = kr.compile_fwd_sm90(cfg, group=4, page=16, rel_extent=512, window_left=511, num_kv_heads=heads)\n"
        "    rows.append([list(kr.sass_digest(compiled)), list(kr.sass_digest(ref))])\n"
        "import triton; print(json.dumps([triton.__version__, rows]))\n",
        tmp_path,
    )
    version, rows = json.loads(out.strip().splitlines()[-1])
    for ours, report in rows:
        assert ours == report
    if version in PINNED_SASS:
        assert tuple(rows[1][0]) == PINNED_SASS[version]


TINY = dict(num_heads=4, num_kv_heads=2, head_dim=32, rel_extent=16, page_size=16, max_num_seqs=4,
            max_num_batched_tokens=32, max_model_len=512)  # fmt: skip

WARMUP = (
    "import json, torch\n"
    "from inkling_ops import strict\n"
    "from inkling_ops.compile_keys import DeviceFacts\n"
    "from inkling_ops.serving import ServingConfig\n"
    "from inkling_ops.warmup import warmup\n"
    f"config = ServingConfig(**{TINY!r})\n"
    "s = warmup(config, facts=DeviceFacts(arch='sm_90a', num_sms=132), backend='triton', progress=False)\n"
    "assert strict.warmed_keys('triton') == set(s.keys)\n"
    "from inkling_ops.backends.triton_backend import TritonBackend\n"
    "assert set(TritonBackend().stored_warm_keys('sm_90a')) == set(s.keys)  # for a later process's strict message\n"
    "print(json.dumps(dict(keys=len(s.keys), compiled=s.compiled, loaded=s.loaded, shared=s.shared, seconds=s.seconds, text=str(s))))\n"
)


def test_warmup_on_cpu_compiles_then_a_second_warmup_loads_everything(tmp_path):
    first = json.loads(_python(WARMUP, tmp_path).strip().splitlines()[-1])
    second = json.loads(_python(WARMUP, tmp_path).strip().splitlines()[-1])
    print(first["text"], "|", second["text"])
    assert first["compiled"] >= 3 and first["loaded"] == 0
    assert second["compiled"] == 0 and second["loaded"] == first["compiled"]
    # every key's kernels were obtained once per key: compiled or loaded the first time, the rest
    # shared with an earlier key (prefill buckets of a layer share kernels)
    assert first["keys"] == second["keys"] and first["shared"] == second["shared"] > 0
    assert kernel_cache.info(tmp_path).entries and sum(kernel_cache.info(tmp_path).entries.values()) == first["compiled"]


def test_runtime_keys_of_standard_calls_are_warmed_keys():
    """What the GPU computes for a standard call of the configuration (its tensors' layout) is one
    of the keys a CPU warmup compiled: the store serves it without compiling."""
    from inkling_ops.compile_keys import DeviceFacts

    config = ServingConfig(**TINY, dtype=torch.bfloat16)
    facts = DeviceFacts(**FACTS_H200)
    keys = enumerate_compile_keys(config, facts=facts, backend="triton", policy=TritonBackend.split_policy)
    for q_lens, kv_lens in [([1], [300]), ([1, 1, 1], [5, 9, 500]), ([17, 1], [40, 3]), ([32], [32])]:
        case = make_case(q_lens, kv_lens, num_heads=4, num_kv_heads=2, head_dim=32, rel_extent=16, page_size=16,
                         dtype=torch.bfloat16, extra_table_cols=config.max_blocks_per_seq - max(-(-k // 16) for k in kv_lens))  # fmt: skip
        assert case.block_table.shape[1] == config.max_blocks_per_seq
        out = torch.empty_like(case.q)
        problem = _problem(case, out)._replace(device_type="cuda")
        splits = split_count(problem, facts, TritonBackend.split_policy)
        key = compile_key(problem, arch="sm_90a", backend="triton", splits=splits, layout=layout_of(_args(case), out))
        assert key in keys, key


def _warm_by_calls(monkeypatch):
    """Warmup of TINY with a backend whose compile raises NotImplementedError (so each key is
    warmed by a call) and whose grid rule is the CuTe backend's (a compact grid for two or more
    requests past the decode class). Returns (the backend, with the max_seqlen_q and the plan key
    of each call it ran, the warmup's summary)."""
    from inkling_ops import dispatch, planning
    from inkling_ops.backends.reference import ReferenceBackend
    from inkling_ops.warmup import warmup

    class RunToCompile(ReferenceBackend):
        name = "run-to-compile"
        default_device_types = ("cpu",)

        def __init__(self):
            self.runs, self.keys = [], set()

        def compact_grid(self, problem):
            return problem.num_reqs >= 2 and problem.max_seqlen_q > 16

        def compile(self, key):
            raise NotImplementedError

        def run(self, plan, problem, args, out):
            self.runs.append(problem.max_seqlen_q)
            self.keys.add(plan.key)
            return super().run(plan, problem, args, out)

    backend = RunToCompile()
    monkeypatch.setattr(planning, "_BACKENDS", [backend, *planning._BACKENDS])
    monkeypatch.setattr(dispatch, "_PLANS", {})
    monkeypatch.setattr(call_cache, "_ENTRIES", {})  # entries name the backend object they planned on
    monkeypatch.setattr(strict, "_warmed", {})
    config = ServingConfig(**(TINY | dict(max_model_len=64)), dtype=torch.float32)
    return backend, warmup(config, device="cpu", progress=False)


def test_warmup_runs_a_call_for_a_backend_that_cannot_compile_from_a_key(monkeypatch):
    """A backend whose compile raises NotImplementedError is warmed by one call per key instead."""
    backend, summary = _warm_by_calls(monkeypatch)
    assert summary.backend == "run-to-compile" and summary.launched == len(summary.keys) == len(backend.runs) > 1
    assert sorted(backend.runs) == sorted(min(k.max_seqlen_q_bucket, 32) for k in summary.keys)


def test_warmup_by_calls_reaches_a_backends_compact_grid_keys(monkeypatch):
    """The calls that warm a backend unable to compile from a key reach every key warmup
    enumerates, those of a compact grid among them: a call of one request would plan the dense
    grid's key instead."""
    backend, summary = _warm_by_calls(monkeypatch)
    assert any(key.compact_grid for key in summary.keys)
    assert backend.keys == set(summary.keys)


def test_an_entry_triton_cannot_load_is_rebuilt_with_a_warning(tmp_path, monkeypatch):
    from inkling_ops.kernels import triton_launch

    monkeypatch.setenv("INKLING_OPS_CACHE_DIR", str(tmp_path))
    loads = []

    def load(spec, paths):
        loads.append(paths["k.cubin"].read_bytes())
        if loads[-1] == b"stale":
            raise RuntimeError("not a cubin")
        return "kernel"

    monkeypatch.setattr(triton_launch, "load_kernel", load)
    monkeypatch.setattr(triton_launch, "compile_spec", lambda spec: "fresh")
    monkeypatch.setattr(triton_launch, "kernel_files", lambda compiled: {"k.json": b"{}", "k.cubin": b"good"})
    backend = TritonBackend()
    key = _key(_case())
    (spec,) = kernel_plan(key).specs
    backend.store(key.arch).put(spec.digest(), {"k.json": b"{}", "k.cubin": b"stale"})
    with pytest.warns(UserWarning, match="does not load"):
        assert backend.compile(key) == ["kernel"]
    assert loads == [b"stale", b"good"] and backend.compile_stats["compiled"] == 1


def test_each_cuda_device_launches_its_own_copy_of_a_kernel(monkeypatch):
    """Triton loads a CompiledKernel's module on the device current at its first launch and keeps
    that handle: a second device of the process must get its own copy (one per device, reused)."""
    from inkling_ops.kernels import triton_launch

    backend = TritonBackend()
    shared, copies = object(), []
    monkeypatch.setattr(backend, "_obtain", lambda spec, key, **kw: shared)
    monkeypatch.setattr(triton_launch, "device_copy", lambda compiled: copies.append(compiled) or object())
    first = backend._device_kernel("spec", "key", 1)
    assert first is shared and backend._device_kernel("spec", "key", 1) is shared
    other = backend._device_kernel("spec", "key", 0)
    assert other is not shared and copies == [shared]
    assert backend._device_kernel("spec", "key", 0) is other and len(copies) == 1


def test_a_kernel_a_warmup_loaded_stays_with_the_warmups_device(monkeypatch):
    """warmup's compile() loads each kernel on the current device (0); serving on device 1 must
    then launch a copy, not the kernel loaded on device 0."""
    from inkling_ops.kernels import triton_launch

    class Kernel:
        loads = 0

        @property
        def run(self):
            type(self).loads += 1
            return None

    backend = TritonBackend()
    kept = Kernel()
    key = _key(_case())
    monkeypatch.setattr(backend, "_obtain", lambda spec, key, **kw: kept)
    monkeypatch.setattr(triton_backend, "_INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(backend, "_arch", lambda device: key.arch)
    monkeypatch.setattr(triton_launch, "device_copy", lambda compiled: Kernel())
    backend.compile(key)  # the warmup, with device 0 current
    assert Kernel.loads == len(kernel_plan(key).specs)
    spec = kernel_plan(key).specs[0]
    assert backend._device_kernel(spec, key, 0) is kept
    assert backend._device_kernel(spec, key, 1) is not kept


DEVICE_COPY = (
    "from inkling_ops import kernel_cache\n"
    "from inkling_ops.backends.triton_backend import TritonBackend, kernel_plan\n"
    "from inkling_ops.compile_keys import CompileKey\n"
    "from inkling_ops.kernels import triton_launch\n"
    "key = CompileKey(dtype='bfloat16', kv_dtype='bfloat16', head_dim=32, q_per_kv=2, page_size=16, rel_extent=16,\n"
    "                 causal=True, window_left=-1, max_seqlen_q_bucket=1, num_splits=1, arch='sm_90a', backend='triton',\n"
    "                 num_kv_heads=2, kv_slot_shift=6)\n"
    "(compiled,) = TritonBackend().compile(key)\n"
    "compiled.module, compiled.function = 'device 0 module', 'its function'  # as after a launch on device 0\n"
    "kernel_cache.clear()  # the store's files gone: the copy must not need them\n"
    "copy = triton_launch.device_copy(compiled)\n"
    "assert type(copy) is type(compiled) and copy is not compiled\n"
    "assert copy.kernel is compiled.kernel and copy.asm is compiled.asm and copy.metadata is compiled.metadata\n"
    "assert copy.module is None and copy.function is None and copy._run is None\n"
    "compiled.module = compiled.function = None  # stand-ins: nothing to unload\n"
    "print('ok')\n"
)


def test_device_copy_shares_the_binary_and_holds_no_module(tmp_path):
    """The copy another device launches is made from memory (the store's files may be gone
    meanwhile) and is not loaded anywhere yet: Triton's own CompiledKernel, compiled for sm_90a."""
    assert _python(DEVICE_COPY, tmp_path).strip().splitlines()[-1] == "ok"
