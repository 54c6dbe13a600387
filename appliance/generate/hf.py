"""The transformers backend: batched `model.generate` on a CPU or a GPU without vLLM.

Prompts are tokenized once, sorted by their tokens (so prompts with the same
head sit together), left-padded, and sent `batch_size` sequences at a time:
each `model.generate` call covers `batch_size // n` prompts, each repeated n
times (prompt-major, like `num_return_sequences`). Results are put back in the
caller's order. Stop strings end a sequence early (transformers'
StopStringCriteria) and are cut from the text afterwards.

Prompts in one batch usually share a long head (system prompt and tool list).
That head is prefilled once into a KV cache and copied into every row, so only
each prompt's own tail is prefilled per row: on a CPU, prefill of ~600-token
prompts is most of the cost of short tool-call answers (16 rows of 700 tokens
take ~35 s on 2 cores; 96 decode steps ~13 s). When n > 1 samples are
drawn per prompt (GRPO groups), each prompt is prefilled once and its cache is
copied to its n rows.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from appliance.generate.base import Generator, Sample, trim_at_stop
from appliance.generate.heads import (MIN_SHARED_PREFIX_TOKENS, branching_root, common_length, head_lengths,
                                      logprob_chunks)


# Greedy decoding on a CPU lets the rows that ended leave the batch every this many new tokens
# (`HFGenerator._decode_in_phases`).
DECODE_PHASE_TOKENS = 16
SHRINK_SHARE = 0.75  # ... and the batch sheds its ended rows once no more than this share of them goes on


@dataclass
class Heads:
    """The cached heads of one batch's rows, right-aligned in the first `width` columns.

    Row r's head (its group's common tokens) fills columns width - len(head_r) .. width - 1;
    the columns before it are padding, masked out. Every row's own tail follows, left-padded.
    """

    width: int
    ids: Any  # (rows, width)
    mask: Any  # (rows, width)
    cache: Any  # a DynamicCache over the width columns, or None when no row has a head


class HFGenerator(Generator):
    """Generation with a loaded transformers (or PEFT) model and its tokenizer."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 16) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = max(1, batch_size)
        tokenizer.padding_side = "left"  # generation continues from the right edge of every row
        use_grouped_query_attention(model)
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._heads_seen: dict[tuple[int, ...], Any] = {}
        self.static_cache = model.device.type == "cpu"  # why: `_with_decode_cache`

    @classmethod
    def load(
        cls,
        model: str = "smollm2-135m",
        *,
        adapter: str | Path | None = None,
        dtype: str | None = None,
        batch_size: int = 16,
        device: str | None = None,
    ) -> "HFGenerator":
        """Load a model spec (catalogue name, directory or hub id) and an optional LoRA adapter.

        `device` None means the GPU when there is one (`generation_device`): transformers loads onto
        the CPU, and a GPU machine without vLLM generates here. `dtype` None means the device's own
        (`generation_dtype`).
        """
        from appliance.models import load_model

        device = device or generation_device()
        loaded, tokenizer = load_model(model, adapter=adapter, dtype=dtype or generation_dtype(device))
        return cls(loaded.to(device), tokenizer, batch_size=batch_size)

    def generate(
        self,
        prompts: list[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        stop: list[str] | None = None,
        seed: int | None = None,
        strict_tools: Sequence[Sequence[dict[str, Any]]] | None = None,
    ) -> list[list[Sample]]:
        import torch

        if strict_tools is not None and len(strict_tools) != len(prompts):
            raise ValueError("strict_tools needs one tool list per prompt")
        if seed is not None:
            torch.manual_seed(seed)
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        # Token order puts prompts with the same head (system prompt and tool list) side by side.
        by_head = sorted(range(len(prompts)), key=lambda index: encoded[index])
        per_call = max(1, self.batch_size // max(1, n))
        results: list[list[Sample]] = [[] for _ in prompts]
        with self._reusing_heads():
            for start in range(0, len(by_head), per_call):
                chunk = by_head[start : start + per_call]
                samples = self._generate_chunk(
                    [encoded[i] for i in chunk], n, temperature, top_p, max_new_tokens, stop,
                    None if strict_tools is None else [strict_tools[i] for i in chunk],
                )
                for index, prompt_samples in zip(chunk, samples):
                    results[index] = prompt_samples
        return results

    def completion_logprobs(
        self, prompts: list[str], completions: list[str], *, temperature: float = 1.0, end_of_turn: bool = True
    ) -> list[float]:
        """Log-probability that sampling at `temperature` (top_p 1, no top-k) yields each completion exactly.

        The completion is tokenized on its own, as generation produces it after
        the prompt's tokens, and ends with the EOS token when `end_of_turn` (a
        sample only counts once the model stops). Prompts share their head's KV
        cache as in `generate`, so pass prompts that share a long head together.
        """
        if len(prompts) != len(completions):
            raise ValueError("completion_logprobs needs one completion per prompt")
        if not prompts:
            return []
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        answers = answer_token_ids(self.tokenizer, completions, end_of_turn=end_of_turn)
        results = [0.0] * len(prompts)
        with self._reusing_heads():
            for chunk in logprob_chunks(encoded, answers, self.batch_size):
                values = self._chunk_logprobs([encoded[i] for i in chunk], [answers[i] for i in chunk], temperature)
                for index, value in zip(chunk, values):
                    results[index] = value
        return results

    def _chunk_logprobs(self, prompts: list[list[int]], answers: list[list[int]], temperature: float) -> list[float]:
        import torch

        # A head may not reach into the answer: its last prompt token must be computed, it predicts the first.
        ids, mask, cache, cut = self._rows_after_heads([p + a for p, a in zip(prompts, answers)],
                                                       [len(p) - 1 for p in prompts])
        longest = max(len(answer) for answer in answers)
        with torch.inference_mode():
            logits = self.model(input_ids=ids[:, cut:], attention_mask=mask, position_ids=_positions(mask)[:, cut:],
                                past_key_values=cache, use_cache=cache is not None,
                                logits_to_keep=longest + 1).logits.float()
        # Rows are left-padded, so every answer ends at the right edge; position t predicts token t + 1.
        logprobs = torch.log_softmax(logits[:, :-1] / max(temperature, 1e-6), dim=-1)
        picked = logprobs.gather(-1, ids[:, -longest:].unsqueeze(-1)).squeeze(-1)
        return [float(picked[row, longest - len(answer):].sum()) for row, answer in enumerate(answers)]

    def _head_lengths(self, rows: list[list[int]], limits: list[int]) -> list[int]:
        """How many leading tokens of each row come from a cached head (0: none); groups as in
        appliance.generate.heads.head_groups. Generate needs at least one uncached token per row.

        `_prefill_distinct` computes the common root of the distinct heads once, so rows that share
        only the system prompt keep their own tool-list heads. Grouped on the system prompt, every row
        prefilled its whole tool list in the batch's padded tail: a fit check's 32 tasks over 6 lists took
        80.1 s, against 34.4 s now with the same answers (`bench/bench_eval_heads.py`, session 56)."""
        return head_lengths(rows, limits, MIN_SHARED_PREFIX_TOKENS,
                            root=branching_root(rows, MIN_SHARED_PREFIX_TOKENS))

    def _prefill_heads(self, rows: list[list[int]], heads: list[int]) -> Heads | None:
        """Prefill each distinct head once (a batch of one) and lay the caches out row by row."""
        import torch
        from transformers import DynamicCache

        width = max(heads, default=0)
        if width == 0:
            return None
        distinct = self._prefill_distinct(
            list(dict.fromkeys(tuple(tokens[:head]) for tokens, head in zip(rows, heads) if head)))
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long, device=self.model.device)
        mask = torch.zeros_like(ids)

        def blank(like: Any) -> Any:
            return like.new_zeros((len(rows), like.shape[1], width, like.shape[3]))

        layers = [(blank(layer.keys), blank(layer.values)) for layer in next(iter(distinct.values())).layers]
        for row, (tokens, head) in enumerate(zip(rows, heads)):
            if not head:
                continue
            ids[row, width - head:] = torch.tensor(tokens[:head])
            mask[row, width - head:] = 1
            for (row_keys, row_values), layer in zip(layers, distinct[tuple(tokens[:head])].layers):
                row_keys[row, :, width - head:] = layer.keys[0]
                row_values[row, :, width - head:] = layer.values[0]
        cache = DynamicCache(config=self._text_config())
        for index, (layer_keys, layer_values) in enumerate(layers):
            cache.update(layer_keys, layer_values, index)
        return Heads(width=width, ids=ids, mask=mask, cache=cache)

    def _prefill_distinct(self, keys: list[tuple[int, ...]]) -> dict[tuple[int, ...], Any]:
        """A KV cache (batch of one) per distinct head; the heads' common root is prefilled only once.

        Rows from different tool lists still share the system prompt: GRPO's
        groups of one prompt each would otherwise prefill it once per prompt.
        """
        import copy

        import torch
        from transformers import DynamicCache

        def extend(cache: Any, tokens: tuple[int, ...]) -> Any:
            if tokens:
                with torch.inference_mode():
                    self.model(input_ids=torch.tensor([tokens], device=self.model.device), past_key_values=cache,
                               use_cache=True)
            return cache

        known = {key: self._heads_seen[key] for key in keys if key in self._heads_seen}
        missing = [key for key in keys if key not in known]
        root = min((common_length(missing[0], key) for key in missing), default=0) if len(missing) > 1 else 0
        if root < MIN_SHARED_PREFIX_TOKENS:
            made = {key: extend(DynamicCache(config=self._text_config()), key) for key in missing}
        else:
            shared = extend(DynamicCache(config=self._text_config()), missing[0][:root])
            made = {key: extend(copy.deepcopy(shared), key[root:]) for key in missing}
        self._heads_seen.update(made)
        return {**known, **made}

    @contextmanager
    def _reusing_heads(self) -> Iterator[None]:
        """Within one call, a head prefilled for one batch serves every later batch that has it (read only)."""
        self._heads_seen = {}
        try:
            yield
        finally:
            self._heads_seen = {}

    def _text_config(self) -> Any:
        config = self.model.config
        return config.get_text_config() if hasattr(config, "get_text_config") else config

    def _generate_chunk(
        self,
        token_lists: list[list[int]],
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop: list[str] | None,
        strict_tools: list[Sequence[dict[str, Any]]] | None = None,
    ) -> list[list[Sample]]:
        import torch
        from transformers import LogitsProcessorList

        greedy = temperature <= 0
        rows_per_prompt = 1 if greedy else n  # greedy rows would all be the same; decode once and repeat
        if rows_per_prompt > 1:
            inputs = self._grouped_inputs(token_lists, rows_per_prompt)
        else:
            inputs = self._batch_inputs(token_lists)
        inputs = self._with_decode_cache(inputs, max_new_tokens)
        held = None if strict_tools is None else self._grammar_processor(strict_tools, rows_per_prompt)
        prompt_lengths = inputs["attention_mask"].sum(dim=1).tolist()
        started = time.perf_counter()
        with torch.inference_mode():
            if greedy and held is None and self.static_cache:
                new_tokens = self._decode_in_phases(inputs, max_new_tokens, stop)
            else:
                config = self._generation_config(greedy, temperature, top_p, max_new_tokens, stop)
                output = self.model.generate(**inputs, generation_config=config, tokenizer=self.tokenizer,
                                             logits_processor=LogitsProcessorList([held] if held else []))
                new_tokens = output[:, inputs["input_ids"].shape[1] :].tolist()
        latency = time.perf_counter() - started
        samples = []
        for prompt_index in range(len(token_lists)):
            first = prompt_index * rows_per_prompt
            rows = range(first, first + rows_per_prompt)
            decoded = [self._sample(new_tokens[r], int(prompt_lengths[r]), latency, stop) for r in rows]
            samples.append(decoded * n if greedy else decoded)
        return samples

    def _decode_in_phases(self, inputs: dict[str, Any], max_new_tokens: int, stop: list[str] | None) -> list[list[int]]:
        """Greedy decoding in phases of DECODE_PHASE_TOKENS: after each, the rows that have ended leave the batch
        and the rest go on with their own cache rows. Returns each row's new tokens, padded as generate pads them.

        Why: generate steps every row of a batch until its longest answer ends, and on a CPU a step's cost grows
        with its rows (over a ~750-token head: 0.27 s for 32 rows, 0.11 s for 8; docs/experiments/s58/
        step_cost.py). An adapter's answers are short next to the longest of 32 (the SFT start on dev: 33 tokens
        on average, the longest of a batch 64-96). A row computes what it would in one call; only the batch
        around it shrinks. `bench/bench_decode_phases.py --adapter <SFT start>` (session 58, 2 cores): dev's 120
        tasks 92.6 s in one call, 74.1 s in phases, 120 of 120 answers the same; the base model on val 100.1 s
        and 100.5 s (its answers run to the budget)."""
        import torch

        ids, mask, cache = inputs["input_ids"], inputs["attention_mask"], inputs["past_key_values"]
        new: list[list[int]] = [[] for _ in range(ids.shape[0])]
        batch, left = list(range(ids.shape[0])), max_new_tokens  # the rows the batch holds, by position
        going = list(range(len(batch)))  # positions in the batch still decoding
        while True:
            phase = min(DECODE_PHASE_TOKENS, left)
            config = self._generation_config(True, 0.0, 1.0, phase, stop)
            tokens = self.model.generate(input_ids=ids, attention_mask=mask, past_key_values=cache,
                                         generation_config=config, tokenizer=self.tokenizer)[:, ids.shape[1]:]
            for position in going:
                new[batch[position]].extend(tokens[position].tolist())
            left -= phase
            going = [position for position in going if self._running(new[batch[position]], phase, stop)]
            if not going or left <= 0:
                break
            ids, mask = torch.cat([ids, tokens], dim=1), torch.cat([mask, torch.ones_like(tokens)], dim=1)
            # Copying the cache rows costs more than stepping a few ended rows on (their tokens are dropped).
            if len(going) <= SHRINK_SHARE * len(batch):
                keep = torch.tensor(going, device=ids.device)
                ids, mask, cache = ids[keep], mask[keep], self._cache_rows(cache, keep, left)
                batch, going = [batch[position] for position in going], list(range(len(going)))
        width = max(len(tokens) for tokens in new)
        return [tokens + [self.pad_id] * (width - len(tokens)) for tokens in new]

    def _running(self, tokens: list[int], phase: int, stop: list[str] | None) -> bool:
        """Whether a row that decoded `tokens` so far would go on: no EOS, its last phase filled up, and, with stop
        strings, none in its text and no padding after one."""
        length, ended = self._generated_length(tokens)
        if ended or len(tokens) % phase:
            return False
        if not any(stop or ()):
            return True
        text = self.tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return length == len(tokens) and not trim_at_stop(text, stop)[1]

    def _cache_rows(self, cache: Any, keep: Any, left: int) -> Any:
        """A StaticCache of `keep`'s rows of `cache`, with room for `left` more tokens each."""
        filled = int(cache.get_seq_length())
        return self._static_cache([(layer.keys[keep, :, :filled], layer.values[keep, :, :filled])
                                   for layer in cache.layers], filled + left)

    def _grammar_processor(self, strict_tools: list[Sequence[dict[str, Any]]], rows_per_prompt: int) -> Any:
        """The logits processor that holds each row to its prompt's tools (rows are prompt-major)."""
        from appliance.generate.hf_grammar import GrammarCompilerCache, GrammarLogitsProcessor

        cache = GrammarCompilerCache.for_tokenizer(self.tokenizer, self._text_config().vocab_size, self.eos_ids)
        grammars = [grammar for grammar in map(cache.compiled, strict_tools) for _ in range(rows_per_prompt)]
        return GrammarLogitsProcessor(grammars, cache.vocab_size)

    def _with_decode_cache(self, inputs: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
        """The KV cache generate decodes into, holding whatever `inputs` prefilled, one row per output row.

        On a CPU, a StaticCache: a DynamicCache grows by concatenation, which copies every row's
        whole cache at every decode step, and that copy moved more memory than the model's
        weights. On a GPU, the DynamicCache: with a StaticCache transformers compiles the forward,
        and an eval paid that compile again and again (`python bench/bench_gpu_eval_in_unsloth.py`,
        one H200: 32 val tasks took 18.0 s static, 1.3 s dynamic, the same answers).
        """
        rows, length = inputs["input_ids"].shape
        prefilled = inputs.get("past_key_values")
        if not self.static_cache:
            if prefilled is not None and prefilled.get_seq_length() > 0:
                prefilled.batch_repeat_interleave(rows // prefilled.layers[0].keys.shape[0])
            return inputs
        layers = [] if prefilled is None else [
            (layer.keys.repeat_interleave(rows // layer.keys.shape[0], dim=0),
             layer.values.repeat_interleave(rows // layer.keys.shape[0], dim=0)) for layer in prefilled.layers]
        return {**inputs, "past_key_values": self._static_cache(layers, length + max_new_tokens)}

    def _static_cache(self, layers: list[tuple[Any, Any]], max_cache_len: int) -> Any:
        """A StaticCache of `max_cache_len` columns holding each layer's (keys, values) at its start."""
        from transformers import StaticCache

        static = StaticCache(config=self._text_config(), max_cache_len=max_cache_len)
        for (keys, values), target in zip(layers, static.layers):
            target.update(keys, values)
        return static

    def _batch_inputs(self, token_lists: list[list[int]]) -> dict[str, Any]:
        """One row per prompt: cached heads on the left, each tail left-padded after them.

        generate derives position ids from the attention mask, so the model sees
        every row as one contiguous prompt whatever padding sits inside it.
        """
        ids, mask, cache, _ = self._rows_after_heads(token_lists, [len(tokens) - 1 for tokens in token_lists])
        inputs = {"input_ids": ids, "attention_mask": mask}
        return inputs if cache is None else {**inputs, "past_key_values": cache}

    def _grouped_inputs(self, token_lists: list[list[int]], rows_per_prompt: int) -> dict[str, Any]:
        """Sampling n > 1 rows per prompt: prefill each prompt once, then copy its KV cache to its n rows.

        Everything but each prompt's last token is prefilled here (one row per
        prompt, after its cached head); generate then starts from that last
        token in every row. Without this, a GRPO group of 8 prefilled its
        ~650-token prompt 8 times.
        """
        import torch
        from transformers import DynamicCache

        ids, mask, cache, cut = self._rows_after_heads(token_lists, [len(tokens) - 1 for tokens in token_lists])
        if cache is None:
            cache = DynamicCache(config=self._text_config())
        if ids.shape[1] - 1 > cut:  # the tails have more than their last token
            before_last = mask[:, :-1]
            with torch.inference_mode():
                self.model(input_ids=ids[:, cut:-1], attention_mask=before_last,
                           position_ids=_positions(before_last)[:, cut:],
                           past_key_values=cache, use_cache=True)
        # The copy to each prompt's n rows happens once, into the decode cache (`_with_decode_cache`).
        return {
            "input_ids": ids.repeat_interleave(rows_per_prompt, dim=0),
            "attention_mask": mask.repeat_interleave(rows_per_prompt, dim=0),
            "past_key_values": cache,
        }

    def _rows_after_heads(self, rows: list[list[int]], limits: list[int]) -> tuple[Any, Any, Any, int]:
        """(ids, mask, cache, cut): each row's cached head, then its tail left-padded; the cache covers `cut` columns."""
        import torch

        lengths = self._head_lengths(rows, limits)
        heads = self._prefill_heads(rows, lengths)
        cut = 0 if heads is None else heads.width
        own = [tokens[head:] for tokens, head in zip(rows, lengths)]
        batch = self.tokenizer.pad({"input_ids": own}, padding=True, return_tensors="pt")
        ids, mask = batch["input_ids"].to(self.model.device), batch["attention_mask"].to(self.model.device)
        if heads is None:
            return ids, mask, None, 0
        return torch.cat([heads.ids, ids], dim=1), torch.cat([heads.mask, mask], dim=1), heads.cache, cut

    def _generation_config(
        self, greedy: bool, temperature: float, top_p: float, max_new_tokens: int, stop: list[str] | None
    ) -> Any:
        from transformers import GenerationConfig

        sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
        # A fresh config, so a checkpoint's own sampling defaults (e.g. top_k=20) never leak in.
        return GenerationConfig(
            do_sample=not greedy,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            stop_strings=[s for s in stop or () if s] or None,
            **sampling,
        )

    def _sample(self, row: list[int], prompt_tokens: int, latency: float, stop: list[str] | None) -> Sample:
        length, ended = self._generated_length(row)
        text = self.tokenizer.decode(row[:length], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        text, stopped = trim_at_stop(text, stop)
        return Sample(
            text=text,
            completion_tokens=length,
            prompt_tokens=prompt_tokens,
            latency_s=latency,
            finish_reason="stop" if ended or stopped else "length",
            token_ids=tuple(row[:length]),
        )

    def _generated_length(self, row: list[int]) -> tuple[int, bool]:
        """Tokens the model produced (EOS included), and whether it ended with EOS."""
        for index, token in enumerate(row):
            if token in self.eos_ids:
                return index + 1, True
        length = len(row)
        while length > 0 and row[length - 1] == self.pad_id:  # padding after a stop-string finish
            length -= 1
        return length, False


def generation_device() -> str:
    """Where a model loaded for generation goes: "cuda" when a GPU is visible, else "cpu".

    Seen on an H200 (session 26): an eval inside an Unsloth SFT run kept its fresh copy of the model on the
    CPU, where Unsloth's patched rotary embedding put its cos/sin table on the GPU, and the first forward
    failed on mixed devices; it also meant every eval on a GPU machine without vLLM ran on the CPU.
    """
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _positions(mask: Any) -> Any:
    """Position ids of left-padded rows: each row counts from 0 at its first real token."""
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


GROUPED_SDPA = "appliance_grouped_sdpa"


def use_grouped_query_attention(model: Any) -> bool:
    """On a CPU, let SDPA read grouped KV heads directly instead of copying them per layer and step.

    With a padding mask, transformers' SDPA path repeats the KV heads up to
    the query heads (SmolLM2: 3 -> 9) before every attention call, which copies
    the whole KV cache each decode step. torch's SDPA groups heads itself
    (`enable_gqa=True`) with bitwise-identical results; it is only slow on CUDA,
    so this stays on CPUs. Returns whether the model now uses it.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or base.device.type != "cpu":
        return False
    if getattr(config, "num_key_value_heads", None) in (None, getattr(config, "num_attention_heads", None)):
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa_attention)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    base.set_attn_implementation(GROUPED_SDPA)
    return True


def _grouped_sdpa_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any):
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is None or kwargs.get("position_bias") is not None or key.shape[1] == query.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # What transformers does with a mask (is_causal is False then), minus the copy of the KV heads.
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=kwargs.get("dropout", 0.0),
        scale=kwargs.get("scaling"),
        enable_gqa=True,
    )
    return output.transpose(1, 2).contiguous(), None


def answer_token_ids(tokenizer: Any, answers: Sequence[str], *, end_of_turn: bool = True) -> list[list[int]]:
    """Answers as generation emits them after a prompt: tokenized on their own, then EOS when `end_of_turn`."""
    ids = [list(row) for row in tokenizer(list(answers), add_special_tokens=False)["input_ids"]] if answers else []
    if end_of_turn and tokenizer.eos_token_id is not None:
        ids = [[*row, tokenizer.eos_token_id] for row in ids]
    return ids


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    ids = [*ids, tokenizer.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None))


def generation_dtype(device: str) -> str:
    """The weights' dtype for generating on `device`: bfloat16 on a GPU that has it, float32 elsewhere.

    float32 on a GPU doubles the memory for nothing (an 8B model: about 32 GB against 16) and an eval
    inside an Unsloth run holds this copy beside the training one. The CPU keeps float32, the dtype
    every CPU number in the README was measured with.
    """
    import torch

    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return "bfloat16"
    return "float32"
