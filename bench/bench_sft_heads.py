"""SFT steps on a real pack with and without the frozen-head cache (appliance.train.frozen_heads).

Runs the same short SFT from the same seed (same batches, same LoRA init) with the
cache switched off and as the cpu backend trains, alternating, after one warm-up
run that is not counted (the first run in a process also builds the CPU kernels
for each batch shape; session 9's first version of this bench ran plain first
and so reported 1.57x where `make run` then measured 1.06x). Prints the median
seconds per step of each (every run's first step left out), their ratio, and
how far the losses drifted apart (bf16 autocast: other GEMM shapes, not bitwise).

    .venv/bin/python bench/bench_sft_heads.py [--pack workplace-single] [--steps 6] [--rounds 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py


def run(pack: str, steps: int, root: str, cached: bool) -> tuple[list[float], list[float]]:
    from appliance.events import StepMetrics
    from appliance.train import TrainConfig, cpu
    from appliance.train.sft import run_sft

    seconds: list[float] = []
    losses: list[float] = []

    def sink(event) -> None:
        if isinstance(event, StepMetrics) and "loss" in event.metrics:
            seconds.append(float(event.metrics["time/wall_step_s"]))
            losses.append(float(event.metrics["loss"]))

    original = cpu.reuse_frozen_heads
    if not cached:
        cpu.reuse_frozen_heads = lambda *args: None
    try:
        config = TrainConfig(pack=pack, steps=steps, eval_every=steps,
                             output=os.path.join(root, "checkpoints"), workspace=os.path.join(root, "runs"))
        run_sft(config, sink=sink)
    finally:
        cpu.reuse_frozen_heads = original
    return seconds[1:], losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    plain_steps: list[float] = []
    cached_steps: list[float] = []
    with tempfile.TemporaryDirectory() as root:
        run(args.pack, args.steps, os.path.join(root, "warm-up"), cached=False)
        for round_index in range(args.rounds):
            seconds, plain_losses = run(args.pack, args.steps, os.path.join(root, f"plain-{round_index}"), cached=False)
            plain_steps += seconds
            seconds, cached_losses = run(args.pack, args.steps, os.path.join(root, f"cached-{round_index}"), cached=True)
            cached_steps += seconds
    plain, cached = statistics.median(plain_steps), statistics.median(cached_steps)
    print(f"plain_step_s: {plain:.2f}")
    print(f"frozen_heads_step_s: {cached:.2f}")
    print(f"speedup: {plain / cached:.2f}")
    print(f"max_loss_difference: {max(abs(a - b) for a, b in zip(plain_losses, cached_losses)):.4f}")
    print(f"losses_plain: {' '.join(f'{x:.4f}' for x in plain_losses)}")
    print(f"losses_frozen_heads: {' '.join(f'{x:.4f}' for x in cached_losses)}")


if __name__ == "__main__":
    main()
