"""Hugging Face transformers integration: Inkling's attention through ``torch.ops.inkling.rel_attn``.

Importing this module calls :func:`register`, which makes ``"inkling_ops"`` an attention
implementation of transformers, so that

    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="inkling_ops")
    model.set_attn_implementation("inkling_ops")

run every ``InklingAttention`` layer through :func:`inkling_ops.rel_attn`. transformers is imported
here only (``import inkling_ops`` never imports this module).

What :func:`register` installs (all idempotent, all keyed on the name ``"inkling_ops"``):

- ``AttentionInterface["inkling_ops"] = inkling_ops_attention``: the attention function.
- ``AttentionMaskInterface["inkling_ops"] = key_padding_mask``: instead of a dense 4D mask, the
  attention function receives the (B, kv_len) boolean key-padding mask of the keys it is given
  (or ``None`` without padding); causality and the window are the op's own.
- A minimal hook that keeps the bias compact. ``InklingAttention.forward`` builds the relative bias
  with ``InklingRelativeLogits`` before it calls the attention function, and that module gathers the
  per-token logits into a dense (B, Hq, q_len, kv_len) tensor. The hook wraps
  ``InklingAttention.forward`` so that, while the model's ``_attn_implementation`` is
  ``"inkling_ops"``, ``InklingRelativeLogits.forward`` returns the per-token logits before that
  gather, ``(relative_states @ proj).transpose(1, 2)`` of shape (B, Hq, q_len, E); HF's log-scaling
  (tau, per query position) multiplies them unchanged. Under any other implementation both methods
  run HF's code untouched. If the attention function is ever handed a dense bias (the hook not
  active), it derives the compact logits from it by a gather, so it stays correct.

How HF's tensors map onto the op's paged layout (per call, per layer):

- q (B, Hq, q_len, D), k/v (B, Hkv, kv_len, D) as HF passes them (a ``DynamicCache`` hands over
  the full keys of global layers and the last ``window - 1 + q_len`` keys of sliding layers).
- Each batch row b keeps its valid keys, ``[start_b, end_b)`` of the padding mask (left padding as in
  ``generate``, or right padding), copied left-aligned into pages of ``PAGE_SIZE`` tokens with an
  identity block table: key_cache (B * pages, PAGE_SIZE, Hkv, D), ``cache_seqlens[b] = end_b - start_b``.
  Distances stay HF's (index differences), because padding is only at the ends of a row.
- The valid query rows of each batch row are packed into (T, Hq, D) with ``cu_seqlens_q``; rows that
  are padding get zeros in the output (HF's eager gives them an average over masked keys; neither
  reaches a valid token).
- Sliding layers: ``window_size = (module.sliding_window - 1, 0)`` and ``E = module.rel_extent``
  (both ``config.sliding_window_size``); global layers: no window, ``E = config.rel_extent``.
- ``softmax_scale`` is the ``scaling`` HF passes (1 / head_dim for Inkling).

Limits: inference only (no dropout, no gradients, no attention weights returned). Supported caches:
``DynamicCache`` (the default of ``generate``) or none; static and MTP caches, custom 4D masks and a
padding mask with holes inside a row raise ValueError; packed sequences (several documents in one row
via position_ids) are not detected and not supported. With a padding mask, finding each row's range
and packing its valid rows costs host synchronizations per layer. See docs/huggingface.md.

Equivalent PyTorch: ``eager_attention_forward(module, q, k, v, mask, scaling, position_bias=bias)``
of ``transformers.models.inkling.modeling_inkling`` on the valid rows.
"""

from __future__ import annotations

import contextvars
import functools
import re

import torch

from ..api import rel_attn

#: The name registered with transformers' AttentionInterface and AttentionMaskInterface.
ATTN_IMPLEMENTATION = "inkling_ops"

#: Tokens per page of the paged KV layout built per call (vLLM's default page size).
PAGE_SIZE = 16

#: The oldest transformers release whose Inkling this integration reproduces (the hf extra's
#: lower bound): 5.17 names the cache ``past_key_values`` where 5.24 says ``cache``, and its
#: Inkling did not match (meta/TUNING.md, "Serving demo").
MIN_TRANSFORMERS = (5, 24)


def release(version: str) -> tuple[int, int]:
    """``"5.24.0"`` -> ``(5, 24)``: a version string's (major, minor); a dev or rc suffix after
    the minor is ignored."""
    major, minor = (version.split(".") + ["0"])[:2]
    return int(major), int(re.match(r"\d*", minor).group() or 0)

# True while an InklingAttention.forward runs under the "inkling_ops" implementation: its
# InklingRelativeLogits then returns the compact (B, Hq, q_len, E) logits instead of the dense bias.
_COMPACT_BIAS = contextvars.ContextVar("inkling_ops_compact_bias", default=False)


def key_padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    attention_mask: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor | None:
    """The mask function registered for "inkling_ops": which of the layer's keys are real tokens.

    attention_mask is HF's (B, seen + q_length) padding mask (or None). Returns (B, kv_length) bool
    over the absolute key positions [kv_offset, kv_offset + kv_length), True where the padding mask
    is 1 (positions past its end count as padding, as in HF's masks), or None without a padding mask.

    The op places a request's queries on its last keys, which is how a ``DynamicCache`` (and no
    cache) hands them over; other layouts (static caches, MTP caches) raise ValueError.

    Equivalent PyTorch: ``attention_mask[:, kv_offset:kv_offset + kv_length].bool()``
    """
    kv_end = kv_offset + kv_length
    if not isinstance(q_offset, int) or q_offset + q_length != kv_end:
        raise ValueError(
            f"q_offset: got queries [{q_offset}, {q_offset} + {q_length}) over keys [{kv_offset}, {kv_end}); "
            "attn_implementation='inkling_ops' expects the queries to be the last keys (a DynamicCache or no "
            "cache; static and MTP caches are not supported)"
        )
    if attention_mask is None:
        return None
    if attention_mask.ndim != 2 or attention_mask.shape[0] != batch_size:
        raise ValueError(
            f"attention_mask: got a mask of shape {tuple(attention_mask.shape)}, expected a 2D "
            f"({batch_size}, kv_len) padding mask for attn_implementation='inkling_ops'"
        )
    padding = attention_mask.to(torch.bool)
    if padding.shape[-1] < kv_end:
        padding = torch.nn.functional.pad(padding, (0, kv_end - padding.shape[-1]))
    return padding[:, kv_offset:kv_end]


def compact_rel_logits_from_dense(position_bias: torch.Tensor, rel_extent: int) -> torch.Tensor:
    """Recover the per-token logits from HF's dense bias.

    position_bias: (B, Hq, q_len, kv_len), query i at key index kv_len - q_len + i; returns
    (B, Hq, q_len, E) with [..., i, d] = position_bias[..., i, kv_len - q_len + i - d] where that key
    exists, else 0 (such distances see no key).

    Equivalent PyTorch: this gather; used only when the compact-bias hook is not active.
    """
    batch, heads, q_len, kv_len = position_bias.shape
    dev = position_bias.device
    key_index = (kv_len - q_len + torch.arange(q_len, device=dev))[:, None] - torch.arange(rel_extent, device=dev)
    exists = (key_index >= 0) & (key_index < kv_len)
    index = key_index.clamp(0, kv_len - 1).expand(batch, heads, q_len, rel_extent)
    return position_bias.gather(-1, index).masked_fill(~exists, 0.0)


def _row_ranges(padding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, kv) bool padding mask -> start (B,), end (B,) int64 of each row's valid keys.

    Raises ValueError when a row's valid keys are not one contiguous run (holes inside the row).
    """
    kv_len = padding.shape[1]
    count = padding.sum(-1)
    pos = torch.arange(kv_len, device=padding.device)
    start = torch.where(padding, pos, kv_len).amin(-1)
    end = torch.where(padding, pos + 1, 0).amax(-1)
    start = torch.where(count > 0, start, 0)
    end = torch.where(count > 0, end, 0)
    if bool(((end - start) != count).any()):
        raise ValueError(
            "attention_mask: a row has padding between real tokens; attn_implementation='inkling_ops' "
            "expects left or right padding (each row's real tokens contiguous)"
        )
    return start, end


def _paged_keys(states: torch.Tensor, start: torch.Tensor | None, num_pages: int) -> torch.Tensor:
    """HF (B, Hkv, kv, D) -> left-aligned pages (B * num_pages, PAGE_SIZE, Hkv, D), row b from start[b]."""
    batch, heads, kv_len, dim = states.shape
    slots = torch.arange(num_pages * PAGE_SIZE, device=states.device)
    if start is not None:
        slots = start[:, None] + slots[None, :]
    index = slots.clamp(max=kv_len - 1).expand(batch, -1)
    rows = torch.arange(batch, device=states.device)[:, None]
    paged = states.transpose(1, 2)[rows, index]  # (B, pages * PAGE_SIZE, Hkv, D)
    return paged.reshape(batch * num_pages, PAGE_SIZE, heads, dim)


def inkling_ops_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The attention function registered as "inkling_ops" (transformers' attention-interface signature).

    Shapes: query (B, Hq, q_len, D); key, value (B, Hkv, kv_len, D), the last q_len keys being the
    queries' own; attention_mask (B, kv_len) bool from :func:`key_padding_mask` or None;
    position_bias (B, Hq, q_len, E) compact logits (hook active) or HF's dense (B, Hq, q_len, kv_len).
    Returns (out (B, q_len, Hq, D), None); rows that are padding are zeros. No attention weights.

    Equivalent PyTorch: ``eager_attention_forward(module, query, key, value, dense_mask, scaling,
    position_bias=dense_bias)[0]`` on the rows that are not padding.
    """
    if module.training and dropout > 0.0:
        raise ValueError(f"dropout: got {dropout} in training mode, expected 0 (inkling_ops is inference-only)")
    if position_bias is None:
        raise ValueError("position_bias: got None, expected Inkling's relative logits")
    batch, num_heads, q_len, head_dim = query.shape
    kv_len = key.shape[2]
    rel_extent = int(module.rel_extent)
    if sliding_window is None:
        sliding_window = getattr(module, "sliding_window", None)
    window_size = (int(sliding_window) - 1, 0) if sliding_window else (-1, -1)
    if scaling is None:
        scaling = module.scaling

    if _COMPACT_BIAS.get():
        if position_bias.shape != (batch, num_heads, q_len, rel_extent):
            raise ValueError(
                f"position_bias: got shape {tuple(position_bias.shape)}, expected the compact "
                f"{(batch, num_heads, q_len, rel_extent)}"
            )
        rel = position_bias
    else:
        rel = compact_rel_logits_from_dense(position_bias, rel_extent)
    rel = rel.to(query.dtype).transpose(1, 2)  # (B, q_len, Hq, E)
    q_rows = query.transpose(1, 2)  # (B, q_len, Hq, D)

    if attention_mask is not None and attention_mask.ndim != 2:
        raise ValueError(
            f"attention_mask: got shape {tuple(attention_mask.shape)}, expected a (batch, kv_len) padding "
            "mask; register() installs the matching mask function"
        )
    if attention_mask is None or bool(attention_mask.all()):
        start = None
        seqlens = torch.full((batch,), kv_len, dtype=torch.int32, device=query.device)
        cu_seqlens_q = torch.arange(batch + 1, dtype=torch.int32, device=query.device) * q_len
        q_packed = q_rows.reshape(batch * q_len, num_heads, head_dim)
        rel_packed = rel.reshape(batch * q_len, num_heads, rel_extent)
        query_valid = None
    else:
        start, end = _row_ranges(attention_mask)
        seqlens = (end - start).to(torch.int32)
        key_index = kv_len - q_len + torch.arange(q_len, device=query.device)
        query_valid = (key_index[None, :] >= start[:, None]) & (key_index[None, :] < end[:, None])
        cu_seqlens_q = torch.zeros(batch + 1, dtype=torch.int32, device=query.device)
        cu_seqlens_q[1:] = query_valid.sum(-1).cumsum(0)
        q_packed = q_rows[query_valid]
        rel_packed = rel[query_valid]

    num_pages = max(1, -(-kv_len // PAGE_SIZE))
    key_cache = _paged_keys(key, start, num_pages)
    value_cache = _paged_keys(value, start, num_pages)
    block_table = torch.arange(batch * num_pages, dtype=torch.int32, device=query.device).view(batch, num_pages)

    out_packed = rel_attn(
        q_packed.contiguous(),
        key_cache,
        value_cache,
        block_table=block_table,
        cache_seqlens=seqlens,
        cu_seqlens_q=cu_seqlens_q,
        rel_logits=rel_packed.contiguous(),
        max_seqlen_q=q_len,
        softmax_scale=float(scaling),
        window_size=window_size,
    )
    if query_valid is None:
        return out_packed.view(batch, q_len, num_heads, head_dim), None
    out = out_packed.new_zeros(batch, q_len, num_heads, head_dim)
    out[query_valid] = out_packed
    return out, None


def _compact_attention_forward(original):
    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        token = _COMPACT_BIAS.set(self.config._attn_implementation == ATTN_IMPLEMENTATION)
        try:
            return original(self, *args, **kwargs)
        finally:
            _COMPACT_BIAS.reset(token)

    forward._inkling_ops_hook = True
    return forward


def _compact_relative_logits_forward(original):
    @functools.wraps(original)
    def forward(self, relative_states, query_positions, key_positions):
        if not _COMPACT_BIAS.get():
            return original(self, relative_states, query_positions, key_positions)
        # (B, q_len, Hq, d_rel) @ (d_rel, E) -> (B, Hq, q_len, E): the logits before the dense gather
        return (relative_states @ self.proj).transpose(1, 2)

    forward._inkling_ops_hook = True
    return forward


def register() -> None:
    """Register "inkling_ops" with transformers (attention function, mask function, compact-bias hook).

    Idempotent (the hooks are marked and never stacked); called when this module is imported, and
    again after transformers is reloaded. Raises ImportError without transformers' Inkling model.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.models.inkling import modeling_inkling

    AttentionInterface.register(ATTN_IMPLEMENTATION, inkling_ops_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, key_padding_mask)
    attention_cls = modeling_inkling.InklingAttention
    if not getattr(attention_cls.forward, "_inkling_ops_hook", False):
        attention_cls.forward = _compact_attention_forward(attention_cls.forward)
    logits_cls = modeling_inkling.InklingRelativeLogits
    if not getattr(logits_cls.forward, "_inkling_ops_hook", False):
        logits_cls.forward = _compact_relative_logits_forward(logits_cls.forward)


register()
