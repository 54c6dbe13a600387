"""GRPO's screening pass: the teacher-forced forward over each task's prompt and expected answer, side by side.

Before GRPO trains, every task of its pool is scored with the probability of its
expected answer (appliance.train.screen `gold_logprobs`: one forward over prompt +
answer, tasks of one tool list batched together after their shared head). The same
model, the same tasks, one process (these machines are noisy):

* `given_order`: chunks of 16 in the order the tasks come, as before session 58; a
  chunk pads every row to its longest;
* `length_order`: what the generator does now (appliance.generate.heads
  `logprob_chunks`): within a head, rows of similar length share a chunk.

Prints `name: value` lines: the seconds of each, their ratio, the padded tokens of
each and the largest difference in a task's score.

    .venv/bin/python bench/bench_screening.py [--limit 480] [--adapter DIR]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from appliance.generate import hf
from appliance.generate.hf import HFGenerator
from appliance.packs.pack import load_pack
from appliance.train.screen import gold_logprobs


def given_order(prompts: list[list[int]], answers: list[list[int]], size: int) -> list[list[int]]:
    """Chunks in the order given, as the generator took them before session 58."""
    return [list(range(start, min(start + size, len(prompts)))) for start in range(0, len(prompts), size)]


def timed(generator: HFGenerator, pack, tasks, chunker) -> tuple[float, dict[str, float], int]:
    """Seconds, scores and padded tokens past the heads of one screening pass with `chunker`."""
    padded = 0

    def counting(prompts, answers, size):
        nonlocal padded
        chunks = chunker(prompts, answers, size)
        heads = generator._head_lengths([p + a for p, a in zip(prompts, answers)], [len(p) - 1 for p in prompts])
        rows = [len(p) + len(a) - head for p, a, head in zip(prompts, answers, heads)]
        padded += sum(max(rows[i] for i in chunk) * len(chunk) for chunk in chunks)
        return chunks

    hf.logprob_chunks, kept = counting, hf.logprob_chunks
    try:
        started = time.perf_counter()
        scores = gold_logprobs(pack, generator.model, generator.tokenizer, tasks)
        return time.perf_counter() - started, scores, padded
    finally:
        hf.logprob_chunks = kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="train_rl", help="GRPO's pool in workplace-single")
    parser.add_argument("--limit", type=int, default=480, help="tasks scored (480: all of train_rl)")
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder, e.g. an SFT start (default: base)")
    args = parser.parse_args()

    generator = HFGenerator.load("smollm2-135m", adapter=args.adapter, batch_size=16)
    pack = load_pack("workplace-single")
    tasks = pack.tasks(args.split)[: args.limit]
    gold_logprobs(pack, generator.model, generator.tokenizer, tasks[:2])  # warm-up
    given_s, given_scores, given_padded = timed(generator, pack, tasks, given_order)
    length_s, length_scores, length_padded = timed(generator, pack, tasks, hf.logprob_chunks)

    print(f"tasks: {len(tasks)}")
    print(f"given_order_s: {given_s:.1f}")
    print(f"length_order_s: {length_s:.1f}")
    print(f"speedup: {given_s / length_s:.2f}")
    print(f"given_order_padded_tokens: {given_padded}")
    print(f"length_order_padded_tokens: {length_padded}")
    print(f"max_score_difference: {max(abs(given_scores[k] - length_scores[k]) for k in given_scores):.2e}")


if __name__ == "__main__":
    main()
