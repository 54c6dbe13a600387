"""SFT step time under OpenMP's wait policies: does passive waiting cost the training step time?

`appliance` sets `OMP_WAIT_POLICY=PASSIVE` before torch loads (appliance/cli.py): spinning threads on a
2-core machine that other processes share made generation 5-20x slower (bench_generate.py). A training
step is thousands of small kernels, and a passive thread sleeps after each one, so waking it may cost the
step time when the process is alone. Each policy trains the pipeline's SFT stage (the same seed, so the same
batches) for a few steps in a child process of its own, `appliance train sft` as `appliance run` starts it,
after one warm-up child that is not counted; the policies take turns over `--rounds`. Libgomp reads
GOMP_SPINCOUNT before OMP_WAIT_POLICY, so `spin_N` is passive waiting after N spins. Every policy names its
variables, so `appliance run`'s own choice (appliance.cpu_waiting, which spins when the machine is idle) stays out.

    .venv/bin/python bench/bench_omp_wait.py [--steps 16] [--rounds 1] [--policies passive,spin_100000,active]

Prints `name: value` lines: each policy's median seconds per step (steps after the third), its ratio to
`passive`, and its final loss (the same batches and kernels: the policies should agree).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from appliance.pipeline import PipelineSettings, check_inputs

STEPS_SKIPPED = 3  # the first steps also build the CPU kernels for new batch shapes


def policy_env(policy: str) -> dict[str, str]:
    """The environment a policy's child runs under; each names OMP_WAIT_POLICY, so the pipeline adds nothing."""
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["OMP_WAIT_POLICY"] = "ACTIVE" if policy == "active" else "PASSIVE"
    if policy.startswith("spin_"):
        env["GOMP_SPINCOUNT"] = policy.removeprefix("spin_")
    elif policy not in ("passive", "active"):
        raise SystemExit(f"unknown policy {policy!r}: use passive, active or spin_N")
    return env


def step_seconds(settings, policy: str, steps: int, root: str) -> tuple[list[float], float]:
    """One child SFT run of the pipeline's stage (`settings`, settled by check_inputs) under `policy`: its step
    times after the first STEPS_SKIPPED, and its last loss."""
    from appliance.events import StepMetrics
    from appliance.pipeline import run_stage

    args = ["train", "sft", "--pack", settings.pack, "--steps", str(steps), "--eval-every", str(steps),
            "--eval-limit", "1", "--fit-limit", "0", "--batch-size", str(settings.sft_batch_size),
            "--missing-tool-share", str(settings.sft_missing_tool_share),
            "--missing-tool-listing", settings.sft_missing_tool_listing, "--batch-order", settings.sft_batch_order,
            "--workspace", os.path.join(root, "runs"), "--checkpoints", os.path.join(root, "checkpoints")]
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(policy_env(policy))
    try:
        events = run_stage(args, lambda event: None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    metrics = [e.metrics for e in events if isinstance(e, StepMetrics) and "loss" in e.metrics]
    return [float(m["time/wall_step_s"]) for m in metrics[STEPS_SKIPPED:]], float(metrics[-1]["loss"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--policies", default="passive,spin_100000,active")
    args = parser.parse_args()
    policies = args.policies.split(",")
    if "passive" not in policies:
        policies.insert(0, "passive")
    seconds: dict[str, list[float]] = {policy: [] for policy in policies}
    losses: dict[str, float] = {}
    settings = check_inputs(PipelineSettings())
    with tempfile.TemporaryDirectory() as root:
        step_seconds(settings, "passive", STEPS_SKIPPED + 2, os.path.join(root, "warm-up"))
        for round_index in range(args.rounds):
            for policy in policies:
                times, losses[policy] = step_seconds(settings, policy, args.steps,
                                                     os.path.join(root, f"{policy}-{round_index}"))
                seconds[policy] += times
    base = statistics.median(seconds["passive"])
    for policy in policies:
        median = statistics.median(seconds[policy])
        print(f"sft_step_s_{policy}: {median:.3f}")
        print(f"sft_step_ratio_{policy}_vs_passive: {median / base:.3f}")
        print(f"sft_final_loss_{policy}: {losses[policy]:.6f}")


if __name__ == "__main__":
    main()
