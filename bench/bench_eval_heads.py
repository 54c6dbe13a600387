"""A fit check's batch: the heads that rows from several tool lists under one system prompt prefill.

Every checkpoint eval during training also answers the first 32 tasks of the
run's own training split (`TrainConfig.fit_limit`): one batch of 32 that spans
several tool lists. Greedy, 96 new tokens, the same model, side by
side in one process (these machines are noisy):

* `shared_tokens`: heads grouped on shared leading tokens alone, as before
  session 56: the groups chained down to the system prompt, and every row's tool
  list was prefilled in its padded tail;
* `tool_list_heads`: what the generator does now (appliance.generate.heads
  `branching_root`): the system prompt is prefilled once for the distinct heads
  anyway, so each tool list stays a head of its own.

Prints `name: value` lines, the ratio and how many answers are identical.

    .venv/bin/python bench/bench_eval_heads.py [--split train_rl] [--limit 32] [--adapter DIR]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from bench_eval_batches import eval_batches, run  # greedy, 96 new tokens, timed; this script runs from bench/

from appliance.generate import heads
from appliance.generate.hf import HFGenerator
from appliance.packs.pack import load_pack


class SharedTokenHeads(HFGenerator):
    """The generator as it was: a row joins the group before it by the leading tokens they share."""

    def _head_lengths(self, rows: list[list[int]], limits: list[int]) -> list[int]:
        return heads.head_lengths(rows, limits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="train_rl", help="GRPO's training split; SFT's fit check reads train")
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder (default: the base model)")
    args = parser.parse_args()

    current = HFGenerator.load("smollm2-135m", adapter=args.adapter, batch_size=32)
    previous = SharedTokenHeads(current.model, current.tokenizer, batch_size=32)
    tasks, batches = eval_batches(current, args.split, args.limit)

    run(current, [batches[0][:2]])  # warm-up
    previous_s, previous_texts = run(previous, batches)
    current_s, current_texts = run(current, batches)

    print(f"tasks: {len(tasks)}")
    print(f"tool_lists: {len({str(load_pack('workplace-single').tools_for(t)) for t in tasks})}")
    print(f"shared_tokens_s: {previous_s:.1f}")
    print(f"tool_list_heads_s: {current_s:.1f}")
    print(f"speedup: {previous_s / current_s:.2f}")
    print(f"identical_greedy_outputs: {sum(a == b for a, b in zip(previous_texts, current_texts))}/{len(tasks)}")


if __name__ == "__main__":
    main()
