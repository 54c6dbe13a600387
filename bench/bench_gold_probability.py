"""Did training move the model towards the expected answers? Teacher-forced, before vs after, train vs held-out.

For each task, the probability that sampling (T 1.0) yields its expected answer
exactly, under two adapters, e.g. an SFT start and the GRPO run that refined
it. With a GRPO run's `screening.json`, the train tasks are the ones it trained
on; the held-out split shows whether the change transferred. Greedy held-out
success moves only when the expected answer becomes the model's first choice;
this moves with every bit of probability, so it shows learning that success
counts cannot yet.

    .venv/bin/python bench/bench_gold_probability.py --before SFT_ADAPTER --after GRPO_ADAPTER \\
        [--screening runs/<grpo run>/screening.json] [--pack workplace-single] [--split val]

Prints `name: value` lines per task set: mean probability before and after,
mean change in log-probability, and how many tasks went up; then the same for
the set's tasks that need a call (`_call`) and those that need none (`_no_call`:
refusals and chit-chat, whose expected answer is the decline).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="adapter the run started from")
    parser.add_argument("--after", required=True, help="adapter after training")
    parser.add_argument("--screening", default=None, help="a GRPO run's screening.json: its train tasks")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--split", default="val")
    args = parser.parse_args()

    from appliance.models import load_model
    from appliance.packs import load_pack
    from appliance.train.screen import gold_logprobs

    pack = load_pack(args.pack)
    task_sets = {args.split: pack.tasks(args.split)}
    if args.screening:
        with open(args.screening, encoding="utf-8") as handle:
            chosen = {item["task_id"] for item in json.load(handle) if item["selected"]}
        trained = [split for split in ("train_rl", "train") if split in pack.splits]  # GRPO's pool since session 5
        task_sets["train_screened"] = [task for split in trained for task in pack.tasks(split) if task.id in chosen]

    def score(adapter: str) -> dict[str, dict[str, float]]:
        """Log-probabilities per task set, loading the adapter once."""
        model, tokenizer = load_model(args.model, adapter=adapter)
        return {name: gold_logprobs(pack, model, tokenizer, tasks) for name, tasks in task_sets.items()}

    scored_before, scored_after = score(args.before), score(args.after)
    for name, tasks in task_sets.items():
        before, after = scored_before[name], scored_after[name]
        subsets = {name: [t.id for t in tasks], f"{name}_call": [t.id for t in tasks if t.expected],
                   f"{name}_no_call": [t.id for t in tasks if not t.expected]}
        for subset, ids in subsets.items():
            if ids:
                report(subset, ids, before, after)


def report(name: str, ids: list[str], before: dict[str, float], after: dict[str, float]) -> None:
    print(f"{name}_tasks: {len(ids)}")
    print(f"{name}_mean_p_before: {statistics.mean(math.exp(before[i]) for i in ids):.3f}")
    print(f"{name}_mean_p_after: {statistics.mean(math.exp(after[i]) for i in ids):.3f}")
    print(f"{name}_mean_logprob_change: {statistics.mean(after[i] - before[i] for i in ids):+.3f}")
    print(f"{name}_tasks_up: {sum(after[i] > before[i] for i in ids)}")


if __name__ == "__main__":
    main()
