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

With a `Guide` (`guide_failed_groups`), a group in which no sample succeeds
gets the task's reference answer in place of its last sample (off-policy
guidance, after LUFFY: Yan et al., 2025, "Learning to Reason under Off-Policy
Guidance"). Why: on wordings SFT never saw, the 135M model almost never samples
a long answer right (0 of 20 samples for `send_email` at T 1.0, docs/learning.md
session 5), so those groups are flat or teach only the decision to act; the
reference gives the right answer a positive advantage and the policy's own wrong
attempts a negative one. The returned `guided` column (one flag per completion)
reaches the reward functions as a keyword and the store's `rollouts.guided`.

With a `FlatGroupRefill` (`resample_flat_groups`), a group whose samples all
earn the same reward is replaced by a fresh prompt from the pool, sampled anew,
for up to that many rounds: DAPO's dynamic sampling (Yu et al., 2025, "DAPO: An
Open-Source LLM Reinforcement Learning System at Scale"). Why: a flat group has
advantage 0 everywhere; GRPO from the default SFT start had 32% of its groups
flat, and from a 60-step SFT start 87% (sessions 26-27), where most steps
updated on one informative group or none. The rollout returns each row's
`task_id`, `prompt_tokens` and `sampled_prompt`, which TRL hands to the reward
functions (and so to the store's rollouts) in place of the dataset row's. A
resumed run draws its refills anew (the draw's state is not checkpointed).
"""
from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Callable

from .config import TrainConfig


@dataclass(frozen=True)
class Guide:
    """What off-policy guidance needs: each prompt's task and reference answer, and the verifier.

    `references` maps a prompt's text to (task id, reference answer text); `succeeded(task_id, text)` says
    whether a sample earns the task's success.
    """

    references: dict[str, tuple[str, str]]
    succeeded: Callable[[str, str], bool]

    def needs_guidance(self, prompt: str, texts: list[str]) -> bool:
        found = self.references.get(prompt)
        return found is not None and not any(self.succeeded(found[0], text) for text in texts)


Group = tuple[str, int]  # (prompt text, samples drawn for it)


@dataclass
class FlatGroupRefill:
    """What dynamic sampling needs: the pool's rows (`prompt`, `task_id`, `prompt_tokens`), a scorer
    `score(task_ids, texts) -> rewards` (the run's reward, unrecorded; None for a sample the loss leaves
    out, a decline under keep_decisions) and how many rounds to try."""

    rows: list[dict[str, Any]]
    score: Callable[[list[str], list[str]], list[float | None]]
    rounds: int
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)
    by_prompt: dict[str, dict[str, Any]] = field(init=False, repr=False)
    last_refilled: int = field(default=0, init=False)  # slots refilled in the last call (the groups_refilled metric)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.by_prompt = {row["prompt"]: row for row in self.rows}

    def is_flat(self, prompt: str, texts: list[str]) -> bool:
        """No two samples the loss keeps differ in reward, so the group teaches nothing."""
        rewards = [r for r in self.score([self.by_prompt[prompt]["task_id"]] * len(texts), texts) if r is not None]
        return len(rewards) < 2 or max(rewards) - min(rewards) < 1e-9

    def refill(self, groups: list[Group], samples: list[list[Any]],
               sample: Callable[[list[str], int], list[list[Any]]]) -> tuple[list[Group], list[list[Any]]]:
        """Replace flat groups (in place of their slot, same size) by fresh prompts, round after round."""
        groups, samples = list(groups), list(samples)
        used = {prompt for prompt, _ in groups}
        self.last_refilled = 0
        to_check = range(len(groups))  # a group found informative stays; only a refilled slot is checked again
        for _ in range(self.rounds):
            flat = [i for i in to_check if self.is_flat(groups[i][0], [s.text for s in samples[i]])]
            unused = [row["prompt"] for row in self.rows if row["prompt"] not in used]
            fresh = dict(zip(flat, self.rng.sample(unused, min(len(flat), len(unused)))))  # slot -> new prompt
            if not fresh:
                break
            used.update(fresh.values())
            self.last_refilled += len(fresh)
            for size in dict.fromkeys(groups[slot][1] for slot in fresh):  # usually one size: num_generations
                slots = [slot for slot in fresh if groups[slot][1] == size]
                for slot, drawn in zip(slots, sample([fresh[slot] for slot in slots], size)):
                    groups[slot], samples[slot] = (fresh[slot], size), drawn
            to_check = list(fresh)
        return groups, samples

    def columns(self, groups: list[Group]) -> dict[str, list[Any]]:
        """Each row's dataset columns for the reward functions and the recorder, refilled prompts included."""
        rows = [self.by_prompt[prompt] for prompt, n in groups for _ in range(n)]
        # TRL hands reward functions the dataset's prompt texts whatever a rollout returns: `sampled_prompt` is the real one.
        return {"task_id": [row["task_id"] for row in rows], "prompt_tokens": [row.get("prompt_tokens") for row in rows],
                "sampled_prompt": [row["prompt"] for row in rows]}


def tools_by_prompt_for(pack: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each GRPO dataset row's prompt text → the tools its answers are held to under strict decoding."""
    return {row["prompt"]: pack.tools_for(pack.task(row["task_id"])) for row in rows}


def make_guide(pack: Any, rows: list[dict[str, Any]], verify: Callable[[str, str], Any]) -> Guide:
    """A Guide over the GRPO dataset rows (`prompt`, `task_id`) of a single-turn pack."""
    from ..prompting import reference_answer

    references = {row["prompt"]: (row["task_id"], reference_answer(pack.task(row["task_id"]))) for row in rows}
    return Guide(references, lambda task_id, text: bool(verify(task_id, text).success))


class SharedPrefixRollout:
    """A TRL `rollout_func(prompts, trainer)`: one completion per (repeated) prompt, in order."""

    def __init__(self, tokenizer: Any, config: TrainConfig, guide: Guide | None = None,
                 tools_by_prompt: dict[str, Any] | None = None, refill: FlatGroupRefill | None = None) -> None:
        from appliance.generate.hf import answer_token_ids

        self.tokenizer = tokenizer
        self.config = config
        self.guide = guide
        self.refill = refill
        self.tools_by_prompt = tools_by_prompt  # prompt text → the tools its samples are held to (config.strict)
        # Each reference answer as the sampler would emit it, tokenized once for the run, not once per group.
        prompts = list(guide.references) if guide else []
        answers = answer_token_ids(tokenizer, [guide.references[p][1] for p in prompts]) if guide else []
        self.reference_ids = dict(zip(prompts, answers))

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from appliance.generate.hf import HFGenerator

        texts = [str(prompt) for prompt in prompts]
        # TRL's sampler repeats each prompt num_generations times in a row: one group = one run.
        groups = [(prompt, len(list(run))) for prompt, run in groupby(texts)]
        generator = HFGenerator(trainer.model, self.tokenizer, batch_size=len(texts))

        def sample(prompts: list[str], size: int) -> list[list[Any]]:
            held_to = self.tools_by_prompt
            return generator.generate(prompts, n=size, temperature=self.config.temperature, top_p=1.0,
                                      max_new_tokens=self.config.completion_tokens,
                                      strict_tools=None if held_to is None else [held_to[p] for p in prompts])

        per_group: list[list[Any]] = [[] for _ in groups]
        with sampling_mode(trainer.model):
            for size in dict.fromkeys(n for _, n in groups):  # usually one size: num_generations
                indices = [i for i, (_, n) in enumerate(groups) if n == size]
                for index, group_samples in zip(indices, sample([groups[i][0] for i in indices], size)):
                    per_group[index] = group_samples
            if self.refill is not None:
                groups, per_group = self.refill.refill(groups, per_group, sample)
        completions = [[list(sample.token_ids) for sample in group] for group in per_group]
        guided = [[False] * len(group) for group in completions]
        if self.guide is not None:
            for (prompt, _), group, samples, flags in zip(groups, completions, per_group, guided):
                if self.guide.needs_guidance(prompt, [s.text for s in samples]):  # False for a prompt without one
                    group[-1], flags[-1] = list(self.reference_ids[prompt]), True
        group_ids = self.tokenizer([prompt for prompt, _ in groups], add_special_tokens=False)["input_ids"]
        prompt_ids = [list(ids) for ids, (_, n) in zip(group_ids, groups) for _ in range(n)]
        output = {"prompt_ids": prompt_ids, "completion_ids": [ids for group in completions for ids in group],
                  "logprobs": None}
        if self.guide is not None:
            output["guided"] = [flag for flags in guided for flag in flags]
        if self.refill is not None:
            output.update(self.refill.columns(groups))
        return output


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

