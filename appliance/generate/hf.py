"""The transformers backend: batched `model.generate` on a CPU or a GPU without vLLM.

Prompts are tokenized once, sorted by length (so a batch wastes little on
padding), left-padded, and sent `batch_size` sequences at a time: each call
covers `batch_size // n` prompts with `num_return_sequences=n`. Results are
put back in the caller's order. Stop strings end a sequence early (transformers'
StopStringCriteria) and are cut from the text afterwards.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appliance.generate.base import Generator, Sample, trim_at_stop


class HFGenerator(Generator):
    """Generation with a loaded transformers (or PEFT) model and its tokenizer."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 16) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = max(1, batch_size)
        tokenizer.padding_side = "left"  # generation continues from the right edge of every row
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
        by_length = sorted(range(len(prompts)), key=lambda index: len(encoded[index]))
        per_call = max(1, self.batch_size // max(1, n))
        results: list[list[Sample]] = [[] for _ in prompts]
        for start in range(0, len(by_length), per_call):
            chunk = by_length[start : start + per_call]
            samples = self._generate_chunk(
                [encoded[i] for i in chunk], n, temperature, top_p, max_new_tokens, stop
            )
            for index, prompt_samples in zip(chunk, samples):
                results[index] = prompt_samples
        return results

    def _generate_chunk(
        self,
        token_lists: list[list[int]],
        n: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop: list[str] | None,
    ) -> list[list[Sample]]:
        import torch

        greedy = temperature <= 0
        batch = self.tokenizer.pad({"input_ids": token_lists}, padding=True, return_tensors="pt")
        batch = {key: value.to(self.model.device) for key, value in batch.items()}
        config = self._generation_config(greedy, 1 if greedy else n, temperature, top_p, max_new_tokens, stop)
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.model.generate(**batch, generation_config=config, tokenizer=self.tokenizer)
        latency = time.perf_counter() - started
        new_tokens = output[:, batch["input_ids"].shape[1] :].tolist()
        prompt_lengths = batch["attention_mask"].sum(dim=1).tolist()
        rows_per_prompt = 1 if greedy else n
        samples = []
        for prompt_index, prompt_length in enumerate(prompt_lengths):
            rows = new_tokens[prompt_index * rows_per_prompt : (prompt_index + 1) * rows_per_prompt]
            decoded = [self._sample(row, int(prompt_length), latency, stop) for row in rows]
            samples.append(decoded * n if greedy else decoded)
        return samples

    def _generation_config(
        self, greedy: bool, sequences: int, temperature: float, top_p: float, max_new_tokens: int, stop: list[str] | None
    ) -> Any:
        from transformers import GenerationConfig

        sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
        # A fresh config, so a checkpoint's own sampling defaults (e.g. top_k=20) never leak in.
        return GenerationConfig(
            do_sample=not greedy,
            num_return_sequences=sequences,
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


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    configured = model.generation_config.eos_token_id
    ids = configured if isinstance(configured, list) else [configured]
    ids = [*ids, tokenizer.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None))
