"""Greedy decoding with and without the rows that ended leaving the batch, side by side.

An eval's batch of 32 prompts decodes until its longest answer ends; an adapter's
answers are mostly short (workplace-single dev, the SFT start: 33 tokens on
average, the longest of a batch 64-96), and on a CPU a decode step costs more the
more rows it carries. The same model, the same batches as `appliance eval` makes
them (by tool list, then length), greedy, 96 new tokens, one process:

* `one_call`: one generate call a batch, every row stepped to the batch's end, as
  before session 58;
* `phases`: what the generator does now (`HFGenerator._decode_in_phases`): every
  16 new tokens, the rows that ended leave the batch.

Prints `name: value` lines, the ratio and how many answers are identical.

    .venv/bin/python bench/bench_decode_phases.py [--split dev] [--limit 120] [--adapter DIR]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from bench_eval_batches import eval_batches, run  # greedy, 96 new tokens, timed; this script runs from bench/

from appliance.generate import hf
from appliance.generate.hf import HFGenerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder (default: the base model)")
    args = parser.parse_args()

    generator = HFGenerator.load("smollm2-135m", adapter=args.adapter, batch_size=32)
    tasks, batches = eval_batches(generator, args.split, args.limit)

    run(generator, [batches[0][:2]])  # warm-up
    phase = hf.DECODE_PHASE_TOKENS
    hf.DECODE_PHASE_TOKENS = 10 ** 6  # one phase: every row to the end of its batch
    one_call_s, one_call_texts = run(generator, batches)
    hf.DECODE_PHASE_TOKENS = phase
    phases_s, phases_texts = run(generator, batches)

    print(f"tasks: {len(tasks)}")
    print(f"one_call_s: {one_call_s:.1f}")
    print(f"phases_s: {phases_s:.1f}")
    print(f"speedup: {one_call_s / phases_s:.2f}")
    print(f"identical_greedy_outputs: {sum(a == b for a, b in zip(one_call_texts, phases_texts))}/{len(tasks)}")


if __name__ == "__main__":
    main()
