"""Learning, the headline: baseline → SFT → GRPO on the embedded model, with the honest protocol.

SFT trains on the pack's `train` split; GRPO, from the SFT adapter, on `train_rl`
(wordings and intents SFT never saw) when the pack has one. As `appliance run`
does, GRPO saves a checkpoint every `grpo_select_every` steps and the stage
reported as sft_grpo is the one `appliance.pipeline.pick_candidate` keeps on
`dev` (the SFT start itself when no checkpoint beats it there without more unsafe
actions; `grpo_pick:` names it). Every stage is
evaluated greedily on each split of `--eval-splits`: `dev` is where settings are
chosen, `val` is reported once per chosen setting. pass@k of the SFT start
(sampled, T 0.7) says how much GRPO can convert: it can only reinforce what the
model sometimes does. A paired bootstrap says whether a gain holds; it resamples
templates (tasks of one template pass or fail together), and `_ci95_by_task`
gives the narrower interval that treats each task as independent.
Every stage goes through the engine functions the CLI uses (run_eval, run_sft,
run_grpo), into a throwaway workspace.

    .venv/bin/python bench/bench_learning.py [--pack workplace-single] [--sft-steps N] [--grpo-steps N]
        [--eval-splits dev,val] [--pass-k 4] [--reward SCHEME] [--sft-adapter DIR] [--strict | --no-strict]

Prints `name: value` lines (`<split>_<stage>_<metric>`), then a Markdown table per split.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py

STAGES = ("baseline", "sft", "sft_grpo")
COMPARISONS = (("sft", "baseline"), ("sft_grpo", "sft"), ("sft_grpo", "baseline"))


def main() -> None:
    from appliance.generate.strict import STRICT_HELP
    from appliance.pipeline import PipelineSettings

    run = PipelineSettings()  # the bench measures what `appliance run` does, with its defaults
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=run.model)
    parser.add_argument("--pack", default=run.pack)
    parser.add_argument("--sft-steps", type=int, default=run.sft_steps, help="default: --sft-passes over `train`")
    parser.add_argument("--sft-passes", type=float, default=run.sft_passes)
    parser.add_argument("--sft-batch-size", type=int, default=run.sft_batch_size)
    parser.add_argument("--sft-missing-tool-share", type=float, default=run.sft_missing_tool_share,
                        help="default: the pipeline's for the pack's listing")
    parser.add_argument("--sft-missing-tool-listing", default=run.sft_missing_tool_listing,
                        help="default: the pipeline's for the pack's listing")
    parser.add_argument("--sft-batch-order", default=run.sft_batch_order,
                        help="default: the pipeline's for the backend")
    parser.add_argument("--grpo-steps", type=int, default=run.grpo_steps)
    parser.add_argument("--eval-splits", default="dev,val", help="comma-separated held-out splits to evaluate on")
    parser.add_argument("--pass-k", type=int, default=4, help="pass@k of the SFT start on each split (0: skip)")
    parser.add_argument("--reward", default=None, help="GRPO reward scheme (default: the pack's)")
    parser.add_argument("--sft-adapter", default=None, help="reuse this SFT adapter instead of training one")
    parser.add_argument("--limit", type=int, default=None, help="held-out tasks per eval (default: all)")
    parser.add_argument("--strict", action=argparse.BooleanOptionalAction, default=run.strict,
                        help=f"{STRICT_HELP}: every eval and GRPO's rollouts")
    args = parser.parse_args()

    from appliance.packs import load_pack
    from appliance.pipeline import SELECTION_SPLIT
    from appliance.store import Workspace
    from appliance.train import TrainConfig, run_grpo, run_sft

    splits = [s.strip() for s in args.eval_splits.split(",") if s.strip()]
    pack = load_pack(args.pack)
    missing = [s for s in splits if s not in pack.splits]
    if missing:
        parser.error(f"pack {args.pack} has no split {', '.join(missing)}; it has {', '.join(pack.splits)}")
    run = dataclasses.replace(run, sft_steps=args.sft_steps, sft_passes=args.sft_passes,
                              sft_batch_size=args.sft_batch_size, sft_missing_tool_share=args.sft_missing_tool_share,
                              sft_missing_tool_listing=args.sft_missing_tool_listing,
                              sft_batch_order=args.sft_batch_order)
    sft_steps = run.sft_steps_for(len(pack.tasks("train")))
    tmp = tempfile.mkdtemp(prefix="bench-learning-")
    ws = Workspace.open(os.path.join(tmp, "runs"))
    common = {"model": args.model, "pack": args.pack, "output": os.path.join(tmp, "checkpoints"),
              "workspace": str(ws.root), "strict": args.strict}
    reports: dict[tuple[str, str], object] = {}
    seconds: dict[str, float] = {}

    def evaluate_all(stage: str, adapter: str | None, known: dict | None = None) -> None:
        """Each split's greedy eval of `adapter`, but for the reports in `known` (split → report), read already."""
        for split in splits:
            if known and split in known:
                reports[(split, stage)] = known[split]
                continue
            report, took = _evaluate(args, ws, adapter, split, k=1)
            reports[(split, stage)] = report
            seconds[f"{split}_{stage}_eval_s"] = took

    evaluate_all("baseline", None)
    t0 = time.perf_counter()
    sft_adapter = args.sft_adapter or run_sft(
        TrainConfig(stage="sft", steps=sft_steps, eval_every=sft_steps, batch_size=args.sft_batch_size,
                    batch_order=run.sft_order(), **run.sft_missing_tools(pack), **common), workspace=ws).final_adapter
    seconds["sft_train_s"] = 0.0 if args.sft_adapter else time.perf_counter() - t0
    evaluate_all("sft", sft_adapter)
    if args.pass_k > 1:
        for split in splits:
            report, took = _evaluate(args, ws, sft_adapter, split, k=args.pass_k)
            reports[(split, "sft_pass_k")] = report
            seconds[f"{split}_sft_pass{args.pass_k}_eval_s"] = took
    t0 = time.perf_counter()
    select_every = run.grpo_select_every if SELECTION_SPLIT in pack.splits else 0
    grpo = run_grpo(TrainConfig(stage="grpo", steps=args.grpo_steps, eval_every=select_every or args.grpo_steps,
                                init_adapter=sft_adapter, reward=args.reward, **common), workspace=ws)
    seconds["sft_grpo_train_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    picked, read = (_pick(args, ws, sft_adapter, grpo.checkpoints, reports) if select_every
                    else (grpo.final_adapter, None))
    seconds["grpo_pick_s"] = time.perf_counter() - t0
    evaluate_all("sft_grpo", picked, {SELECTION_SPLIT: read} if read else None)
    _print_results(args, splits, reports, seconds, grpo_split=TrainConfig(stage="grpo").training_split(pack))
    print(f"\nworkspace: {ws.root}")


def _pick(args: argparse.Namespace, ws: object, sft_adapter: str, checkpoints: list[str],
          reports: dict) -> tuple[str, object]:
    """The checkpoint `appliance run` hands to its gate, each read on the selection split as the pipeline does;
    returns it and its report there, so it is not evaluated on that split twice."""
    from appliance.checkpoints import load_manifest
    from appliance.pipeline import SELECTION_SPLIT, Contender, pick_candidate

    read: dict[str, object] = {}

    def contender(name: str, adapter: str) -> Contender:
        known = reports.get((SELECTION_SPLIT, "sft")) if adapter == sft_adapter else None
        read[adapter] = known or _evaluate(args, ws, adapter, SELECTION_SPLIT, k=1)[0]
        m = read[adapter].metrics
        return Contender(name, adapter, m["execution_success_rate"], m["unsafe_action_rate"])

    start = contender("the start", sft_adapter)
    chosen = pick_candidate(start, [contender(f"step {load_manifest(path)['step']}", path) for path in checkpoints])
    print(f"grpo_pick: {chosen.name}")
    return str(chosen.adapter), read[str(chosen.adapter)]


def _evaluate(args: argparse.Namespace, ws: object, adapter: str | None, split: str, k: int):
    from appliance.evaluate import EvalSettings, run_eval

    t0 = time.perf_counter()
    report = run_eval(EvalSettings(model=args.model, adapter=adapter, pack=args.pack, split=split, k=k,
                                   limit=args.limit, strict=args.strict), workspace=ws)
    return report, time.perf_counter() - t0


def _print_results(args: argparse.Namespace, splits: list[str], reports: dict, seconds: dict[str, float],
                   grpo_split: str) -> None:
    from appliance.evaluate import paired_bootstrap
    from appliance.evaluate.compare import stored_templates
    from appliance.evaluate.metrics import success_rate_by_task

    print(f"grpo_train_split: {grpo_split}")
    print(f"strict: {args.strict}")
    for split in splits:
        for stage in STAGES:
            m = reports[(split, stage)].metrics
            for name, key in (("execution_success", "execution_success_rate"), ("valid_json", "valid_json_rate"),
                              ("unsafe", "unsafe_action_rate")):
                print(f"{split}_{stage}_{name}: {m[key]:.4f}")
        if (split, "sft_pass_k") in reports:
            m = reports[(split, "sft_pass_k")].metrics
            print(f"{split}_sft_pass@{args.pass_k}: {m[f'pass@{args.pass_k}']:.4f}")
            print(f"{split}_sft_pass@1_sampled: {m['pass@1']:.4f}")
        for after, before in COMPARISONS:
            first, second = reports[(split, before)], reports[(split, after)]
            a, b = success_rate_by_task(first.samples), success_rate_by_task(second.samples)
            d = paired_bootstrap(a, b, clusters=stored_templates(first.metrics, second.metrics))
            print(f"{split}_{after}_vs_{before}_delta: {d.delta:.4f}")
            print(f"{split}_{after}_vs_{before}_ci95: {d.low:.4f}..{d.high:.4f}")  # resampling templates
            by_task = paired_bootstrap(a, b)
            print(f"{split}_{after}_vs_{before}_ci95_by_task: {by_task.low:.4f}..{by_task.high:.4f}")
    for name, value in seconds.items():
        print(f"{name}: {value:.1f}")
    for split in splits:
        print(f"\n{split}:\n")
        print("| stage | held-out execution success | valid JSON | unsafe |")
        print("|---|---|---|---|")
        for stage in STAGES:
            m = reports[(split, stage)].metrics
            print(f"| {stage} | {m['execution_success_rate']:.1%} ({m['n_tasks']} tasks) | "
                  f"{m['valid_json_rate']:.1%} | {m['unsafe_action_rate']:.1%} |")


if __name__ == "__main__":
    main()
