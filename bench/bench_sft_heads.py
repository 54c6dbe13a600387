"""SFT steps on a real pack with and without the frozen-head cache (appliance.train.frozen_heads).

Runs the same short SFT twice from the same seed (same batches, same LoRA init):
once with the cache switched off, once as the cpu backend trains. Prints the
median seconds per step of each (the first step, which warms up kernels and
fills the cache, left out), their ratio, and how far the losses drifted apart
(bf16 autocast: the cache changes GEMM shapes, so not bitwise).

    .venv/bin/python bench/bench_sft_heads.py [--pack workplace-single] [--steps 6]
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        plain_steps, plain_losses = run(args.pack, args.steps, os.path.join(root, "plain"), cached=False)
        cached_steps, cached_losses = run(args.pack, args.steps, os.path.join(root, "cached"), cached=True)
    plain, cached = statistics.median(plain_steps), statistics.median(cached_steps)
    print(f"plain_step_s: {plain:.2f}")
    print(f"frozen_heads_step_s: {cached:.2f}")
    print(f"speedup: {plain / cached:.2f}")
    print(f"max_loss_difference: {max(abs(a - b) for a, b in zip(plain_losses, cached_losses)):.4f}")
    print(f"losses_plain: {' '.join(f'{x:.4f}' for x in plain_losses)}")
    print(f"losses_frozen_heads: {' '.join(f'{x:.4f}' for x in cached_losses)}")


if __name__ == "__main__":
    main()
