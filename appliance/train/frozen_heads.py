"""Training forwards that compute the prompt heads every example shares once, not once per row.

A CPU LoRA covers only the last third of the layers by default (cpu.py), and a pack's
prompts share a few long heads (system prompt + tool list: 6 heads make up 90%
of workplace-single's SFT tokens). Below the first adapted layer nothing is
trained, so a head's keys, values and hidden state there are the same at every
step: they are computed once per head and reused. In the adapted layers a head's
activations change every step but are the same in every row that starts with
it, so each training forward runs each distinct head through them once (a batch
of one, with a graph) and every row's own tail after that head's keys and
values. The rows' tails are all the per-row work left: the lower layers see the
tails only (after the cached head keys and values), and the adapted layers the
tails plus one pass per head. With every layer adapted (`--lora-layers 0`)
there is nothing to cache, and the shared head pass is the whole gain. Causal
attention makes this exact: a head's activations never depend on what follows it, and autograd sums every row's
gradient into the head pass it shares. Adapted layers with dropout (a mask per
row) run on every row's whole sequence instead.

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
    head_passes: int = 0  # heads run through the adapted layers once for all the rows that share them


class FrozenHeadCache:
    """Cached lower-layer activations of registered prompt heads for one model's training forwards."""

    def __init__(self, backbone: Any, first_trained_layer: int, heads: list[list[int]]) -> None:
        self.backbone = backbone
        self.split = first_trained_layer
        # Dropout draws a mask per row, so rows may share a head's adapted pass only without it.
        self.share_adapted = (not _has_dropout(backbone.layers[first_trained_layer:])
                              and not getattr(backbone.config, "attention_dropout", 0.0))
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
        total = input_ids.shape[1]
        width, tail = max(sizes), max(length - size for (_, length, _), size in zip(plan, sizes))
        head_real, tail_ids, tail_real, tail_pos = self._layout(input_ids, plan, sizes, width, tail)

        # Lower layers: the tails only, after their heads' cached keys and values. Nothing below the first
        # adapted layer trains, so no graph is needed here.
        lower_mask = _attention_mask(torch.cat([head_real, tail_real], dim=1), query_start=width)
        with torch.no_grad():
            hidden = self._tails_through(range(self.split), self.backbone.embed_tokens(tail_ids), heads, sizes, width,
                                         lambda h: h, lower_mask, tail_pos)
        if self.share_adapted:
            hidden, outputs = self._adapted_shared(heads, sizes, width, hidden, lower_mask, tail_pos)
            full = self._caller_layout(plan, heads, sizes, hidden, total, lambda h: outputs[id(h)])
        else:
            full = self._adapted_full(plan, heads, sizes, hidden, real, position_ids, total)
        last = self.backbone.norm(full)
        self.stats.forwards += 1
        self.stats.rows_from_cache += sum(1 for s in sizes if s)
        self.stats.tokens_skipped += sum(sizes)
        return BaseModelOutputWithPast(last_hidden_state=last, past_key_values=None)

    def _adapted_shared(self, heads: list[_Head | None], sizes: list[int], width: int, tails: Any, mask: Any,
                        tail_pos: Any) -> tuple[Any, dict[int, Any]]:
        """The adapted layers with a graph, each distinct head run once (a batch of one) and every row's tail
        after its head's keys and values, as the lower layers run without one.

        Returns the tails' output and each head's (by id). Exact like the lower layers: causal attention
        means a head's activations never depend on what follows it, and autograd sums each row's
        gradient into the one head pass it shares.
        """
        adapted = range(self.split, len(self.backbone.layers))
        passes = {id(head): _Head(head.tokens, *self._head_through(adapted, head.hidden))
                  for head in heads if head is not None}
        hidden = self._tails_through(adapted, tails, heads, sizes, width, lambda h: passes[id(h)], mask, tail_pos)
        self.stats.head_passes += len(passes)
        return hidden, {key: head_pass.hidden for key, head_pass in passes.items()}

    def _head_through(self, layers: range, hidden: Any) -> tuple[list[Any], list[Any], Any]:
        """One head's hidden states (a batch of one, positions from 0) through `layers`: (keys, values) per
        layer and the output. Builds a graph unless the caller turned grad off."""
        import torch
        from transformers import DynamicCache

        if not layers:  # every layer adapted: nothing below them to run
            return [], [], hidden
        cache = DynamicCache(config=self.backbone.config)
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        causal = _attention_mask(torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device), query_start=0)
        rope = self.backbone.rotary_emb(hidden, position_ids=positions)
        for index in layers:
            hidden = self.backbone.layers[index](hidden, attention_mask=causal, position_ids=positions,
                                                 past_key_values=cache, use_cache=True, position_embeddings=rope)
        return [cache.layers[i].keys for i in layers], [cache.layers[i].values for i in layers], hidden

    def _tails_through(self, layers: range, hidden: Any, heads: list[_Head | None], sizes: list[int], width: int,
                       kv_of: Callable[[_Head], _Head], mask: Any, tail_pos: Any) -> Any:
        """The rows' tails through `layers`, each after its head's keys and values (`kv_of(head)` holds them,
        one per layer of `layers`; stacked here right-aligned in `width` columns)."""
        from transformers import DynamicCache

        if not layers:  # every layer adapted: the tails' embeddings go straight to the adapted pass
            return hidden
        cache = DynamicCache(config=self.backbone.config)
        for offset, index in enumerate(layers):
            cache.update(self._stacked(heads, sizes, width, lambda h: kv_of(h).keys[offset]),
                         self._stacked(heads, sizes, width, lambda h: kv_of(h).values[offset]), index)
        rope = self.backbone.rotary_emb(hidden, position_ids=tail_pos)
        for index in layers:
            hidden = self.backbone.layers[index](hidden, attention_mask=mask, position_ids=tail_pos,
                                                 past_key_values=cache, use_cache=True, position_embeddings=rope)
        return hidden

    def _adapted_full(self, plan: list[tuple[int, int, int]], heads: list[_Head | None], sizes: list[int], tails: Any,
                      real: Any, position_ids: Any, total: int) -> Any:
        """The adapted layers on every row's whole sequence, as the plain forward runs them: for adapted
        layers whose training forward differs row by row (dropout), where a shared head pass would not be exact."""
        import torch

        with torch.no_grad():
            full = self._caller_layout(plan, heads, sizes, tails, total, lambda h: h.hidden)
        positions = position_ids if position_ids is not None else torch.arange(total, device=full.device).unsqueeze(0)
        rope = self.backbone.rotary_emb(full, position_ids=positions)
        mask = _attention_mask(real, query_start=0)
        hidden = full
        for layer in self.backbone.layers[self.split:]:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions, past_key_values=None, use_cache=False,
                           position_embeddings=rope)
        return hidden

    @staticmethod
    def _caller_layout(plan: list[tuple[int, int, int]], heads: list[_Head | None], sizes: list[int], tails: Any,
                       total: int, head_output: Callable[[_Head], Any]) -> Any:
        """(rows, total, hidden) in the caller's columns: each row's head part (`head_output`), then its tail's."""
        full = tails.new_zeros((len(plan), total, tails.shape[-1]))
        for row, ((start, length, _), head, size) in enumerate(zip(plan, heads, sizes)):
            if head is not None:
                full[row, start:start + size] = head_output(head)[0].to(tails.dtype)
            full[row, start + size:start + length] = tails[row, :length - size]
        return full

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

        ids = torch.tensor([head.tokens], device=self.backbone.embed_tokens.weight.device)
        with torch.no_grad():
            head.keys, head.values, head.hidden = self._head_through(range(self.split), self.backbone.embed_tokens(ids))


def _has_dropout(layers: Any) -> bool:
    """Whether any module in `layers` drops activations at random in training (a dropout with p > 0)."""
    import torch

    return any(isinstance(module, torch.nn.Dropout) and module.p > 0 for module in layers.modules())


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
    if split >= len(backbone.layers) or not heads:
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
