"""The merge of the CuTe kernel's split single-tile requests (``decode_splits``, an experiment),
against its PyTorch equivalent: under Triton's interpreter on a CPU-only machine, compiled on a GPU."""

from __future__ import annotations

import math
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from inkling_ops.kernels.triton_split_merge import merge_splits  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.skipif(
    DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1", reason="needs CUDA or TRITON_INTERPRET=1"
)


def _expected(o_part, lse_part, out, cu, G):
    """The docstring's equivalent PyTorch, request by request."""
    want = out.clone()
    splits, num_reqs, kv_heads, tile_m, D = o_part.shape
    for b in range(num_reqs):
        q0, q1 = int(cu[b]), int(cu[b + 1])
        n = (q1 - q0) * G
        if not 0 < n <= tile_m:
            continue
        for h in range(kv_heads):
            lse = lse_part[:, b, h, :n].double()
            w = torch.softmax(lse * math.log(2), dim=0)
            w = torch.where(torch.isnan(w), torch.zeros_like(w), w)  # rows no split saw: 0
            merged = (w[..., None] * o_part[:, b, h, :n].double()).sum(0)
            want[q0:q1, h * G : (h + 1) * G] = merged.view(q1 - q0, G, D).to(out.dtype)
    return want


@pytest.mark.parametrize("splits", [2, 3])
def test_merge_splits_matches_equivalent(splits):
    torch.manual_seed(0)
    G, kv_heads, tile_m, D = 4, 2, 32, 16
    q_lens = [1, 9, 3, 0, 8]  # 9 * 4 > 32: not split, its rows stay; 0: nothing
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    T, B = sum(q_lens), len(q_lens)
    o_part = torch.randn(splits, B, kv_heads, tile_m, D, device=DEVICE)
    lse_part = torch.randn(splits, B, kv_heads, tile_m, device=DEVICE) * 4
    lse_part[0, 0, 0, 1] = float("-inf")  # one split saw no key of that row
    lse_part[:, 2, 1, 0] = float("-inf")  # no split saw a key of that row: 0
    out = torch.full((T, kv_heads * G, D), 7.0, dtype=torch.bfloat16, device=DEVICE)
    want = _expected(o_part, lse_part, out, cu, G)
    merge_splits(o_part, lse_part, out, cu)
    torch.testing.assert_close(out.float(), want.float(), rtol=1e-2, atol=1e-2)
    assert torch.all(out[1:10] == 7.0)  # the 9-token request was not split: untouched
    assert torch.all(out[10, 4] == 0)  # request 2's first token, KV head 1, head 0 of its group: no key seen


def test_merge_splits_refuses_mismatched_workspace():
    o_part = torch.zeros(2, 1, 1, 8, 4)
    with pytest.raises(ValueError, match="lse_part has shape"):
        merge_splits(o_part, torch.zeros(2, 1, 1, 4), torch.zeros(1, 2, 4), torch.tensor([0, 1], dtype=torch.int32))
