"""A supervised anchor for GRPO: a few of the SFT split's answers in every step's loss (PPO-ptx).

On workplace-single every GRPO run since session 6 changed the SFT start's decisions on tasks it never
sampled: it declined actions its start made and carried out refusals its start declined
(docs/learning.md). A KL term (beta) only holds the tokens GRPO samples, and a decision made on the first
token drifted past it. InstructGPT (Ouyang et al., 2022) met the same regression in PPO by mixing the
pretraining loss into the RL loss ("PPO-ptx"); here the mixed-in loss is SFT's own: the mean token NLL of
`sft_anchor_batch` examples of the `train` split (prompt masked, EOS included, as SFT trains), drawn in a
seeded order that cycles through the split, weighted by `sft_anchor`.

Rows are left-padded so every completion ends in the last column: the model then scores only the last
(longest completion + 1) positions, and the frozen-head path (frozen_heads.py) still applies.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SftAnchor:
    examples: list[tuple[list[int], list[int]]]  # (prompt ids, completion ids ending in EOS)
    weight: float
    batch_size: int
    pad_id: int
    seed: int = 0
    _order: list[int] = field(init=False, default_factory=list)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    @classmethod
    def for_pack(cls, pack: Any, tokenizer: Any, *, weight: float, batch_size: int, seed: int,
                 split: str = "train") -> SftAnchor:
        from .sft import sft_rows

        examples = []
        for row in sft_rows(pack, tokenizer, split):
            prompt = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
            completion = tokenizer(row["completion"], add_special_tokens=False)["input_ids"]
            examples.append((prompt, [*completion, tokenizer.eos_token_id]))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls(examples, weight, batch_size, pad, seed)

    def next_examples(self) -> list[tuple[list[int], list[int]]]:
        """The next batch of a seeded order that visits every example once before any repeats."""
        batch = []
        while len(batch) < min(self.batch_size, len(self.examples)):
            if not self._order:
                self._order = list(range(len(self.examples)))
                self._rng.shuffle(self._order)
            batch.append(self.examples[self._order.pop()])
        return batch

    def nll(self, model: Any) -> Any:
        """Mean NLL per completion token of the next batch, with a graph (call inside the training step)."""
        import torch

        batch = self.next_examples()
        width = max(len(p) + len(c) for p, c in batch)
        keep = max(len(c) for _, c in batch)
        device = next(model.parameters()).device
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long, device=device)
        attention = torch.zeros_like(input_ids)
        scored = torch.zeros((len(batch), keep), dtype=torch.bool, device=device)
        for row, (prompt, completion) in enumerate(batch):
            tokens = prompt + completion
            input_ids[row, width - len(tokens):] = torch.tensor(tokens, device=device)
            attention[row, width - len(tokens):] = 1
            scored[row, keep - len(completion):] = True
        logits = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=keep + 1).logits[:, :-1]
        per_token = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), input_ids[:, -keep:],
                                                      reduction="none")
        return per_token[scored].mean()
