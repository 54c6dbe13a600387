"""Learning, the headline: baseline → SFT → GRPO on the embedded model, held-out success and wall time.

Every stage goes through the same engine functions the CLI uses (run_eval,
run_sft, run_grpo), on the pack's held-out `val` split (greedy, k=1), into a
throwaway workspace. The paired bootstrap over tasks says whether a gain holds.

    .venv/bin/python bench/bench_learning.py [--pack workplace-single] [--sft-steps 150] [--grpo-steps 30]

Prints `name: value` lines, then a Markdown table for the README.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--grpo-steps", type=int, default=30)
    parser.add_argument("--limit", type=int, default=None, help="held-out tasks per eval (default: all)")
    args = parser.parse_args()

    from appliance.evaluate import EvalSettings, paired_bootstrap, run_eval
    from appliance.evaluate.metrics import success_rate_by_task
    from appliance.store import Workspace
    from appliance.train import TrainConfig, run_grpo, run_sft

    tmp = tempfile.mkdtemp(prefix="bench-learning-")
    ws = Workspace.open(os.path.join(tmp, "runs"))
    common = {"model": args.model, "pack": args.pack, "output": os.path.join(tmp, "checkpoints"),
              "workspace": str(ws.root)}

    def evaluate(adapter: str | None):
        t0 = time.perf_counter()
        report = run_eval(EvalSettings(model=args.model, adapter=adapter, pack=args.pack, split="val", k=1,
                                       limit=args.limit), workspace=ws)
        return report, time.perf_counter() - t0

    rows = []
    base, base_s = evaluate(None)
    rows.append(("baseline", base, base_s, 0.0))
    t0 = time.perf_counter()
    sft = run_sft(TrainConfig(stage="sft", steps=args.sft_steps, eval_every=args.sft_steps, **common), workspace=ws)
    sft_train_s = time.perf_counter() - t0
    sft_eval, sft_eval_s = evaluate(sft.final_adapter)
    rows.append(("SFT", sft_eval, sft_eval_s, sft_train_s))
    t0 = time.perf_counter()
    grpo = run_grpo(TrainConfig(stage="grpo", steps=args.grpo_steps, eval_every=args.grpo_steps,
                                init_adapter=sft.final_adapter, **common), workspace=ws)
    grpo_train_s = time.perf_counter() - t0
    grpo_eval, grpo_eval_s = evaluate(grpo.final_adapter)
    rows.append(("SFT+GRPO", grpo_eval, grpo_eval_s, grpo_train_s))

    for name, report, eval_s, train_s in rows:
        key = name.lower().replace("+", "_")
        m = report.metrics
        print(f"{key}_execution_success: {m['execution_success_rate']:.4f}")
        print(f"{key}_valid_json: {m['valid_json_rate']:.4f}")
        print(f"{key}_unsafe: {m['unsafe_action_rate']:.4f}")
        print(f"{key}_train_s: {train_s:.1f}")
        print(f"{key}_eval_s: {eval_s:.1f}")
    overall = paired_bootstrap(success_rate_by_task(base.samples), success_rate_by_task(grpo_eval.samples))
    grpo_gain = paired_bootstrap(success_rate_by_task(sft_eval.samples), success_rate_by_task(grpo_eval.samples))
    print(f"sft_grpo_vs_baseline_delta: {overall.delta:.4f}")
    print(f"sft_grpo_vs_baseline_ci95: {overall.low:.4f}..{overall.high:.4f}")
    print(f"grpo_vs_sft_delta: {grpo_gain.delta:.4f}")
    print(f"grpo_vs_sft_ci95: {grpo_gain.low:.4f}..{grpo_gain.high:.4f}")
    print()
    print("| stage | held-out execution success | valid JSON | unsafe | train time | eval time |")
    print("|---|---|---|---|---|---|")
    for name, report, eval_s, train_s in rows:
        m = report.metrics
        print(f"| {name} | {m['execution_success_rate']:.1%} ({m['n_tasks']} tasks) | {m['valid_json_rate']:.1%} "
              f"| {m['unsafe_action_rate']:.1%} | {train_s / 60:.1f} min | {eval_s / 60:.1f} min |")
    print(f"\nworkspace: {ws.root}")


if __name__ == "__main__":
    main()
