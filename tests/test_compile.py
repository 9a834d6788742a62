"""Compiler integration of torch.ops.inkling.rel_attn / rel_attn_out, all on CPU.

- ``torch.library.opcheck`` (schema, autograd registration, fake tensor, AOT dispatch) on many shapes;
- ``torch.compile(fullgraph=True)`` of a module calling the op: no graph breaks, same output as eager,
  with the default (inductor) backend and with counting backends for recompiles;
- recompile counts when the token count varies step to step, as in a serving engine;
- ``torch.export`` with a dynamic token count, and a save/load round trip;
- inputs that require grad under torch.compile raise the op's inference-only error.

Inductor compiles are slow, so only the test whose point is inductor uses it; the others use
``aot_eager`` (real AOT tracing through the fake implementation, eager kernels), which keeps
outputs bitwise equal to eager.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import inkling_ops
from inkling_ops.testing import RelAttnCase, make_case

HIDDEN = 24
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 32
REL_EXTENT = 16
# One prefill chunk of n - 1 tokens plus one decode token, against KV lengths that stay fixed so the
# cache and block-table shapes do not change between steps (as in a serving engine).
KV_LENS = [80, 37]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# --------------------------------------------------------------------------------------------------
# opcheck
# --------------------------------------------------------------------------------------------------

OPCHECK_CASES = {
    "decode-b4-gqa8-page16-fp32": dict(q_lens=[1, 1, 1, 1], kv_lens=[5, 17, 33, 64], num_heads=8, num_kv_heads=1),
    "decode-specdec-q9-gqa4-bf16": dict(
        q_lens=[9, 9, 3], kv_lens=[9, 100, 20], num_heads=8, num_kv_heads=2, dtype=torch.bfloat16
    ),
    "ragged-prefill-gqa2-page64-bf16": dict(
        q_lens=[7, 1, 12], kv_lens=[7, 30, 50], num_heads=4, num_kv_heads=2, page_size=64, dtype=torch.bfloat16
    ),
    "window7-gqa4-page16-E8": dict(
        q_lens=[9, 4], kv_lens=[40, 20], num_heads=8, num_kv_heads=2, window_left=7, rel_extent=8
    ),
    "window31-E128-gqa8-page16-bf16": dict(
        q_lens=[5, 2], kv_lens=[70, 2], num_heads=8, num_kv_heads=1, window_left=31, rel_extent=128,
        dtype=torch.bfloat16,
    ),
    "mha-gqa1-page128": dict(q_lens=[3, 5], kv_lens=[130, 5], num_heads=2, num_kv_heads=2, page_size=128),
    "packed-kv-gqa2-fp32": dict(q_lens=[4, 1, 6], kv_lens=[20, 9, 6], num_heads=4, num_kv_heads=2, packed_kv=True),
    "packed-kv-gqa4-page16-bf16": dict(
        q_lens=[2, 3], kv_lens=[33, 3], num_heads=4, num_kv_heads=1, packed_kv=True, dtype=torch.bfloat16
    ),
    "extra-rows-past-cu-seqlens": dict(q_lens=[3, 2], kv_lens=[10, 18], extra_tokens=5),
    "empty-request-qlen0": dict(q_lens=[0, 3, 0], kv_lens=[4, 9, 1]),
    "zero-tokens-zero-requests": dict(q_lens=[], kv_lens=[]),
}


def _op_args(case: RelAttnCase) -> tuple[tuple, dict]:
    args = (
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits,
    )  # fmt: skip
    kwargs = dict(max_seqlen_q=case.max_seqlen_q, softmax_scale=case.softmax_scale, window_size=list(case.window_size))
    return args, kwargs


@pytest.mark.parametrize("op_name", ["rel_attn", "rel_attn_out"])
@pytest.mark.parametrize("case_id", list(OPCHECK_CASES))
def test_opcheck(case_id, op_name):
    params = dict(OPCHECK_CASES[case_id])
    case = make_case(params.pop("q_lens"), params.pop("kv_lens"), **params)
    if case_id.startswith("packed-kv"):
        assert not case.key_cache.is_contiguous()  # really strided views of one packed tensor
    args, kwargs = _op_args(case)
    op = getattr(torch.ops.inkling, op_name).default
    if op_name == "rel_attn_out":
        kwargs["out"] = torch.full_like(case.q, 3.0)
    result = torch.library.opcheck(op, args, kwargs)
    assert set(result) == {"test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"}
    assert all(v == "SUCCESS" for v in result.values()), result


# --------------------------------------------------------------------------------------------------
# A module calling the op, and serving-like inputs
# --------------------------------------------------------------------------------------------------


class TinyRelAttention(torch.nn.Module):
    """q and the paged KV cache are given; rel_logits come from the hidden states, as in Inkling."""

    def __init__(self, window_left: int = -1):
        super().__init__()
        self.window_size = (window_left, 0) if window_left >= 0 else (-1, -1)
        self.rel_proj = torch.nn.Linear(HIDDEN, NUM_HEADS * REL_EXTENT)
        self.o_proj = torch.nn.Linear(NUM_HEADS * HEAD_DIM, HIDDEN)

    def forward(
        self,
        hidden: torch.Tensor,
        q: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        block_table: torch.Tensor,
        cache_seqlens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        max_seqlen_q: int,
    ) -> torch.Tensor:
        rel_logits = self.rel_proj(hidden).view(hidden.shape[0], NUM_HEADS, REL_EXTENT)
        attn = inkling_ops.rel_attn(
            q,
            key_cache,
            value_cache,
            block_table=block_table,
            cache_seqlens=cache_seqlens,
            cu_seqlens_q=cu_seqlens_q,
            rel_logits=rel_logits,
            max_seqlen_q=max_seqlen_q,
            window_size=self.window_size,
        )
        return self.o_proj(attn.flatten(1))


def _module(window_left: int = -1) -> TinyRelAttention:
    torch.manual_seed(0)
    return TinyRelAttention(window_left).eval()


def _step(num_tokens: int, seed: int = 0) -> tuple:
    """Module inputs for one engine step: a chunk of num_tokens - 1 prefill rows plus one decode row.

    max_seqlen_q (num_tokens - 1) varies with the token count; cache and block-table shapes do not.
    """
    assert num_tokens >= 3, "keeps max_seqlen_q >= 2 (dynamo specializes ints 0 and 1)"
    case = make_case(
        [num_tokens - 1, 1], KV_LENS, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
        rel_extent=REL_EXTENT, generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    hidden = torch.randn(num_tokens, HIDDEN, generator=torch.Generator().manual_seed(seed + 1))
    return (
        hidden, case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.max_seqlen_q,
    )  # fmt: skip


# Distinct token counts, all >= 3 (so max_seqlen_q = n - 1 >= 2), revisiting some sizes at the end.
TOKEN_SWEEP = [3, 4, 6, 9, 17, 30, 47, 64, 5, 12, 3, 64]


# --------------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------------


def test_explain_single_graph_no_breaks():
    module = _module()
    with torch.no_grad():
        explanation = torch._dynamo.explain(module)(*_step(9))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    (graph,) = explanation.graphs
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    assert torch.ops.inkling.rel_attn.default in targets


def test_inductor_fullgraph_matches_eager():
    """The default backend (inductor, C++ codegen on CPU) around the op; the op runs as an extern call."""
    module = _module()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    with torch.inference_mode():
        for n in (5, 9, 17):
            args = _step(n, seed=n)
            torch.testing.assert_close(compiled(*args), module(*args), rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 2  # static first call, then one dynamic recompile


def test_default_backend_window_fullgraph_matches_eager():
    """Plain ``torch.compile(..., fullgraph=True)`` (no backend argument) on a sliding-window module."""
    module = _module(window_left=7)
    compiled = torch.compile(module, fullgraph=True)
    with torch.no_grad():
        args = _step(12)
        torch.testing.assert_close(compiled(*args), module(*args), rtol=1e-5, atol=1e-5)


def test_token_count_sweep_recompiles_once():
    """A serving engine varies the token count (and max_seqlen_q with it) every step.

    Automatic dynamic shapes make the token dim and max_seqlen_q symbolic at the second distinct size:
    exactly 2 frames (1 recompile) for the whole sweep, and every output bitwise equals eager.
    """
    module = _module()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    frames = []
    with torch.no_grad():
        for i, n in enumerate(TOKEN_SWEEP):
            args = _step(n, seed=i)
            assert torch.equal(compiled(*args), module(*args)), n
            frames.append(counter.frame_count)
    assert len(set(TOKEN_SWEEP)) >= 8
    assert frames == [1] + [2] * (len(TOKEN_SWEEP) - 1)
    # The second graph is the dynamic one: the token count and max_seqlen_q are graph inputs (SymInts).
    placeholders = [n for n in counter.graphs[-1].graph.nodes if n.op == "placeholder"]
    sym_inputs = [n for n in placeholders if isinstance(n.meta.get("example_value"), torch.SymInt)]
    assert len(sym_inputs) >= 2, [n.name for n in placeholders]


def test_decode_batch_sweep_recompiles_once():
    """Decode steps with a varying number of requests (block table rows, cu_seqlens_q, ...): 1 recompile."""
    pool = make_case(
        [1] * 24, [(7 * b) % 61 + 1 for b in range(24)], num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM, rel_extent=REL_EXTENT,
    )  # fmt: skip
    hidden = torch.randn(24, HIDDEN, generator=torch.Generator().manual_seed(1))
    module = _module()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    batches = [2, 3, 5, 8, 13, 21, 24, 4, 7]
    with torch.no_grad():
        for b in batches:
            args = (
                hidden[:b], pool.q[:b], pool.key_cache, pool.value_cache, pool.block_table[:b],
                pool.cache_seqlens[:b], pool.cu_seqlens_q[: b + 1], 1,
            )  # fmt: skip
            assert torch.equal(compiled(*args), module(*args)), b
    assert counter.frame_count == 2


def _marked_sweep(max_seqlen_q_fixed: int | None) -> int:
    module = _module()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(module, backend=counter, fullgraph=True)
    with torch.no_grad():
        for i, n in enumerate(TOKEN_SWEEP):
            args = list(_step(n, seed=i))
            torch._dynamo.mark_dynamic(args[0], 0)  # hidden
            torch._dynamo.mark_dynamic(args[1], 0)  # q
            if max_seqlen_q_fixed is not None:
                args[-1] = max_seqlen_q_fixed  # an upper bound is a valid max_seqlen_q
            assert torch.equal(compiled(*args), module(*args)), n
    return counter.frame_count


def test_mark_dynamic_tokens_with_static_max_seqlen_q_never_recompiles():
    """Token dim marked dynamic up front, max_seqlen_q passed as a fixed bound: 1 frame, 0 recompiles."""
    assert _marked_sweep(max_seqlen_q_fixed=128) == 1


def test_mark_dynamic_tokens_and_dynamic_max_seqlen_q_never_recompiles():
    """Token dim marked dynamic and max_seqlen_q declared dynamic (an int: via dynamic_sources): 0 recompiles."""
    with torch.compiler.config.patch(dynamic_sources="L['max_seqlen_q']"):
        assert _marked_sweep(max_seqlen_q_fixed=None) == 1


def test_mark_dynamic_tokens_only_still_recompiles_once_for_the_int():
    """mark_dynamic covers tensors only: a varying max_seqlen_q int still costs exactly one recompile."""
    assert _marked_sweep(max_seqlen_q_fixed=None) == 2


def _attend_into(q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, out, max_seqlen_q):
    inkling_ops.rel_attn(
        q,
        key_cache,
        value_cache,
        block_table=block_table,
        cache_seqlens=cache_seqlens,
        cu_seqlens_q=cu_seqlens_q,
        rel_logits=rel_logits,
        max_seqlen_q=max_seqlen_q,
        out=out,
    )
    return out.sum(dim=-1)


def test_out_variant_fullgraph_no_breaks_matches_eager():
    case = make_case([5, 1], KV_LENS, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, extra_tokens=3)
    inputs = (
        case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
        case.rel_logits,
    )  # fmt: skip
    with torch.no_grad():
        explanation = torch._dynamo.explain(_attend_into)(*inputs, torch.zeros_like(case.q), case.max_seqlen_q)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1
        targets = [n.target for n in explanation.graphs[0].graph.nodes if n.op == "call_function"]
        assert torch.ops.inkling.rel_attn_out.default in targets

        torch._dynamo.reset()
        counter = CompileCounterWithBackend("aot_eager")
        compiled = torch.compile(_attend_into, backend=counter, fullgraph=True)
        eager_buf = torch.full_like(case.q, 7.0)
        compiled_buf = torch.full_like(case.q, 7.0)
        expected = _attend_into(*inputs, eager_buf, case.max_seqlen_q)
        got = compiled(*inputs, compiled_buf, case.max_seqlen_q)
    assert counter.frame_count == 1
    assert torch.equal(got, expected)
    assert torch.equal(compiled_buf, eager_buf)  # the mutation of the caller's buffer survives compilation
    assert torch.all(compiled_buf[6:] == 7.0)  # rows past cu_seqlens_q[-1] untouched
    assert not torch.all(compiled_buf[:6] == 7.0)


# --------------------------------------------------------------------------------------------------
# requires_grad under torch.compile
# --------------------------------------------------------------------------------------------------

INFERENCE_ONLY = r"inkling::rel_attn is inference-only .*argument '{}' requires grad"


@pytest.mark.parametrize("variant", ["functional", "out"])
def test_requires_grad_input_under_compile_raises(variant):
    case = make_case([4], [9])
    q = case.q.clone().requires_grad_(True)

    def fn(q, key_cache, value_cache):
        out = torch.empty_like(q) if variant == "out" else None
        return inkling_ops.rel_attn(q, key_cache, value_cache, **case.kwargs(), out=out)

    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=INFERENCE_ONLY.format("q")):
        compiled(q, case.key_cache, case.value_cache)


def test_module_with_trainable_projection_outside_no_grad_raises():
    """rel_logits from a Linear with trainable weights require grad when grad mode is on."""
    compiled = torch.compile(_module(), backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=INFERENCE_ONLY.format("rel_logits")):
        compiled(*_step(6))
    with torch.no_grad():  # and the same call is fine without grad mode
        assert compiled(*_step(6)).shape == (6, HIDDEN)


# --------------------------------------------------------------------------------------------------
# torch.export
# --------------------------------------------------------------------------------------------------


def _export(module: torch.nn.Module, num_tokens: int = 9) -> torch.export.ExportedProgram:
    tokens = torch.export.Dim("num_tokens", min=2, max=1 << 14)
    dynamic_shapes = {
        "hidden": {0: tokens},
        "q": {0: tokens},
        "key_cache": None,
        "value_cache": None,
        "block_table": None,
        "cache_seqlens": None,
        "cu_seqlens_q": None,
        "max_seqlen_q": torch.export.Dim.DYNAMIC,  # ints cannot take a named Dim
    }
    with torch.no_grad():
        return torch.export.export(module, _step(num_tokens), dynamic_shapes=dynamic_shapes)


def test_export_dynamic_tokens_contains_op():
    ep = _export(_module())
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.inkling.rel_attn.default) == 1
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    q_tokens = placeholders["q"].meta["val"].shape[0]
    assert isinstance(q_tokens, torch.SymInt)  # the token count stayed symbolic
    assert isinstance(placeholders["max_seqlen_q"].meta["val"], torch.SymInt)


def test_export_save_load_roundtrip_bitwise(tmp_path):
    module = _module(window_left=11)
    ep = _export(module)
    path = tmp_path / "tiny_rel_attention.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    assert torch.ops.inkling.rel_attn.default in [n.target for n in loaded.graph.nodes]
    with torch.no_grad():
        for n in (3, 9, 40):  # 9 is the export example; 3 and 40 are other sizes
            args = _step(n, seed=100 + n)
            expected = module(*args)
            assert torch.equal(loaded.module()(*args), expected), n
            assert torch.equal(ep.module()(*args), expected), n


def test_steps_share_cache_and_table_shapes():
    """The recompile counts above rely on steps differing only in token count and max_seqlen_q."""
    small, large = _step(3), _step(64)
    for i in (2, 3, 4, 5, 6):  # key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q
        assert small[i].shape == large[i].shape
    assert (small[1].shape[0], small[-1]) == (3, 2) and (large[1].shape[0], large[-1]) == (64, 63)


# --------------------------------------------------------------------------------------------------
# meta tensors and torch.fx symbolic tracing through the Python API
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["api", "api_out", "compat"])
def test_meta_tensors_take_the_fake_implementation(entry):
    """A call whose tensors are all on the meta device (shape inference, meta-device model init)
    returns a meta tensor of q's shape through every entry point, as ``torch.ops`` does; the API's
    direct path (CPU and CUDA only) must not take it and then find no backend for 'meta'."""
    from inkling_ops.compat import inkling_fa4_rel_attention

    case = make_case([3, 1], [20, 9], num_heads=4, num_kv_heads=2, head_dim=32).to("meta")
    kwargs = dict(
        block_table=case.block_table, cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
        rel_logits=case.rel_logits, max_seqlen_q=case.max_seqlen_q, softmax_scale=case.softmax_scale,
    )  # fmt: skip
    if entry == "compat":
        got = inkling_fa4_rel_attention(
            case.q, case.key_cache, case.value_cache, causal=True, window_size=(-1, -1),
            rel_extent=case.rel_logits.shape[-1], **kwargs,
        )  # fmt: skip
    elif entry == "api_out":
        out = torch.empty_like(case.q)
        got = inkling_ops.rel_attn(case.q, case.key_cache, case.value_cache, out=out, **kwargs)
        assert got is out
    else:
        got = inkling_ops.rel_attn(case.q, case.key_cache, case.value_cache, **kwargs)
    assert got.device.type == "meta" and got.shape == case.q.shape and got.dtype == case.q.dtype
    want = torch.ops.inkling.rel_attn(*_op_args(case)[0], **_op_args(case)[1])
    assert want.device.type == "meta" and want.shape == got.shape


def test_symbolic_trace_records_the_op():
    """``torch.fx.symbolic_trace`` of a module calling ``inkling_ops.rel_attn`` records the op
    (the API's argument kind checks are left to the op when the arguments are Proxies), and the
    traced module computes what the module does."""
    case = make_case([3, 1], [20, 9], num_heads=4, num_kv_heads=2, head_dim=32)

    class Attn(torch.nn.Module):
        def forward(self, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits):
            return inkling_ops.rel_attn(
                q, key_cache, value_cache, block_table=block_table, cache_seqlens=cache_seqlens,
                cu_seqlens_q=cu_seqlens_q, rel_logits=rel_logits, max_seqlen_q=3, softmax_scale=1 / 32,
            )  # fmt: skip

    traced = torch.fx.symbolic_trace(Attn())
    assert any(node.target is torch.ops.inkling.rel_attn.default for node in traced.graph.nodes)
    args = _op_args(case)[0]
    torch.testing.assert_close(traced(*args), Attn()(*args), rtol=0, atol=0)


def test_symbolic_trace_needs_softmax_scale():
    """Under symbolic tracing the default scale (1 / head_dim) cannot be read from a Proxy: the
    call says so by naming the argument instead of failing inside torch.fx."""

    class Attn(torch.nn.Module):
        def forward(self, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits):
            return inkling_ops.rel_attn(
                q, key_cache, value_cache, block_table=block_table, cache_seqlens=cache_seqlens,
                cu_seqlens_q=cu_seqlens_q, rel_logits=rel_logits, max_seqlen_q=3,
            )  # fmt: skip

    with pytest.raises(TypeError, match="argument 'softmax_scale' is None; under torch.fx symbolic tracing"):
        torch.fx.symbolic_trace(Attn())
