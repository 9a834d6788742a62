"""The worked example of docs/semantics.md, run as written there."""

import math

import torch

import inkling_ops


def test_worked_example_from_docs():
    q = torch.ones(2, 1, 1)
    key_cache = torch.zeros(1, 4, 1, 1)
    value_cache = torch.tensor([1.0, 2.0, 3.0, 0.0]).view(1, 4, 1, 1)
    rel_logits = torch.tensor([[math.log(2), 0.0]] * 2).view(2, 1, 2)
    out = inkling_ops.rel_attn(
        q, key_cache, value_cache,
        block_table=torch.tensor([[0]], dtype=torch.int32),
        cache_seqlens=torch.tensor([3], dtype=torch.int32),
        cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32),
        rel_logits=rel_logits, max_seqlen_q=2, softmax_scale=1.0,
    )  # fmt: skip
    torch.testing.assert_close(out.flatten(), torch.tensor([5 / 3, 9 / 4]))
