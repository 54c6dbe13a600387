"""Per step of the pipeline's SFT stage: its wall seconds and how many distinct heads it ran through the adapted layers.

Trains the stage's settings (batch 4, missing-tool share 0.3, another domain's listing) for STEPS steps in this
process under ORDER (`shuffled` or `by_head`), waiting passively, and prints, by heads per step, the steps' count
and their median and mean seconds (the first step left out), then the mean of all.

    .venv/bin/python docs/experiments/s57/heads_per_step.py 40 shuffled
    .venv/bin/python docs/experiments/s57/heads_per_step.py 40 by_head
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections import defaultdict

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from appliance.events import StepMetrics  # noqa: E402
from appliance.train import TrainConfig, cpu  # noqa: E402
from appliance.train.sft import run_sft  # noqa: E402


def main(steps: int, order: str) -> None:
    caches, rows, passed = [], [], [0]
    original = cpu.reuse_frozen_heads

    def keep(*args):
        cache = original(*args)
        caches.append(cache)
        return cache

    def sink(event) -> None:
        if isinstance(event, StepMetrics) and "loss" in event.metrics:
            total = caches[0].stats.head_passes
            rows.append((total - passed[0], float(event.metrics["time/wall_step_s"])))
            passed[0] = total

    cpu.reuse_frozen_heads = keep
    with tempfile.TemporaryDirectory() as root:
        run_sft(TrainConfig(pack="workplace-single", steps=steps, eval_every=steps, batch_size=4,
                            missing_tool_share=0.3, missing_tool_listing="other", batch_order=order, fit_limit=0,
                            eval_limit=1, output=os.path.join(root, "c"), workspace=os.path.join(root, "w")),
                sink=sink)
    by_heads = defaultdict(list)
    for heads, seconds in rows[1:]:
        by_heads[heads].append(seconds)
    for heads in sorted(by_heads):
        times = by_heads[heads]
        print(f"heads {heads}: n {len(times)} median {statistics.median(times):.2f} mean {statistics.mean(times):.2f}")
    print(f"all: {statistics.mean(seconds for _, seconds in rows[1:]):.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
