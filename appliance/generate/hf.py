"""The transformers backend: batched `model.generate` on a CPU or a GPU without vLLM.

Prompts are tokenized once, sorted by length (so a batch wastes little on
padding), left-padded, and sent `batch_size` sequences at a time: each
`model.generate` call covers `batch_size // n` prompts, each repeated n times
(prompt-major, like `num_return_sequences`). Results are put back in the
caller's order. Stop strings end a sequence early (transformers'
StopStringCriteria) and are cut from the text afterwards.

Prompts in one call usually share a long head (system prompt and tool list).
That head is prefilled once into a KV cache and copied into every row, so only
each prompt's own tail is prefilled per row: on a CPU, prefill of ~300-token
prompts is most of the cost of short tool-call answers. When n > 1 samples are
drawn per prompt (GRPO groups), each prompt is prefilled once and its cache is
copied to its n rows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.generate.base import Generator, Sample, trim_at_stop

# Below this many common leading tokens, a separate prefill costs more than it saves.
MIN_SHARED_PREFIX_TOKENS = 16


@dataclass
class SharedPrefix:
    """The tokens all prompts of one call start with, and their prefilled KV cache (batch of 1)."""

    ids: Any
    cache: Any


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

    @classmethod
    def load(
        cls,
        model: str = "smollm2-135m",
        *,
        adapter: str | Path | None = None,
        dtype: str = "float32",
        batch_size: int = 16,
    ) -> "HFGenerator":
        """Load a model spec (catalogue name, directory or hub id) and an optional LoRA adapter."""
        from appliance.models import load_model

        loaded, tokenizer = load_model(model, adapter=adapter, dtype=dtype)
        return cls(loaded, tokenizer, batch_size=batch_size)

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
    ) -> list[list[Sample]]:
        import torch

        if seed is not None:
            torch.manual_seed(seed)
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        prefix = self._shared_prefix(encoded)
        by_length = sorted(range(len(prompts)), key=lambda index: len(encoded[index]))
        per_call = max(1, self.batch_size // max(1, n))
        results: list[list[Sample]] = [[] for _ in prompts]
        for start in range(0, len(by_length), per_call):
            chunk = by_length[start : start + per_call]
            samples = self._generate_chunk(
                [encoded[i] for i in chunk], prefix, n, temperature, top_p, max_new_tokens, stop
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
        import torch

        if len(prompts) != len(completions):
            raise ValueError("completion_logprobs needs one completion per prompt")
        if not prompts:
            return []
        encoded = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        answers = self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        if end_of_turn and self.tokenizer.eos_token_id is not None:
            answers = [[*ids, self.tokenizer.eos_token_id] for ids in answers]
        prefix = self._shared_prefix(encoded)
        cut = 0 if prefix is None else prefix.ids.shape[1]
        results: list[float] = [0.0] * len(prompts)
        for start in range(0, len(prompts), self.batch_size):
            chunk = range(start, min(start + self.batch_size, len(prompts)))
            ids, mask, cache = self._rows_after_head([encoded[i] + answers[i] for i in chunk], prefix)
            longest = max(len(answers[i]) for i in chunk)
            with torch.inference_mode():
                logits = self.model(input_ids=ids[:, cut:], attention_mask=mask,
                                    position_ids=_positions(mask)[:, cut:],
                                    past_key_values=cache, use_cache=cache is not None,
                                    logits_to_keep=longest + 1).logits.float()
            # Rows are left-padded, so every answer ends at the right edge; position t predicts token t + 1.
            logprobs = torch.log_softmax(logits[:, :-1] / max(temperature, 1e-6), dim=-1)
            targets = ids[:, -longest:]
            picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            for row, index in enumerate(chunk):
                results[index] = float(picked[row, longest - len(answers[index]):].sum())
        return results

    def _shared_prefix(self, encoded: list[list[int]]) -> SharedPrefix | None:
        """Prefill the tokens every prompt starts with (system prompt, tools) once, not once per row."""
        import torch
        from transformers import DynamicCache

        if not encoded:
            return None
        shortest = min(len(tokens) for tokens in encoded)
        length = 0
        # Stop one token short of the shortest prompt: generate needs at least one uncached token per row.
        while length < shortest - 1 and all(tokens[length] == encoded[0][length] for tokens in encoded):
            length += 1
        if length < MIN_SHARED_PREFIX_TOKENS:
            return None
        ids = torch.tensor([encoded[0][:length]], device=self.model.device)
        cache = DynamicCache(config=self._text_config())
        with torch.inference_mode():
            self.model(input_ids=ids, past_key_values=cache, use_cache=True)
        return SharedPrefix(ids=ids, cache=cache)

    def _text_config(self) -> Any:
        config = self.model.config
        return config.get_text_config() if hasattr(config, "get_text_config") else config

    def _generate_chunk(
        self,
        token_lists: list[list[int]],
        prefix: SharedPrefix | None,
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop: list[str] | None,
    ) -> list[list[Sample]]:
        import torch

        greedy = temperature <= 0
        rows_per_prompt = 1 if greedy else n  # greedy rows would all be the same; decode once and repeat
        if rows_per_prompt > 1:
            inputs = self._grouped_inputs(token_lists, prefix, rows_per_prompt)
        else:
            inputs = self._batch_inputs(token_lists, prefix, rows_per_prompt)
        config = self._generation_config(greedy, temperature, top_p, max_new_tokens, stop)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(**inputs, generation_config=config, tokenizer=self.tokenizer)
        latency = time.perf_counter() - started
        new_tokens = output[:, inputs["input_ids"].shape[1] :].tolist()
        prompt_lengths = inputs["attention_mask"].sum(dim=1).tolist()
        samples = []
        for prompt_index in range(len(token_lists)):
            first = prompt_index * rows_per_prompt
            rows = range(first, first + rows_per_prompt)
            decoded = [self._sample(new_tokens[r], int(prompt_lengths[r]), latency, stop) for r in rows]
            samples.append(decoded * n if greedy else decoded)
        return samples

    def _batch_inputs(
        self, token_lists: list[list[int]], prefix: SharedPrefix | None, rows_per_prompt: int
    ) -> dict[str, Any]:
        """Rows are prompt-major (prompt 0's samples, then prompt 1's...), each left-padded.

        With a shared prefix the padding sits between the cached prefix and each
        prompt's own tokens; generate derives position ids from the attention
        mask, so the model sees every row as one contiguous prompt.
        """
        rows = [tokens for tokens in token_lists for _ in range(rows_per_prompt)]
        ids, mask, cache = self._rows_after_head(rows, prefix)
        inputs = {"input_ids": ids, "attention_mask": mask}
        return inputs if cache is None else {**inputs, "past_key_values": cache}

    def _grouped_inputs(
        self, token_lists: list[list[int]], prefix: SharedPrefix | None, rows_per_prompt: int
    ) -> dict[str, Any]:
        """Sampling n > 1 rows per prompt: prefill each prompt once, then copy its KV cache to its n rows.

        Everything but each prompt's last token is prefilled here (one row per
        prompt, after the shared head when there is one); generate then starts
        from that last token in every row. Without this, a GRPO group of 8
        prefilled its ~650-token prompt 8 times.
        """
        import torch
        from transformers import DynamicCache

        ids, mask, cache = self._rows_after_head(token_lists, prefix)
        cut = 0 if prefix is None else prefix.ids.shape[1]
        if cache is None:
            cache = DynamicCache(config=self._text_config())
        if ids.shape[1] - 1 > cut:  # the tails have more than their last token
            before_last = mask[:, :-1]
            with torch.inference_mode():
                self.model(input_ids=ids[:, cut:-1], attention_mask=before_last,
                           position_ids=_positions(before_last)[:, cut:],
                           past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(rows_per_prompt)
        return {
            "input_ids": ids.repeat_interleave(rows_per_prompt, dim=0),
            "attention_mask": mask.repeat_interleave(rows_per_prompt, dim=0),
            "past_key_values": cache,
        }

    def _rows_after_head(self, rows: list[list[int]], prefix: SharedPrefix | None) -> tuple[Any, Any, Any]:
        """(ids, mask, cache) for rows left-padded after the shared head; cache is a copy of its KV (or None)."""
        import copy

        import torch

        cut = 0 if prefix is None else prefix.ids.shape[1]
        batch = self.tokenizer.pad({"input_ids": [tokens[cut:] for tokens in rows]}, padding=True,
                                   return_tensors="pt")
        ids, mask = batch["input_ids"].to(self.model.device), batch["attention_mask"].to(self.model.device)
        if prefix is None:
            return ids, mask, None
        cache = copy.deepcopy(prefix.cache)  # generate extends the cache in place
        cache.batch_repeat_interleave(len(rows))
        head = prefix.ids.expand(len(rows), -1)
        return torch.cat([head, ids], dim=1), torch.cat([torch.ones_like(head), mask], dim=1), cache

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


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    ids = [*ids, tokenizer.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None))
