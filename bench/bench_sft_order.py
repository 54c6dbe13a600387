"""SFT step time by batch order: the pipeline's SFT stage with transformers' length grouping and with batches of one
tool list (`--batch-order by_head`, appliance/train/batches.py).

A CPU training forward runs each distinct head (system prompt + tool list) of its batch through the adapted
layers once (appliance/train/frozen_heads.py); `by_head` makes that one head a batch. Each order trains the
pipeline's SFT stage (its settings from `check_inputs`, the same seed) for `--steps` steps in a child process of
its own, `appliance train sft` as `appliance run` starts it, under one OpenMP wait policy (bench_omp_wait.py;
default `spin_100000`, what `appliance run` uses on an idle machine), after a warm-up child that is not counted;
the orders take turns over `--rounds`. Different orders train on different batches, so their losses differ.

    .venv/bin/python bench/bench_sft_order.py [--steps 24] [--rounds 1] [--policy spin_100000]

Prints `name: value` lines: each order's mean seconds per step (steps after the third; SFT's wall time is their
sum) and `by_head`'s ratio to `shuffled`.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile

from bench_omp_wait import STEPS_SKIPPED, step_seconds

from appliance.pipeline import PipelineSettings, check_inputs
from appliance.train.config import BATCH_ORDERS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--policy", default="spin_100000", help="an OpenMP wait policy of bench_omp_wait.py")
    args = parser.parse_args()
    settings = check_inputs(PipelineSettings())
    seconds: dict[str, list[float]] = {order: [] for order in BATCH_ORDERS}
    with tempfile.TemporaryDirectory() as root:
        step_seconds(settings, args.policy, STEPS_SKIPPED + 2, os.path.join(root, "warm-up"))
        for round_index in range(args.rounds):
            for order in BATCH_ORDERS:
                ordered = dataclasses.replace(settings, sft_batch_order=order)
                times, _ = step_seconds(ordered, args.policy, args.steps, os.path.join(root, f"{order}-{round_index}"))
                seconds[order] += times
    mean = {order: statistics.mean(times) for order, times in seconds.items()}
    for order in BATCH_ORDERS:
        print(f"sft_step_s_{order}: {mean[order]:.3f}")
    print(f"sft_step_ratio_by_head_vs_shuffled: {mean['by_head'] / mean['shuffled']:.3f}")


if __name__ == "__main__":
    main()
