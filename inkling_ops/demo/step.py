"""One Inkling-style attention step through torch.ops.inkling.rel_attn, eager and compiled.

    python -m inkling_ops demo step [--device cpu|cuda] [--tokens-per-request 24,1,9]

Builds a layer's projections (q, k, v and the relative branch r with its bank of per-distance
profiles), a paged KV cache whose pages are shuffled, three requests in one batch (a prefill
chunk, a decode step, an extend), computes ``rel_logits = r @ proj``, and runs the op eagerly
and under ``torch.compile(fullgraph=True)``. Both are checked against a dense float64
attention over the un-paged keys, and timed.
"""

from __future__ import annotations

import argparse
import time

import torch

import inkling_ops

from ..cli_args import device as device_arg
from ..cli_args import int_list


class InklingAttentionStep(torch.nn.Module):
    """Projections + RMS norm + rel_logits + paged rel_attn + output projection (one layer)."""

    def __init__(self, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, d_rel: int, rel_extent: int):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = torch.nn.Linear(hidden, num_heads * head_dim, bias=False)
        self.r_proj = torch.nn.Linear(hidden, num_heads * d_rel, bias=False)
        self.rel_bank = torch.nn.Parameter(torch.randn(d_rel, rel_extent) / d_rel**0.5)
        self.o_proj = torch.nn.Linear(num_heads * head_dim, hidden, bias=False)

    def rel_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(T, hidden) -> (T, Hq, E): each token mixes the bank of bias-vs-distance profiles."""
        r = self.r_proj(hidden_states).view(hidden_states.shape[0], self.num_heads, -1)
        return r @ self.rel_bank

    def queries(self, hidden_states: torch.Tensor) -> torch.Tensor:
        q = self.q_proj(hidden_states).view(hidden_states.shape[0], self.num_heads, self.head_dim)
        return torch.nn.functional.rms_norm(q, (self.head_dim,))

    def forward(self, hidden_states, key_cache, value_cache, block_table, cache_seqlens, cu_seqlens_q, max_seqlen_q: int):
        attn = inkling_ops.rel_attn(
            self.queries(hidden_states),
            key_cache,
            value_cache,
            block_table=block_table,
            cache_seqlens=cache_seqlens,
            cu_seqlens_q=cu_seqlens_q,
            rel_logits=self.rel_logits(hidden_states),
            max_seqlen_q=max_seqlen_q,
            softmax_scale=1.0 / self.head_dim,
        )
        return self.o_proj(attn.flatten(1))


def build_batch(q_lens, prefix_lens, *, num_kv_heads, head_dim, page_size, hidden, device, generator):
    """Random hidden states, per-request dense K/V, and the same K/V scattered into shuffled pages."""
    kv_lens = [p + q for p, q in zip(prefix_lens, q_lens)]
    pages = [-(-n // page_size) for n in kv_lens]
    num_blocks = sum(pages) + 4
    key_cache = torch.zeros(num_blocks, page_size, num_kv_heads, head_dim)
    value_cache = torch.zeros_like(key_cache)
    block_table = torch.zeros(len(q_lens), max(pages), dtype=torch.int32)
    perm = torch.randperm(num_blocks, generator=generator)
    dense_k, dense_v, at = [], [], 0
    for b, n in enumerate(kv_lens):
        k = torch.nn.functional.rms_norm(torch.randn(n, num_kv_heads, head_dim, generator=generator), (head_dim,))
        v = torch.randn(n, num_kv_heads, head_dim, generator=generator)
        ids = perm[at : at + pages[b]]
        at += pages[b]
        block_table[b, : pages[b]] = ids.to(torch.int32)
        pos = torch.arange(n)
        key_cache[ids[pos // page_size], pos % page_size] = k
        value_cache[ids[pos // page_size], pos % page_size] = v
        dense_k.append(k)
        dense_v.append(v)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    hidden_states = torch.randn(sum(q_lens), hidden, generator=generator)
    tensors = dict(
        key_cache=key_cache, value_cache=value_cache, block_table=block_table,
        cache_seqlens=torch.tensor(kv_lens, dtype=torch.int32), cu_seqlens_q=cu,
    )  # fmt: skip
    return hidden_states.to(device), {k: t.to(device) for k, t in tensors.items()}, dense_k, dense_v


def dense_reference(layer, hidden_states, dense_k, dense_v, q_lens, window_left=-1):
    """The same step in float64 with dense per-request K/V (no pages): softmax(scale qK^T + bias) V."""
    q = layer.queries(hidden_states).double().cpu()
    rel = layer.rel_logits(hidden_states).double().cpu()
    heads, extent = q.shape[1], rel.shape[2]
    out = torch.zeros_like(q)
    start = 0
    for b, ql in enumerate(q_lens):
        k, v = dense_k[b].double(), dense_v[b].double()
        group = heads // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        kv = k.shape[0]
        d = (kv - ql + torch.arange(ql))[:, None] - torch.arange(kv)[None, :]
        bias = rel[start : start + ql].gather(2, d.clamp(0, extent - 1)[:, None, :].expand(ql, heads, kv))
        bias = torch.where(((d >= 0) & (d < extent))[:, None, :], bias, 0.0)
        s = torch.einsum("qhd,khd->qhk", q[start : start + ql], k) / q.shape[2] + bias
        s = s.masked_fill(~(d >= 0)[:, None, :], float("-inf"))
        out[start : start + ql] = torch.einsum("qhk,khd->qhd", s.softmax(-1), v)
        start += ql
    return out


def _time_ms(fn, device: torch.device | str, reps: int) -> float:
    on_cuda = torch.device(device).type == "cuda"
    fn()
    if on_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    if on_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inkling_ops demo step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", type=device_arg, default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens-per-request", type=int_list(0), default="24,1,9", help="new tokens of each request")
    parser.add_argument("--prefix", type=int_list(0), default="0,70,40", help="tokens already cached for each request")
    args = parser.parse_args(argv)
    q_lens, prefix = args.tokens_per_request, args.prefix
    if len(prefix) != len(q_lens):
        parser.error("--prefix needs one entry per request in --tokens-per-request")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    hidden, num_heads, num_kv_heads, head_dim, d_rel, rel_extent, page = 256, 8, 2, 64, 16, 32, 16
    layer = InklingAttentionStep(hidden, num_heads, num_kv_heads, head_dim, d_rel, rel_extent).to(args.device)
    hidden_states, cache, dense_k, dense_v = build_batch(
        q_lens, prefix, num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=page, hidden=hidden,
        device=args.device, generator=gen,
    )  # fmt: skip
    max_q = max(q_lens)
    print(f"inkling_ops {inkling_ops.__version__}, torch {torch.__version__}, device {args.device}")
    print(f"requests: new tokens {q_lens}, cached before {prefix}; heads {num_heads}/{num_kv_heads}, "
          f"head_dim {head_dim}, rel_extent {rel_extent}, pages of {page} shuffled over "
          f"{cache['key_cache'].shape[0]} blocks")  # fmt: skip

    with torch.inference_mode():
        expected_attn = dense_reference(layer, hidden_states, dense_k, dense_v, q_lens)
        expected = layer.o_proj(expected_attn.flatten(1).to(hidden_states)).double().cpu()

        def eager():
            return layer(hidden_states, **cache, max_seqlen_q=max_q)

        compiled_layer = torch.compile(layer, fullgraph=True)

        def compiled():
            return compiled_layer(hidden_states, **cache, max_seqlen_q=max_q)

        t0 = time.perf_counter()
        got_compiled = compiled()
        compile_s = time.perf_counter() - t0
        got_eager = eager()
        err_eager = (got_eager.double().cpu() - expected).abs().max().item()
        err_compiled = (got_compiled.double().cpu() - expected).abs().max().item()
        eager_ms = _time_ms(eager, args.device, 20)
        compiled_ms = _time_ms(compiled, args.device, 20)

    tol = 1e-3 if hidden_states.dtype == torch.float32 else 3e-2
    ok = err_eager < tol and err_compiled < tol
    print(f"output {tuple(got_eager.shape)}; first row: {got_eager[0, :4].tolist()}")
    print(f"eager    : max |err| vs float64 dense reference {err_eager:.2e}, {eager_ms:.3f} ms/step")
    print(f"compiled : max |err| vs float64 dense reference {err_compiled:.2e}, {compiled_ms:.3f} ms/step "
          f"(first call, with compilation: {compile_s:.1f} s; fullgraph=True, no graph breaks)")  # fmt: skip
    print("OK" if ok else f"MISMATCH (tolerance {tol})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
