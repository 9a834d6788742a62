"""A Hugging Face Inkling text model run the way a serving engine runs it: packed tokens, paged KV.

:class:`PagedInkling` wraps an ``InklingForCausalLM`` and runs *its* submodules (embedding, norms,
projections, MLPs, router, shared experts, LM head) over one step's packed tokens of several
requests, with two things of its own where HF's code assumes a padded batch and a ``DynamicCache``:

- attention: the step's K/V go into a paged cache at ``slot_mapping``, the relative logits are the
  compact ``(T, Hq, E)`` of ``r_proj(x) @ proj`` (log-scaled on global layers, as HF does), and
  ``inkling_ops.rel_attn`` attends over the pages (window ``(W - 1, 0)`` on sliding layers);
- Inkling's four short convolutions per layer (on k, v, the attention output and the MLP output):
  causal depthwise convolutions over each request's own tokens, carrying the last ``K - 1`` inputs
  of each request in a per-request state slot between steps (HF keeps them in the cache's conv states).

The routed experts are evaluated densely (every expert on every token, weighted by the router's
top-k weights, zero elsewhere), which is HF's sum without its data-dependent token gather, so the
forward compiles with ``fullgraph=True``. Everything else is HF's module code.

Shapes of one step (T tokens of B requests): input_ids, positions, slot_mapping (T,) int64;
block_table (B, max_blocks_per_seq) int32; cache_seqlens (B,) int32 (KV length after the step);
cu_seqlens_q (B + 1,) int32; state_slots (B,) int64; logits_indices (B,) int64 (each request's last
token). Returns logits (B, vocab).

Equivalent PyTorch: HF's ``InklingForCausalLM`` forward with a ``DynamicCache`` and
``attn_implementation="eager"``, one request at a time, logits of each request's last token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..api import rel_attn


class PagedInkling(torch.nn.Module):
    """An ``InklingForCausalLM``'s weights over a paged KV cache and per-request conv states.

    The caches are buffers of this module, so a captured CUDA graph sees fixed addresses:
    per layer ``key_cache`` / ``value_cache`` (num_blocks, page_size, Hkv, D) in ``dtype`` and four
    conv states (max_num_seqs + 1, K - 1, channels) in float32 (HF keeps the convolutions in float32);
    state slot ``max_num_seqs`` is scratch for padding requests.
    """

    def __init__(self, hf_model: torch.nn.Module, *, num_blocks: int, page_size: int, max_num_seqs: int):
        super().__init__()
        self.hf = hf_model
        self.config = cfg = hf_model.config
        self.page_size = page_size
        self.scratch_slot = max_num_seqs
        param = next(hf_model.parameters())
        device, dtype = param.device, param.dtype
        self.kv_caches: list[tuple[str, str]] = []
        self.conv_states: list[list[str]] = []
        for i, layer in enumerate(hf_model.model.layers):
            attn = layer.self_attn
            shape = (num_blocks, page_size, attn.num_key_value_heads, attn.head_dim)
            self.register_buffer(f"key_cache_{i}", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
            self.register_buffer(f"value_cache_{i}", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
            self.kv_caches.append((f"key_cache_{i}", f"value_cache_{i}"))
            names = []
            for c, conv in enumerate((attn.k_sconv, attn.v_sconv, layer.attn_sconv, layer.mlp_sconv)):
                channels, _, kernel = conv.conv1d.weight.shape
                state = torch.zeros(max_num_seqs + 1, kernel - 1, channels, device=device, dtype=torch.float32)
                self.register_buffer(f"conv_state_{i}_{c}", state, persistent=False)
                names.append(f"conv_state_{i}_{c}")
            self.conv_states.append(names)

    def reset_states(self, slots: list[int]) -> None:
        """Zero the conv states of ``slots`` (a new request starts from no previous tokens)."""
        index = torch.tensor(slots, dtype=torch.long, device=self.conv_state_0_0.device)
        for names in self.conv_states:
            for name in names:
                getattr(self, name).index_fill_(0, index, 0.0)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        slot_mapping: torch.Tensor,
        block_table: torch.Tensor,
        cache_seqlens: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        state_slots: torch.Tensor,
        logits_indices: torch.Tensor,
        max_seqlen_q: int,
    ) -> torch.Tensor:
        tokens = torch.arange(input_ids.shape[0], device=input_ids.device)
        request = torch.searchsorted(cu_seqlens_q[1:], tokens.to(cu_seqlens_q.dtype), right=True)
        offset = tokens - cu_seqlens_q[request].long()  # each token's index in its request's chunk
        steps = _ConvSteps(tokens, offset, state_slots[request], state_slots, cu_seqlens_q.long())
        meta = dict(block_table=block_table, cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
                    max_seqlen_q=max_seqlen_q)  # fmt: skip

        hidden = self.hf.model.embed_tokens(input_ids)
        for i, layer in enumerate(self.hf.model.layers):
            states = [getattr(self, name) for name in self.conv_states[i]]
            key_cache, value_cache = (getattr(self, name) for name in self.kv_caches[i])
            residual = hidden
            h = layer.input_layernorm(hidden)
            h = self._attention(layer.self_attn, h, positions, slot_mapping, key_cache, value_cache, states, steps, meta)
            h = short_conv(layer.attn_sconv, h, states[2], steps)
            hidden = residual + h
            residual = hidden
            h = layer.post_attention_layernorm(hidden)
            h = self._mlp(layer.mlp, h)
            h = short_conv(layer.mlp_sconv, h, states[3], steps)
            hidden = residual + h
        hidden = self.hf.model.norm(hidden[logits_indices]) / self.config.logits_mup_width_multiplier
        logits = self.hf.lm_head(hidden)
        vocab = self.config.unpadded_vocab_size
        return logits[..., :vocab] if vocab is not None and vocab < logits.shape[-1] else logits

    def _attention(self, attn, h, positions, slot_mapping, key_cache, value_cache, states, steps, meta):
        t = h.shape[0]
        heads, kv_heads, dim = attn.num_heads, attn.num_key_value_heads, attn.head_dim
        q = attn.q_norm(attn.q_proj(h).view(t, heads, dim))
        k = attn.k_norm(short_conv(attn.k_sconv, attn.k_proj(h), states[0], steps).view(t, kv_heads, dim))
        v = short_conv(attn.v_sconv, attn.v_proj(h), states[1], steps).view(t, kv_heads, dim)
        key_cache.view(-1, kv_heads, dim).index_copy_(0, slot_mapping, k.to(key_cache.dtype))
        value_cache.view(-1, kv_heads, dim).index_copy_(0, slot_mapping, v.to(value_cache.dtype))
        rel = attn.r_proj(h).view(t, heads, -1) @ attn.rel_logits_proj.proj  # (T, Hq, E)
        if not attn.is_sliding and self.config.log_scaling_n_floor is not None:
            effective_n = (positions + 1).float()
            tau = 1.0 + self.config.log_scaling_alpha * torch.log((effective_n / self.config.log_scaling_n_floor).clamp(min=1.0))
            q = (q.float() * tau[:, None, None]).to(q.dtype)
            rel = (rel.float() * tau[:, None, None]).to(rel.dtype)
        window = (attn.sliding_window - 1, 0) if attn.is_sliding else (-1, -1)
        out = torch.empty_like(q)
        rel_attn(q, key_cache, value_cache, rel_logits=rel.contiguous(), softmax_scale=attn.scaling, window_size=window,
                 out=out, **meta)  # fmt: skip
        return attn.o_proj(out.view(t, heads * dim))

    @staticmethod
    def _mlp(mlp, h):
        if not hasattr(mlp, "gate"):  # InklingMLP
            return mlp(h)
        _, weights, experts, shared_gammas = mlp.gate(h)  # InklingMoE: HF's router
        routed = torch.zeros_like(h)
        bank = mlp.experts
        for e in range(bank.num_experts):  # HF's per-expert sum, over all tokens (weight 0 off the top-k)
            weight = (weights * (experts == e)).sum(-1, keepdim=True)
            gate, up = F.linear(h, bank.gate_up_proj[e]).chunk(2, dim=-1)
            routed = routed + F.linear(bank.act_fn(gate) * up, bank.down_proj[e]) * weight
        return routed + mlp.shared_experts(h, gammas=shared_gammas)


class _ConvSteps:
    """Where each token's previous conv inputs are: ``tokens`` (T,) 0..T-1, ``offset`` (T,) index in
    the request's chunk, ``token_slots`` (T,) its request's state slot, ``slots`` (B,), ``cu`` (B + 1,)."""

    def __init__(self, tokens, offset, token_slots, slots, cu):
        self.tokens, self.offset, self.token_slots, self.slots, self.cu = tokens, offset, token_slots, slots, cu


def short_conv(conv, x: torch.Tensor, state: torch.Tensor, steps: _ConvSteps) -> torch.Tensor:
    """Inkling's short convolution (``x + causal_depthwise_conv(x)``, in float32) over packed requests.

    x: (T, C); state: (num_slots, K - 1, C) float32, the last K - 1 inputs of each request before
    this step (oldest first), updated in place to the last K - 1 inputs after it.
    Returns (T, C) in x's dtype.

    Equivalent PyTorch (one request, its previous inputs ``prev`` (K - 1, C)):
    ``x + F.conv1d(cat([prev, x]).T[None], w[:, None], groups=C)[0].T``
    """
    taps = conv.conv1d.weight.shape[-1]
    w = conv.conv1d.weight.squeeze(1).float()  # (C, K): out[t] = sum_i w[:, i] * x[t - (K - 1) + i]
    xf = x.float()
    t = xf.shape[0]
    source = torch.cat([xf, state.flatten(0, 1)])  # the step's inputs, then every slot's previous ones

    def index(step_token, offset, slot, shift):  # where the input ``shift`` tokens back is in ``source``
        return torch.where(offset >= shift, step_token - shift, t + slot * (taps - 1) + (taps - 1) + offset - shift)

    out = xf * w[:, taps - 1]
    for shift in range(1, taps):
        out = out + source[index(steps.tokens, steps.offset, steps.token_slots, shift)] * w[:, taps - 1 - shift]
    # each request's new state: the K - 1 inputs before its (virtual) next token
    lengths = (steps.cu[1:] - steps.cu[:-1])[:, None]
    shifts = torch.arange(taps - 1, 0, -1, device=x.device)[None, :]
    state.index_copy_(0, steps.slots, source[index(steps.cu[1:, None], lengths, steps.slots[:, None], shifts)])
    return (out + xf).to(x.dtype)
