"""SFT batches whose rows share one prompt head: the order `batch_order = "by_head"` trains in.

A training forward runs each distinct head (system prompt + tool list) of its batch through the adapted layers
once, with a graph (appliance.train.frozen_heads); a batch of four rows drawn at random from workplace-single's
SFT rows holds two or three heads. Grouping the rows by head so that a batch holds one makes that one pass per
step. Every row is still seen once per pass over the data, in a seeded random order of whole batches; rows
left over when a head's count is not a multiple of the batch size fill mixed batches of their own.
"""
from __future__ import annotations

import random
from typing import Any, Iterator

from appliance.generate.heads import shared_heads

NO_HEAD = -1
LENGTH_WINDOW = 16  # batches' worth of a head's rows sorted by length together


def row_heads(prompts: list[list[int]]) -> list[int]:
    """Per prompt, the index of the longest shared head it starts with (`shared_heads`), or NO_HEAD."""
    heads = sorted(shared_heads(prompts), key=len, reverse=True)
    return [next((index for index, head in enumerate(heads) if prompt[:len(head)] == head), NO_HEAD)
            for prompt in prompts]


def head_grouped_order(heads: list[int], lengths: list[int], batch_size: int, rng: random.Random) -> list[int]:
    """Row indices in batches of `batch_size` that each hold one head where counts allow, batches shuffled.

    Within a head, rows of similar length meet (sorted by length in shuffled windows of LENGTH_WINDOW
    batches, as transformers' LengthGroupedSampler does): a batch is padded to its longest row.
    """
    by_head: dict[int, list[int]] = {}
    for row, head in enumerate(heads):
        by_head.setdefault(head, []).append(row)
    batches, leftovers = [], []
    window = LENGTH_WINDOW * batch_size
    for head in sorted(by_head):
        shuffled = by_head[head]
        rng.shuffle(shuffled)
        rows = [row for start in range(0, len(shuffled), window)
                for row in sorted(shuffled[start:start + window], key=lambda row: lengths[row])]
        whole = len(rows) - len(rows) % batch_size
        batches += [rows[start:start + batch_size] for start in range(0, whole, batch_size)]
        leftovers += rows[whole:]
    rng.shuffle(leftovers)
    batches += [leftovers[start:start + batch_size] for start in range(0, len(leftovers), batch_size)]
    rng.shuffle(batches)
    # A short batch (the last of the leftovers) must come last: the data loader cuts the order every batch_size.
    batches.sort(key=lambda batch: len(batch) < batch_size)
    return [row for batch in batches for row in batch]


class HeadGroupedSampler:
    """A torch sampler over `head_grouped_order`, a seeded order per pass over the data.

    The trainer names the pass (`set_epoch`, through accelerate's loader) before it iterates, so a run resumed in
    its second pass draws that pass's order; without it each iteration is the next pass.
    """

    def __init__(self, heads: list[int], lengths: list[int], batch_size: int, seed: int) -> None:
        self.heads, self.lengths, self.batch_size, self.seed, self.epoch = heads, lengths, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.heads)

    def __iter__(self) -> Iterator[int]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        return iter(head_grouped_order(self.heads, self.lengths, self.batch_size, rng))


class HeadGroupedBatches:
    """SFTTrainer mixin: with `appliance_row_heads` set, train in `HeadGroupedSampler`'s order."""

    appliance_row_heads: list[int] | None = None

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:  # transformers 5.17 trainer.py:1041
        if self.appliance_row_heads is None:
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        lengths = [len(ids) for ids in dataset["input_ids"]]
        if len(lengths) != len(self.appliance_row_heads):  # TRL kept every row, in order, when it tokenized them
            raise RuntimeError(f"the SFT dataset has {len(lengths)} rows after tokenizing, not the "
                               f"{len(self.appliance_row_heads)} whose heads were read")
        return HeadGroupedSampler(self.appliance_row_heads, lengths, self.args.train_batch_size, self.args.seed)
