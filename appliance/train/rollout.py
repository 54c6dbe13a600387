"""GRPO sampling on a CPU through our batched generator instead of TRL's plain `generate`.

TRL (without vLLM) generates with `model.generate` on the repeated prompt list,
so each prompt's ~650 tokens are prefilled once per completion (8 times per
group). `SharedPrefixRollout` is a TRL `rollout_func` that samples each group
with `HFGenerator` instead: the head all prompts share is prefilled once, each
prompt once per group, and the cache is copied to the group's rows. Sampling
runs in fp32 with the live LoRA: under bf16 autocast every decode step re-casts
all weights, which made sampling about 2x slower on this CPU (one ad-hoc run: 16
samples of 64 tokens, 95-148 s fp32 vs 201-241 s autocast, machine shared),
while the update keeps its bf16 autocast. Sampling settings (temperature, top_p 1, no
top-k, max completion tokens) are the run's; one update per generation batch
means the importance ratio is 1, so TRL needs no sampling log-probabilities.
"""
from __future__ import annotations

import contextlib
from itertools import groupby
from typing import Any

from .config import TrainConfig


class SharedPrefixRollout:
    """A TRL `rollout_func(prompts, trainer)`: one completion per (repeated) prompt, in order."""

    def __init__(self, tokenizer: Any, config: TrainConfig) -> None:
        self.tokenizer = tokenizer
        self.config = config

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from appliance.generate.hf import HFGenerator

        texts = [str(prompt) for prompt in prompts]
        # TRL's sampler repeats each prompt num_generations times in a row: one group = one run.
        groups = [(prompt, len(list(run))) for prompt, run in groupby(texts)]
        generator = HFGenerator(trainer.model, self.tokenizer, batch_size=len(texts))
        per_group: list[list[Any]] = [[] for _ in groups]
        with sampling_mode(trainer.model):
            for size in dict.fromkeys(n for _, n in groups):  # usually one size: num_generations
                indices = [i for i, (_, n) in enumerate(groups) if n == size]
                samples = generator.generate([groups[i][0] for i in indices], n=size,
                                             temperature=self.config.temperature, top_p=1.0,
                                             max_new_tokens=self.config.max_completion_tokens)
                for index, group_samples in zip(indices, samples):
                    per_group[index] = group_samples
        completion_ids = [list(sample.token_ids) for group in per_group for sample in group]
        group_ids = self.tokenizer([prompt for prompt, _ in groups], add_special_tokens=False)["input_ids"]
        prompt_ids = [list(ids) for ids, (_, n) in zip(group_ids, groups) for _ in range(n)]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


@contextlib.contextmanager
def sampling_mode(model: Any):
    """Eval mode, no gradients and fp32 (autocast off) for sampling; the training mode comes back after."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            yield
    finally:
        model.train(was_training)

