"""Golden tests: the registered schemas and the exported graph, pinned character for character.

A change to the op's contract (argument names, order, defaults, kw-only marker, aliasing) or to
how it appears in an exported graph fails here loudly. If the change is intended, re-accept the
expected strings (expecttest rewrites the literals below in place), review the diff, and commit:

    EXPECTTEST_ACCEPT=1 PYTHONPATH=. python -m pytest tests/test_golden.py -q

(expecttest leaves the previous file as tests/test_golden.py.bak: delete it, don't commit it.)

Note that PyTorch prints the default ``int[2] window_size=[-1, -1]`` as ``window_size=-1``.
"""

from __future__ import annotations

import pytest
import torch

import inkling_ops
from inkling_ops.testing import make_case

# a dependency of the package's test extra (CI has it); the GPU machine has none, and a missing
# module there should skip these CPU tests by name, not fail the collection of the whole run
expecttest = pytest.importorskip("expecttest", reason="expecttest is not installed (pip install expecttest)")

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, REL_EXTENT = 4, 2, 32, 16


def _normalize(code: str) -> str:
    """Drop trailing whitespace on each line and blank lines at both ends."""
    return "\n".join(line.rstrip() for line in code.strip("\n").splitlines()).strip("\n")


def _golden(ep: torch.export.ExportedProgram) -> str:
    """The graph's code, then its inputs' shapes and the ranges of their symbols.

    Symbols are renamed s0, s1, ... in order of first appearance (PyTorch's own names are hashes).
    """
    names: dict[str, str] = {}

    def sym(x) -> str:
        if isinstance(x, torch.SymInt):
            key = str(x.node.expr)
            return names.setdefault(key, f"s{len(names)}")
        return str(x)

    lines = [_normalize(ep.graph_module.code), "", "# inputs"]
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta["val"]
        if isinstance(val, torch.Tensor):
            dtype = str(val.dtype).removeprefix("torch.")
            lines.append(f"{node.name}: {dtype}[{', '.join(sym(d) for d in val.shape)}]")
        else:
            lines.append(f"{node.name}: Sym({sym(val)})")
    lines.append("# ranges")
    for symbol, vr in ep.range_constraints.items():
        lines.append(f"{names.get(str(symbol), str(symbol))}: [{vr.lower}, {vr.upper}]")
    return "\n".join(lines)


class SlidingRelAttention(torch.nn.Module):
    """rel_logits from a projection, then the op with a (7, 0) window."""

    def __init__(self):
        super().__init__()
        self.rel_proj = torch.nn.Linear(HEAD_DIM, REL_EXTENT)

    def forward(self, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q: int):
        rel_logits = self.rel_proj(q)
        return inkling_ops.rel_attn(
            q,
            key_cache,
            value_cache,
            block_table=block_table,
            cache_seqlens=cache_seqlens,
            cu_seqlens_q=cu_seqlens_q,
            rel_logits=rel_logits,
            max_seqlen_q=max_seqlen_q,
            window_size=(7, 0),
        )


class IntoBuffer(torch.nn.Module):
    """The out variant, writing into a caller-provided buffer."""

    def forward(self, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, out, max_seqlen_q: int):  # fmt: skip
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
        return out


def _case():
    return make_case([5, 1], [40, 9], num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM, rel_extent=REL_EXTENT)  # fmt: skip


def _dynamic(names_with_tokens, names_static):
    tokens = torch.export.Dim("num_tokens", min=2, max=1 << 14)
    shapes = {name: {0: tokens} for name in names_with_tokens}
    shapes.update({name: None for name in names_static})
    shapes["max_seqlen_q"] = torch.export.Dim.DYNAMIC
    return shapes


class TestGolden(expecttest.TestCase):
    def test_rel_attn_schema(self):
        self.assertExpectedInline(
            str(torch.ops.inkling.rel_attn.default._schema),
            """inkling::rel_attn(Tensor q, Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor cache_seqlens, Tensor cu_seqlens_q, Tensor rel_logits, *, SymInt max_seqlen_q, float softmax_scale, int[2] window_size=-1, bool causal=True, int num_splits=0, str? backend=None) -> Tensor""",
        )

    def test_rel_attn_out_schema(self):
        self.assertExpectedInline(
            str(torch.ops.inkling.rel_attn_out.default._schema),
            """inkling::rel_attn_out(Tensor q, Tensor key_cache, Tensor value_cache, Tensor block_table, Tensor cache_seqlens, Tensor cu_seqlens_q, Tensor rel_logits, *, SymInt max_seqlen_q, float softmax_scale, int[2] window_size=-1, bool causal=True, int num_splits=0, str? backend=None, Tensor(a!) out) -> ()""",
        )

    def test_exported_graph(self):
        case = _case()
        args = (case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q, case.max_seqlen_q)  # fmt: skip
        dynamic_shapes = _dynamic(["q"], ["key_cache", "value_cache", "block_table", "cache_seqlens", "cu_seqlens_q"])
        torch.manual_seed(0)
        with torch.no_grad():
            ep = torch.export.export(SlidingRelAttention().eval(), args, dynamic_shapes=dynamic_shapes)
        self.assertExpectedInline(
            _golden(ep),
            """\
def forward(self, p_rel_proj_weight, p_rel_proj_bias, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q):
    linear = torch.ops.aten.linear.default(q, p_rel_proj_weight, p_rel_proj_bias);  p_rel_proj_weight = p_rel_proj_bias = None
    rel_attn = torch.ops.inkling.rel_attn.default(q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, linear, max_seqlen_q = max_seqlen_q, softmax_scale = 0.03125, window_size = [7, 0]);  q = key_cache = value_cache = block_table = cache_seqlens = cu_seqlens_q = linear = max_seqlen_q = None
    return (rel_attn,)

# inputs
p_rel_proj_weight: float32[16, 32]
p_rel_proj_bias: float32[16]
q: float32[s0, 4, 32]
key_cache: float32[7, 16, 2, 32]
value_cache: float32[7, 16, 2, 32]
block_table: int32[2, 4]
cache_seqlens: int32[2]
cu_seqlens_q: int32[3]
max_seqlen_q: Sym(s1)
# ranges
s0: [2, 16384]
s1: [1, int_oo]""",
        )

    def test_exported_graph_out_variant(self):
        case = _case()
        args = (
            case.q, case.key_cache, case.value_cache, case.block_table, case.cache_seqlens, case.cu_seqlens_q,
            case.rel_logits, torch.zeros_like(case.q), case.max_seqlen_q,
        )  # fmt: skip
        dynamic_shapes = _dynamic(
            ["q", "rel_logits", "out"], ["key_cache", "value_cache", "block_table", "cache_seqlens", "cu_seqlens_q"]
        )
        with torch.no_grad():
            ep = torch.export.export(IntoBuffer(), args, dynamic_shapes=dynamic_shapes)
        self.assertExpectedInline(
            _golden(ep),
            """\
def forward(self, q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, out, max_seqlen_q):
    rel_attn_out = torch.ops.inkling.rel_attn_out.default(q, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, rel_logits, max_seqlen_q = max_seqlen_q, softmax_scale = 0.03125, out = out);  q = key_cache = value_cache = block_table = cache_seqlens = cu_seqlens_q = rel_logits = max_seqlen_q = rel_attn_out = None
    return (out,)

# inputs
q: float32[s0, 4, 32]
key_cache: float32[7, 16, 2, 32]
value_cache: float32[7, 16, 2, 32]
block_table: int32[2, 4]
cache_seqlens: int32[2]
cu_seqlens_q: int32[3]
rel_logits: float32[s0, 4, 16]
out: float32[s0, 4, 32]
max_seqlen_q: Sym(s1)
# ranges
s0: [2, 16384]
s1: [1, int_oo]""",
        )


if __name__ == "__main__":
    import unittest

    unittest.main()
