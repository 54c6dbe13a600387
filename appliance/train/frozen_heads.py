"""Training forwards that skip the frozen lower layers on the prompt heads every example shares.

A CPU LoRA covers only the last third of the layers (cpu.py), and a pack's
prompts share a few long heads (system prompt + tool list: 6 heads make up 90%
of workplace-single's SFT tokens). Below the first adapted layer nothing is
trained, so a head's keys, values and hidden state there are the same at every
step: they are computed once per head and reused. Each training forward then
runs the lower layers only on the rows' own tails (attending to the cached
head keys and values) and the adapted layers on the whole sequence, as before.
Causal attention makes this exact: a head's activations never depend on what
follows it. Gradients are unchanged, since no gradient flows below the first
adapted layer anyway.

It patches the backbone's `forward` on one model instance and steps aside
(calls the original) for anything it does not cover: forwards without grad
(generation, scoring), padding inside a row, explicit embeddings, models it
does not know the layout of.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

from appliance.generate.heads import shared_heads

# Keyword arguments a training forward passes to the backbone that the fast path handles itself;
# PEFT also passes the output switches, which it covers when they are off (None or False).
_HANDLED_KWARGS = {"input_ids", "attention_mask", "position_ids", "past_key_values", "inputs_embeds", "use_cache"}
_OFF_SWITCHES = {"output_attentions", "output_hidden_states"}


@dataclass
class _Head:
    tokens: list[int]
    keys: list[Any] = field(default_factory=list)  # per lower layer: (1, kv_heads, length, head_dim)
    values: list[Any] = field(default_factory=list)
    hidden: Any = None  # (1, length, hidden): the input of the first adapted layer


@dataclass
class HeadStats:
    forwards: int = 0  # forwards that took the fast path
    rows_from_cache: int = 0
    tokens_skipped: int = 0  # head tokens the lower layers did not recompute


class FrozenHeadCache:
    """Cached lower-layer activations of registered prompt heads for one model's training forwards."""

    def __init__(self, backbone: Any, first_trained_layer: int, heads: list[list[int]]) -> None:
        self.backbone = backbone
        self.split = first_trained_layer
        self.heads = [_Head(tokens=list(tokens)) for tokens in sorted(heads, key=len, reverse=True)]
        self.stats = HeadStats()

    # ------------------------------------------------------------------ plan
    def plan(self, input_ids: Any, attention_mask: Any, position_ids: Any) -> tuple[list[tuple[int, int, int]], Any] | None:
        """(per row (first real column, real length, head index + 1 or 0), the real-token mask), or None when
        the fast path does not apply.

        Each row's real tokens must be one run (left and/or right padding, as TRL's SFT and GRPO batches are),
        numbered consecutively if position ids are given: RoPE scores depend only on distances, so a row
        counted from any start computes the same.
        """
        import torch

        rows, width = input_ids.shape
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if mask.dim() != 2 or mask.shape != input_ids.shape:
            return None
        real = mask.bool()
        lengths = real.sum(dim=1)
        starts = torch.where(lengths > 0, real.int().argmax(dim=1), 0)
        columns = torch.arange(width, device=mask.device).unsqueeze(0)
        one_run = (columns >= starts.unsqueeze(1)) & (columns < (starts + lengths).unsqueeze(1))
        if not torch.equal(real, one_run):
            return None
        if position_ids is not None:
            steps = position_ids.expand(rows, -1).diff(dim=1)
            if not bool((steps[one_run[:, 1:] & one_run[:, :-1]] == 1).all()):
                return None
        plan = []
        for row in range(rows):
            start, length = int(starts[row]), int(lengths[row])
            plan.append((start, length, self._head_for(input_ids[row, start:start + length].tolist())))
        return (plan, real) if any(head for _, _, head in plan) else None

    def _head_for(self, tokens: list[int]) -> int:
        """The index + 1 of the longest registered head that leaves at least one own token (0: none)."""
        for index, head in enumerate(self.heads):
            if len(head.tokens) < len(tokens) and tokens[:len(head.tokens)] == head.tokens:
                return index + 1
        return 0

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids: Any, position_ids: Any, plan: list[tuple[int, int, int]], real: Any) -> Any:
        """The backbone's last hidden state for the planned rows (`real`: their real-token mask), heads from the cache."""
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPast

        heads = [self.heads[index - 1] if index else None for _, _, index in plan]
        for head in heads:
            if head is not None and head.hidden is None:
                self._prefill(head)
        sizes = [len(head.tokens) if head else 0 for head in heads]
        rows, total = input_ids.shape
        device = input_ids.device
        width, tail = max(sizes), max(length - size for (_, length, _), size in zip(plan, sizes))
        head_real, tail_ids, tail_real, tail_pos = self._layout(input_ids, plan, sizes, width, tail)

        # Lower layers: the tails only, after their heads' cached keys and values. Nothing below the first
        # adapted layer trains, so no graph is needed here.
        from transformers import DynamicCache

        with torch.no_grad():
            cache = DynamicCache(config=self.backbone.config)
            for layer in range(self.split):
                cache.update(self._stacked(heads, sizes, width, lambda h: h.keys[layer]),
                             self._stacked(heads, sizes, width, lambda h: h.values[layer]), layer)
            hidden = self.backbone.embed_tokens(tail_ids)
            lower_mask = _attention_mask(torch.cat([head_real, tail_real], dim=1), query_start=width)
            rope = self.backbone.rotary_emb(hidden, position_ids=tail_pos)
            for layer in self.backbone.layers[:self.split]:
                hidden = layer(hidden, attention_mask=lower_mask, position_ids=tail_pos, past_key_values=cache,
                               use_cache=True, position_embeddings=rope)
            # Back in the caller's layout (so the adapted layers do exactly the plain forward's work): each
            # row's head hidden states from the cache, then its tail's.
            full = hidden.new_zeros((rows, total, hidden.shape[-1]))
            for row, ((start, length, _), head, size) in enumerate(zip(plan, heads, sizes)):
                if head is not None:
                    full[row, start:start + size] = head.hidden[0].to(hidden.dtype)
                full[row, start + size:start + length] = hidden[row, :length - size]

        # Adapted layers: the whole sequence, positions as the plain forward numbers them, no cache.
        positions = position_ids if position_ids is not None else torch.arange(total, device=device).unsqueeze(0)
        full_mask = _attention_mask(real, query_start=0)
        rope = self.backbone.rotary_emb(full, position_ids=positions)
        hidden = full
        for layer in self.backbone.layers[self.split:]:
            hidden = layer(hidden, attention_mask=full_mask, position_ids=positions, past_key_values=None,
                           use_cache=False, position_embeddings=rope)
        last = self.backbone.norm(hidden)
        self.stats.forwards += 1
        self.stats.rows_from_cache += sum(1 for s in sizes if s)
        self.stats.tokens_skipped += sum(sizes)
        return BaseModelOutputWithPast(last_hidden_state=last, past_key_values=None)

    def _layout(self, input_ids: Any, plan: list[tuple[int, int, int]], sizes: list[int], width: int,
                tail: int) -> tuple[Any, ...]:
        """(head_real, tail_ids, tail_real, tail_positions): heads right-aligned in `width` columns, tails after."""
        import torch

        rows = input_ids.shape[0]
        device = input_ids.device
        pad = int(input_ids[0, 0])  # masked out; any id will do
        head_real = torch.zeros((rows, width), dtype=torch.bool, device=device)
        tail_ids = torch.full((rows, tail), pad, dtype=input_ids.dtype, device=device)
        tail_real = torch.zeros((rows, tail), dtype=torch.bool, device=device)
        for row, ((start, length, _), size) in enumerate(zip(plan, sizes)):
            head_real[row, width - size:] = True
            tail_ids[row, :length - size] = input_ids[row, start + size:start + length]
            tail_real[row, :length - size] = True
        tail_pos = torch.tensor(sizes, device=device).unsqueeze(1) + torch.arange(tail, device=device).unsqueeze(0)
        return head_real, tail_ids, tail_real, tail_pos

    @staticmethod
    def _stacked(heads: list[_Head | None], sizes: list[int], width: int, part: Callable[[_Head], Any]) -> Any:
        """(rows, kv_heads, width, head_dim): each row's head keys or values right-aligned, zeros before."""
        like = part(next(head for head in heads if head is not None))
        out = like.new_zeros((len(heads), like.shape[1], width, like.shape[3]))
        for row, (head, size) in enumerate(zip(heads, sizes)):
            if head is not None:
                out[row, :, width - size:] = part(head)[0]
        return out

    def _prefill(self, head: _Head) -> None:
        """Run the lower layers once on a head (no grad) and keep their keys, values and output."""
        import torch
        from transformers import DynamicCache

        ids = torch.tensor([head.tokens], device=self.backbone.embed_tokens.weight.device)
        cache = DynamicCache(config=self.backbone.config)
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        with torch.no_grad():
            hidden = self.backbone.embed_tokens(ids)
            rope = self.backbone.rotary_emb(hidden, position_ids=positions)
            causal = _attention_mask(torch.ones_like(ids, dtype=torch.bool), query_start=0)
            for layer in self.backbone.layers[:self.split]:
                hidden = layer(hidden, attention_mask=causal, position_ids=positions, past_key_values=cache,
                               use_cache=True, position_embeddings=rope)
        head.keys = [cache.layers[i].keys for i in range(self.split)]
        head.values = [cache.layers[i].values for i in range(self.split)]
        head.hidden = hidden


def _attention_mask(key_real: Any, query_start: int) -> Any:
    """A (rows, 1, queries, keys) boolean mask: causal over real keys, each query also sees itself.

    Queries are the key columns from `query_start` on. Seeing itself keeps a padding query's row
    from being all masked (SDPA would return NaN there); real queries see themselves anyway.
    """
    import torch

    keys = key_real.shape[1]
    query_columns = torch.arange(query_start, keys, device=key_real.device).unsqueeze(1)
    key_columns = torch.arange(keys, device=key_real.device).unsqueeze(0)
    causal = key_columns <= query_columns
    allowed = (causal.unsqueeze(0) & key_real.unsqueeze(1)) | (key_columns == query_columns).unsqueeze(0)
    return allowed.unsqueeze(1)


# ---------------------------------------------------------------------- installing
def first_trained_layer(backbone: Any) -> int:
    """Index of the first decoder layer with a trainable parameter (len(layers) if none)."""
    for index, layer in enumerate(backbone.layers):
        if any(p.requires_grad for p in layer.parameters()):
            return index
    return len(backbone.layers)


def _backbone(model: Any) -> Any:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(base, getattr(base, "base_model_prefix", "model"), None)


def _supported(backbone: Any) -> bool:
    """Decoder stacks laid out like Llama's (embed, rotary, layers, norm) with full causal attention."""
    config = getattr(backbone, "config", None)
    if config is None or not all(hasattr(backbone, name) for name in ("embed_tokens", "rotary_emb", "layers", "norm")):
        return False
    if getattr(config, "sliding_window", None) or set(getattr(config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return False
    return getattr(config, "_attn_implementation", None) in ("sdpa", "appliance_grouped_sdpa")


def _a_training_forward(args: tuple, kwargs: dict[str, Any]) -> bool:
    """A forward the fast path covers: token ids in, a graph built, no cache, no extra outputs.

    Only forwards that build a graph: heads cached under inference mode could not be saved for backward.
    """
    import torch

    input_ids = kwargs.get("input_ids", args[0] if args else None)
    outputs_off = all(not kwargs.get(name) for name in _OFF_SWITCHES) and kwargs.get("return_dict") is not False
    return (torch.is_grad_enabled() and len(args) <= 1 and input_ids is not None and outputs_off
            and set(kwargs) <= _HANDLED_KWARGS | _OFF_SWITCHES | {"return_dict"}
            and kwargs.get("past_key_values") is None and kwargs.get("inputs_embeds") is None
            and not kwargs.get("use_cache"))


def install_frozen_heads(model: Any, prompts: list[list[int]]) -> FrozenHeadCache | None:
    """Patch `model`'s backbone so training forwards reuse the heads `prompts` share; None if not applicable.

    Heads are the shared leading tokens of the prompts (appliance.generate.heads.shared_heads):
    a group of prompts with the same system prompt and tool list has one.
    """
    backbone = _backbone(model)
    if backbone is None or not _supported(backbone) or getattr(backbone, "_frozen_heads", None) is not None:
        return getattr(backbone, "_frozen_heads", None)
    split = first_trained_layer(backbone)
    heads = shared_heads(prompts)
    if split == 0 or split >= len(backbone.layers) or not heads:
        return None
    cache = FrozenHeadCache(backbone, split, heads)
    original = backbone.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        planned = cache.plan(input_ids, kwargs.get("attention_mask"), kwargs.get("position_ids")) \
            if _a_training_forward(args, kwargs) else None
        if planned is None:
            return original(*args, **kwargs)
        return cache.forward(input_ids, kwargs.get("position_ids"), *planned)

    backbone.forward = forward
    backbone._frozen_heads = cache
    return cache
