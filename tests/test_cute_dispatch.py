"""Where the dispatcher picks the CuTe backend (cute_backend.prefers_cute, a pure rule over case
classes), and its prepared eager call (``CuteBackend.prepare``), on CPU: no GPU, no compile.

The rule's table (``cute_backend.DEFAULT_CASES``) holds prefill, global and sliding, at pages 16,
64 and 128 (meta/TUNING.md, "CuTe backend", "The default-choice rule"); the tests switch classes
on and off with ``monkeypatch`` and check that the default choice,
the enumeration of compile keys and warmup follow, while calls outside those classes stay on
Triton without a fallback warning.
"""

from __future__ import annotations

import pytest
import torch

from cute_device import why_no_cute_device
from inkling_ops import planning, strict
from inkling_ops.backends import cute_backend
from inkling_ops.compile_keys import DeviceFacts
from inkling_ops.problem import RelAttnArgs, RelAttnProblem
from inkling_ops.serving import ServingConfig, enumerate_compile_keys
from inkling_ops.testing import make_case
from inkling_ops.validation import check_call
from inkling_ops.warmup import warmup

H200 = DeviceFacts(arch="sm_90a", num_sms=132)
A100 = DeviceFacts(arch="sm_80", num_sms=108)


def _problem(*, q=4096, page=16, window=-1, extent=1024, kv_heads=1, head_dim=128) -> RelAttnProblem:
    return RelAttnProblem(
        num_tokens=q, num_heads=8, num_kv_heads=kv_heads, head_dim=head_dim, rel_extent=extent, num_reqs=1,
        page_size=page, num_blocks=4096, max_blocks_per_seq=8192 // page, max_seqlen_q=q, softmax_scale=1 / 128,
        window_left=window, causal=True, num_splits=0, dtype=torch.bfloat16, kv_dtype=torch.bfloat16,
        device_type="cuda",
    )  # fmt: skip


def _cute_on(monkeypatch, *cases):
    """Switch the rule's table to ``cases``, with the backend reported available (so the test
    does not depend on nvidia-cutlass-dsl being installed)."""
    monkeypatch.setattr(cute_backend, "DEFAULT_CASES", frozenset(cases))
    monkeypatch.setattr(planning.get_backend("cute"), "is_available", lambda: None)


def test_cute_case_classes():
    assert cute_backend.case_class(_problem()) == ("prefill", 16, "global")
    assert cute_backend.case_class(_problem(q=16, page=128, window=511)) == ("decode", 128, "sliding")
    assert cute_backend.case_class(_problem(q=17)) == ("prefill", 16, "global")
    assert cute_backend.case_class(_problem(q=1)) == ("decode", 16, "global")


def test_cute_rule_is_pure_and_chooses_prefill_where_it_was_measured_ahead(monkeypatch):
    """No device query (torch.cuda raises here), no state: the answer follows the arguments only."""
    def no_device(*a, **k):
        raise AssertionError("the rule queried the device")

    for name in ("is_available", "get_device_properties", "get_device_capability", "current_device"):
        monkeypatch.setattr(torch.cuda, name, no_device)
    cases = [_problem(q=q, page=p, window=w) for q in (1, 16, 4096) for p in (16, 32, 64, 128) for w in (-1, 511)]
    # global prefill at pages 16 and 128 (46a147e); sliding prefill at page 128 (109c5e9: 1.03-1.18x
    # Triton) and at page 16 with the compact grid (its serving-shaped batch: 0.98x on the dense
    # grid); both at page 64 (46f6f43: 1.16-1.62x); decode and unmeasured page sizes: Triton
    assert cute_backend.DEFAULT_CASES == frozenset(
        {("prefill", p, a) for p in (16, 64, 128) for a in ("global", "sliding")}
    )
    today = [cute_backend.prefers_cute(p, H200) for p in cases]
    assert today == [
        q > 16 and p in (16, 64, 128) for q in (1, 16, 4096) for p in (16, 32, 64, 128) for w in (-1, 511)
    ]  # fmt: skip
    on = {("prefill", 128, "global"), ("decode", None, "sliding")}
    answers = [cute_backend.prefers_cute(p, H200, on) for p in cases]
    assert answers == [cute_backend.prefers_cute(p, H200, on) for p in cases]  # repeatable
    expected = [
        (q > 16 and p == 128 and w < 0) or (q <= 16 and w >= 0) for q in (1, 16, 4096) for p in (16, 32, 64, 128) for w in (-1, 511)
    ]  # fmt: skip
    assert answers == expected
    assert not any(cute_backend.prefers_cute(p, A100, on) for p in cases)  # Hopper only


def test_cute_dispatcher_follows_the_rule(monkeypatch):
    _cute_on(monkeypatch)
    assert planning.plan(_problem(), H200).backend == "triton"  # with the class off
    _cute_on(monkeypatch, ("prefill", 16, "global"))
    plan = planning.plan(_problem(), H200)
    assert plan.backend == "cute" and plan.key.backend == "cute" and plan.num_splits == 1
    for other in (_problem(q=1), _problem(page=128), _problem(window=511, extent=512, kv_heads=2)):
        backend, skipped = planning.select_backend(other, H200, None)
        assert backend.name == "triton" and skipped == []  # not preferred: passed over without a warning
    assert planning.plan(_problem(), A100).backend == "triton"
    # preferred, but outside what the kernel runs: Triton, and the reason is reported
    backend, skipped = planning.select_backend(_problem(head_dim=256), H200, None)
    assert backend.name == "triton" and len(skipped) == 1 and "cute: head_dim 256" in skipped[0]
    assert planning.select_backend(_problem(head_dim=64), H200, None)[0].name == "cute"
    # a class switched on with any page size
    _cute_on(monkeypatch, ("prefill", None, "global"))
    assert planning.plan(_problem(page=128), H200).backend == "cute"
    assert planning.plan(_problem(page=48), H200).backend == "cute"


def test_cute_is_not_chosen_for_tensors_it_would_copy_on_every_call(monkeypatch):
    """A rel_logits view whose head stride is no multiple of 8 (rows padded by 4 distances), or
    whose last dimension is strided, would be copied by the CuTe backend on every call: the
    layout says not aligned and the default choice is Triton, without a warning."""
    from inkling_ops.compile_keys import STANDARD_LAYOUT, layout_of

    _cute_on(monkeypatch, ("prefill", 16, "global"))
    case = make_case([4, 1], [40, 17], num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=64, dtype=torch.bfloat16)
    rel = case.rel_logits
    padded = torch.zeros(*rel.shape[:-1], rel.shape[-1] + 4, dtype=rel.dtype)[..., : rel.shape[-1]]
    strided = torch.zeros(*rel.shape[:-1], 2 * rel.shape[-1], dtype=rel.dtype)[..., ::2]
    args = lambda r: RelAttnArgs(case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q, r)  # noqa: E731
    out = torch.empty_like(case.q)
    assert layout_of(args(rel), out) == STANDARD_LAYOUT._replace(slot_stride=128)
    for r in (padded, strided):
        layout = layout_of(args(r), out)
        assert not layout.aligned
        backend, skipped = planning.select_backend(_problem(), H200, None, layout)
        assert backend.name == "triton" and skipped == []
    assert planning.select_backend(_problem(), H200, None, layout_of(args(rel), out))[0].name == "cute"


def test_cute_warmup_of_a_mixed_choice_compiles_each_key_on_its_backend(monkeypatch):
    """With prefill on CuTe and decode on Triton, the dispatcher's keys name both backends and
    warmup(backend=None) hands each key to its own backend."""
    _cute_on(monkeypatch, ("prefill", None, "global"))
    config = ServingConfig(num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=1024, page_size=16, max_num_seqs=4,
                           max_num_batched_tokens=64, max_model_len=4096)  # fmt: skip
    keys = enumerate_compile_keys(config, facts=H200, backend=None)
    by_backend = {name: {k for k in keys if k.backend == name} for name in ("cute", "triton")}
    assert {k.max_seqlen_q_bucket for k in by_backend["cute"]} == {32, 64}
    assert {k.max_seqlen_q_bucket for k in by_backend["triton"]} == {1, 2, 4, 8, 16}
    assert by_backend["cute"] == {k for k in enumerate_compile_keys(config, facts=H200, backend="cute") if k.max_seqlen_q_bucket > 16}
    compiled = []
    for name in ("cute", "triton"):
        monkeypatch.setattr(planning.get_backend(name), "compile", lambda key: compiled.append(key) or [])
    monkeypatch.setattr(strict, "_warmed", {})
    summary = warmup(config, facts=H200, progress=False)
    assert summary.backend == "cute+triton" and sorted(compiled) == sorted(keys) == list(summary.keys)


def _bound_calls(problem_args, *, window_size=(-1, -1)):
    """(what run passes, what the prepared call passes) to the backend's function, on CPU tensors."""
    case = make_case(*problem_args, num_heads=8, num_kv_heads=2, head_dim=128, rel_extent=64, dtype=torch.bfloat16,
                     window_left=window_size[0])  # fmt: skip
    out = torch.empty_like(case.q)
    args = RelAttnArgs(case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q, case.rel_logits)
    problem = check_call(*args, case.max_seqlen_q, case.softmax_scale, list(case.window_size), True, 0, out)
    plan = planning.plan(problem._replace(device_type="cuda"), H200, backend="cute")  # planned as on the GPU
    return case, args, out, problem, plan


def test_cute_prepared_call_passes_what_run_passes(monkeypatch):
    backend = planning.get_backend("cute")
    # a window wider than NO_WINDOW goes in as NO_WINDOW (the kernel's window is an int32)
    for window in (-1, 5, 2**40):
        case, args, out, problem, plan = _bound_calls(([3, 1], [40, 20]), window_size=(window, 0))
        calls = []
        monkeypatch.setitem(backend._by_key, plan.key, lambda *a: calls.append(a))
        backend.run(plan, problem, args, out)
        prepared = backend._prepare(plan, problem, args, out)
        assert prepared is not None
        prepared(args, tuple(t.data_ptr() for t in (*args, out)), out)
        assert len(calls) == 2
        ran, bound = calls
        assert all(a is b for a, b in zip(ran[:8], bound[:8])) and ran[8:] == bound[8:]
        assert bound[:8] == (args.q, args.key_cache, args.value_cache, out, args.block_table, args.cache_seqlens,
                             args.cu_seqlens_q, args.rel_logits)  # fmt: skip
        assert bound[8:] == (case.softmax_scale, window if 0 <= window < cute_backend.NO_WINDOW else cute_backend.NO_WINDOW, 3)
        assert backend.prepare(plan, problem, args, out) is None  # CPU tensors: no prepared launch


def test_cute_grid_bound_is_the_token_count_at_most(monkeypatch):
    """The kernel's max_seqlen_q (an int32, times q_per_kv for the dense grid) is the call's bound
    capped at the token count: a loose but legal bound (2**29 + 1 here, 2**31 - 1) neither
    overflows the grid nor changes it, through run and the prepared call alike."""
    backend = planning.get_backend("cute")
    for loose in (2**29 + 1, 2**31 - 1):
        case, args, out, problem, plan = _bound_calls(([3, 1], [40, 20]), window_size=(-1, 0))
        problem = problem._replace(max_seqlen_q=loose)
        calls = []
        monkeypatch.setitem(backend._by_key, plan.key, lambda *a: calls.append(a))
        backend.run(plan, problem, args, out)
        backend._prepare(plan, problem, args, out)(args, tuple(t.data_ptr() for t in (*args, out)), out)
        assert [c[-1] for c in calls] == [4, 4]  # 4 tokens
    assert problem._replace(max_seqlen_q=2).grid_seqlen_q == 2


def test_cute_prepare_leaves_copies_and_refusals_to_run(monkeypatch):
    backend = planning.get_backend("cute")
    case, args, out, problem, plan = _bound_calls(([2], [30]))
    monkeypatch.setitem(backend._by_key, plan.key, lambda *a: None)
    assert backend._prepare(plan, problem, args, out) is not None

    def misaligned(t):  # same shape and strides, data 2 bytes off a 16-byte boundary
        flat = torch.empty(t.numel() + 1, dtype=t.dtype)[1:]
        return flat.view(t.shape).copy_(t)

    assert backend._prepare(plan, problem, args._replace(q=misaligned(args.q)), out) is None  # run copies q
    assert backend._prepare(plan, problem, args._replace(rel_logits=misaligned(args.rel_logits)), out) is None
    wide = torch.zeros(args.block_table.shape[0], 2 * args.block_table.shape[1], dtype=torch.int32)[:, ::2]
    assert backend._prepare(plan, problem, args._replace(block_table=wide), out) is None  # run copies it
    case, args2, out2, problem2, plan2 = _bound_calls(([3, 1], [40, 20]))  # two requests: strides matter
    monkeypatch.setitem(backend._by_key, plan2.key, lambda *a: None)
    for name in ("cache_seqlens", "cu_seqlens_q"):  # a column of a wider tensor: run copies it
        column = torch.zeros(getattr(args2, name).shape[0], 2, dtype=torch.int32)[:, 0]
        assert backend._prepare(plan2, problem2, args2._replace(**{name: column}), out2) is None
    assert backend._prepare(plan, problem, args, misaligned(out)) is None  # run refuses it


def test_cute_run_passes_packed_index_tensors(monkeypatch):
    """Index tensors that are strided views (valid input) reach the kernel as packed copies with
    the same values: the kernel reads them with unit stride."""
    backend = planning.get_backend("cute")
    case, args, out, problem, plan = _bound_calls(([3, 1], [40, 20]))
    calls = []
    monkeypatch.setitem(backend._by_key, plan.key, lambda *a: calls.append(a))

    def strided(t):  # every other element of a tensor twice as wide
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]

    views = args._replace(block_table=strided(args.block_table), cache_seqlens=strided(args.cache_seqlens),
                          cu_seqlens_q=strided(args.cu_seqlens_q))  # fmt: skip
    backend.run(plan, problem, views, out)
    (passed,) = calls
    for got, want in zip(passed[4:7], (args.block_table, args.cache_seqlens, args.cu_seqlens_q)):
        assert got.stride(-1) == 1 and torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(why_no_cute_device() is not None, reason=str(why_no_cute_device()))
def test_cute_repeated_eager_calls_take_the_prepared_call_and_stay_correct():
    """The second call of a signature goes through the call cache's prepared launch (new data,
    same metadata); a misaligned q with the same shapes takes run() (copied), and both match the
    reference."""
    import inkling_ops
    from inkling_ops import call_cache

    call_cache.clear()
    case = make_case([37, 1], [300, 90], num_heads=8, num_kv_heads=1, head_dim=128, rel_extent=64, dtype=torch.bfloat16,
                     device="cuda", extra_tokens=3)  # fmt: skip
    n = sum(case.q_lens)
    for step in range(3):
        case.q.copy_(torch.randn_like(case.q))
        out = torch.zeros_like(case.q)
        inkling_ops.rel_attn(*case.args(), **case.kwargs(), backend="cute", out=out)
        torch.testing.assert_close(out[:n].float(), case.reference_fp32()[:n], atol=2e-2, rtol=2e-2)
    entries = [e for bucket in call_cache._ENTRIES.values() for e in bucket if e.backend.name == "cute"]
    assert len(entries) == 1 and entries[0].prepared is not None
    flat = torch.empty(case.q.numel() + 8, dtype=case.q.dtype, device="cuda")[1:]
    q = flat[: case.q.numel()].view(case.q.shape).copy_(case.q)  # 2 bytes off a 16-byte boundary
    out = torch.zeros_like(case.q)
    inkling_ops.rel_attn(q, case.key_cache, case.value_cache, **case.kwargs(), backend="cute", out=out)
    torch.testing.assert_close(out[:n].float(), case.reference_fp32()[:n], atol=2e-2, rtol=2e-2)
    misaligned = [e for bucket in call_cache._ENTRIES.values() for e in bucket if e.backend.name == "cute" and e.prepared is None]
    assert len(misaligned) == 1


def test_cute_default_choice_passes_misaligned_calls_to_triton(monkeypatch):
    """A preferred class with tensors off 16-byte alignment goes to Triton (which has unaligned
    variants) without a warning; asked for by name, cute still takes it (its run() copies or refuses)."""
    from inkling_ops.compile_keys import KVLayout

    _cute_on(monkeypatch, ("prefill", 16, "global"))
    assert planning.plan(_problem(), H200).backend == "cute"
    misaligned = KVLayout(True, True, 0, False)
    backend, skipped = planning.select_backend(_problem(), H200, None, misaligned)
    assert backend.name == "triton" and skipped == []
    assert planning.plan(_problem(), H200, layout=misaligned).backend == "triton"
    assert planning.plan(_problem(), H200, "cute", layout=misaligned).backend == "cute"


def test_cute_run_refuses_a_misaligned_cache_before_compiling_anything(monkeypatch):
    backend = planning.get_backend("cute")
    case, args, out, problem, plan = _bound_calls(([3, 1], [40, 20]))
    monkeypatch.setattr(backend, "_run_function", lambda *a: pytest.fail("compiled or loaded a kernel it cannot run"))
    flat = torch.empty(args.key_cache.numel() + 1, dtype=args.key_cache.dtype)[1:]
    k = flat.view(args.key_cache.shape).copy_(args.key_cache)  # 2 bytes off a 16-byte boundary
    with pytest.raises(ValueError, match="backend 'cute' needs key_cache 16-byte aligned"):
        backend.run(plan, problem, args._replace(key_cache=k), out)


def test_grids_past_cudas_limits_are_refused_by_name_not_launched():
    """CUDA allows 65535 blocks in a grid's y and z: Triton's forward puts requests x KV heads in
    z and the splits in y, CuTe's dense grid the requests in z. Such calls are declared
    unsupported (the dispatcher then warns and runs another backend; forced, a clear error)
    instead of failing at launch."""
    triton_backend = planning.get_backend("triton")
    many = _problem(q=4096, kv_heads=16)._replace(num_heads=64, num_reqs=4096, max_seqlen_q=1, num_tokens=4096)
    assert "4096 requests x 16 KV heads = 65536 programs" in triton_backend.why_not(many, H200)
    assert triton_backend.why_not(many._replace(num_reqs=4095), H200) is None
    assert "num_splits 70000" in triton_backend.why_not(_problem()._replace(num_splits=70000), H200)
    chosen, skipped = planning.select_backend(many, H200, None)  # the dispatcher warns with these reasons
    assert chosen.name == "reference" and any("triton: 4096 requests x 16 KV heads" in r for r in skipped)
    cute = planning.get_backend("cute")
    decodes = _problem(q=70000)._replace(num_reqs=70000, max_seqlen_q=1)
    assert "70000 requests on its dense grid" in cute.why_not(decodes, H200)
    chunks = decodes._replace(max_seqlen_q=512)  # the compact grid: blocks along x
    assert cute_backend.compact_grid(chunks) and cute.why_not(chunks, H200) is None
