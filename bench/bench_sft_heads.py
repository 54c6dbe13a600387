"""SFT steps on a real pack with and without the frozen-head cache (appliance.train.frozen_heads).

Runs the same short SFT from the same seed (same batches, same LoRA init) three
ways, after one warm-up run that is not counted (the first run in a process also
builds the CPU kernels for each batch shape; session 9's first version of this
bench ran plain first and so reported 1.57x where `make run` then measured
1.06x): `plain` (no cache), `lower_only` (the frozen lower layers skip the shared
heads; every row runs its whole sequence through the adapted layers, as before
session 16) and `shared` (as the cpu backend trains: each head also runs through
the adapted layers once per step for all its rows). Prints the median seconds per
step of each (every run's first step left out), their ratios, and how far the
losses drifted apart (bf16 autocast: other GEMM shapes, not bitwise).

    .venv/bin/python bench/bench_sft_heads.py [--pack workplace-single] [--steps 6] [--rounds 1] [--lora-layers 0]

`--lora-layers 0` puts LoRA on every layer: nothing is frozen below it, so
`lower_only` is the plain forward there and `shared` gains only the head pass.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py


MODES = ("plain", "lower_only", "shared")  # no cache; lower layers cached; lower cached and heads shared above


def run(pack: str, steps: int, root: str, mode: str, lora_layers: int | None = None) -> tuple[list[float], list[float]]:
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

    def lower_only(*args):
        cache = original(*args)
        if cache is not None:
            cache.share_adapted = False  # every row runs its whole sequence through the adapted layers
        return cache

    cpu.reuse_frozen_heads = {"plain": lambda *args: None, "lower_only": lower_only, "shared": original}[mode]
    try:
        config = TrainConfig(pack=pack, steps=steps, eval_every=steps, lora_layers=lora_layers,
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
    parser.add_argument("--lora-layers", type=int, default=None,
                        help="LoRA on the last N layers (0: all; default: the backend's)")
    args = parser.parse_args()
    steps: dict[str, list[float]] = {mode: [] for mode in MODES}
    losses: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as root:
        run(args.pack, args.steps, os.path.join(root, "warm-up"), "plain", args.lora_layers)
        for round_index in range(args.rounds):
            for mode in MODES:
                seconds, losses[mode] = run(args.pack, args.steps, os.path.join(root, f"{mode}-{round_index}"), mode,
                                              args.lora_layers)
                steps[mode] += seconds
    median = {mode: statistics.median(values) for mode, values in steps.items()}
    print(f"plain_step_s: {median['plain']:.2f}")
    print(f"frozen_lower_only_step_s: {median['lower_only']:.2f}")
    print(f"frozen_heads_step_s: {median['shared']:.2f}")
    print(f"speedup: {median['plain'] / median['shared']:.2f}")
    print(f"speedup_shared_vs_lower_only: {median['lower_only'] / median['shared']:.2f}")
    for mode in MODES[1:]:
        drift = max(abs(a - b) for a, b in zip(losses["plain"], losses[mode]))
        print(f"max_loss_difference_{mode}: {drift:.4f}")
    for mode in MODES:
        print(f"losses_{mode}: {' '.join(f'{x:.4f}' for x in losses[mode])}")


if __name__ == "__main__":
    main()
