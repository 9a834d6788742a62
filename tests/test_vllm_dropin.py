"""vLLM's Inkling decoder layer with our op: the whole layer (projections, the new tokens' K/V
written into the paged cache, ``inkling_fa4_rel_attention`` into a preallocated ``out``, the output
projection) compiles with ``fullgraph=True`` and, on CUDA, is captured, attention included, in one
CUDA graph that replays with new lengths and block tables. This is what lets vLLM's model drop
``@eager_break_during_capture`` (docs/vllm.md)."""

from __future__ import annotations

import pytest
import torch

from inkling_ops.compat import bucket_max_seqlen_q, inkling_fa4_rel_attention
from inkling_ops.testing import make_case


class DecoderAttention(torch.nn.Module):
    """Inkling's attention sublayer as vLLM runs it: q/k/v/relative projections of the step's
    tokens, their K/V scattered into the paged cache at ``slot_mapping``, our op into ``out``."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, extent: int, window: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.extent, self.window = heads, kv_heads, head_dim, extent, window
        self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.rel = torch.nn.Linear(hidden, heads * extent, bias=False)
        self.o_proj = torch.nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, x, key_cache, value_cache, slot_mapping, block_table, cache_seqlens, cu_seqlens_q, out,
                max_seqlen_q: int):  # fmt: skip
        t = x.shape[0]
        q, k, v = self.qkv(x).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                     self.kv_heads * self.head_dim], dim=-1)  # fmt: skip
        q = torch.nn.functional.rms_norm(q.view(t, self.heads, self.head_dim), (self.head_dim,))
        k = torch.nn.functional.rms_norm(k.view(t, self.kv_heads, self.head_dim), (self.head_dim,))
        key_cache.view(-1, self.kv_heads, self.head_dim).index_copy_(0, slot_mapping, k)
        value_cache.view(-1, self.kv_heads, self.head_dim).index_copy_(0, slot_mapping, v.view(t, self.kv_heads, -1))
        inkling_fa4_rel_attention(
            q, key_cache, value_cache, block_table=block_table, cache_seqlens=cache_seqlens,
            cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, softmax_scale=1.0 / self.head_dim, causal=True,
            window_size=(self.window, 0) if self.window >= 0 else (-1, -1), rel_extent=self.extent,
            rel_logits=self.rel(x).view(t, self.heads, self.extent), out=out,
        )  # fmt: skip
        return self.o_proj(out.flatten(1))


def _step(device, dtype, *, window=-1, seed=0):
    """A layer and one step's inputs: 3 requests (a prefill chunk, two decodes), page 16."""
    torch.manual_seed(seed)
    layer = DecoderAttention(64, 8, 2, 32, 16, window).to(device=device, dtype=dtype)
    case = make_case(q_lens=[9, 1, 1], kv_lens=[40, 23, 60], num_heads=8, num_kv_heads=2, head_dim=32, rel_extent=16,
                     window_left=window, dtype=dtype, device=device, spare_blocks=0, extra_table_cols=0)  # fmt: skip
    page = case.key_cache.shape[1]
    slots = []
    for b, (q_len, kv_len) in enumerate(zip(case.q_lens, case.kv_lens)):
        for pos in range(kv_len - q_len, kv_len):  # the new tokens' cache slots
            slots.append(int(case.block_table[b, pos // page]) * page + pos % page)
    inputs = dict(
        x=torch.randn(case.q.shape[0], 64, device=device, dtype=dtype), key_cache=case.key_cache.clone(),
        value_cache=case.value_cache.clone(), slot_mapping=torch.tensor(slots, device=device),
        block_table=case.block_table, cache_seqlens=case.cache_seqlens, cu_seqlens_q=case.cu_seqlens_q,
        out=torch.zeros_like(case.q), max_seqlen_q=bucket_max_seqlen_q(max(case.q_lens)),
    )  # fmt: skip
    return layer, inputs


@pytest.mark.parametrize("window", [-1, 15], ids=["global", "sliding"])
def test_decoder_layer_compiles_fullgraph_and_matches_eager(window):
    torch._dynamo.reset()
    layer, inputs = _step("cpu", torch.float32, window=window)
    with torch.inference_mode():
        eager_inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        expected = layer(**eager_inputs)
        explanation = torch._dynamo.explain(layer)(**{k: v.clone() if isinstance(v, torch.Tensor) else v
                                                      for k, v in inputs.items()})  # fmt: skip
        assert explanation.graph_break_count == 0, explanation.break_reasons
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        got = compiled(**inputs)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(inputs["key_cache"], eager_inputs["key_cache"], equal_nan=True)  # the same K/V written as eager


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_decoder_layer_in_one_cuda_graph_with_changing_metadata():
    """The compiled layer captured in one CUDA graph (attention included), replayed after the
    lengths and block tables change in place; each replay equals an eager run of the same step."""
    torch._dynamo.reset()
    layer, inputs = _step("cuda", torch.bfloat16)
    # make_case leaves NaN / inf in the slots past each request's length; the replays below grow
    # the lengths into them and move the pages, so every slot must hold a finite value here
    for name in ("key_cache", "value_cache"):
        inputs[name].nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    compiled = torch.compile(layer, fullgraph=True)
    with torch.inference_mode():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                compiled(**inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            result = compiled(**inputs)
        gen = torch.Generator().manual_seed(1)
        blocks = inputs["key_cache"].shape[0]
        for _ in range(3):
            lens = inputs["cache_seqlens"].cpu() + torch.randint(0, 5, (3,), generator=gen, dtype=torch.int32)
            lens = torch.maximum(torch.minimum(lens, torch.tensor(inputs["block_table"].shape[1] * 16)),
                                 torch.tensor([9, 1, 1], dtype=torch.int32))  # fmt: skip
            inputs["cache_seqlens"].copy_(lens)
            rows = torch.stack([torch.randperm(blocks, generator=gen)[: inputs["block_table"].shape[1]] for _ in range(3)])
            inputs["block_table"].copy_(rows.to(torch.int32))
            snapshot = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
            graph.replay()
            expected = layer(**snapshot)
            torch.cuda.synchronize()
            torch.testing.assert_close(result.float(), expected.float(), atol=3e-2, rtol=3e-2)
