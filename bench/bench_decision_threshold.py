"""Can moving the act-or-decline threshold alone make an adapter safe, and at what cost? Read off one eval.

Every GRPO run so far moved one threshold that all requests share: it declined refusals and actions together
(docs/learning.md, sessions 23-24). This measures, for one adapter and one stored greedy eval of it, how well
its first answer token tells the two apart, and the best any pure threshold move could do:

* the margin of each task: log p(the likeliest token that starts a call, `{` or `[`) minus log p(the
  likeliest other token), at the answer's first position of the exact prompt eval renders. Greedy acts
  when it is above 0.
* `auc`: the chance that a task needing a call has a larger margin than one needing none (1: a threshold
  separates them; 0.5: the margin knows nothing of which is which).
* the frontier: the tasks the stored eval answered with a call or an attempt are turned into declines one by
  one, least confident first, each scored by the verifier as the pack's canonical decline; the others keep
  their stored verdicts. Nothing is generated, so this is exact for declines in the canonical words and an
  approximation of how a shifted threshold would decode.

    .venv/bin/python bench/bench_decision_threshold.py --workspace runs --adapter ADAPTER --eval EVAL_ID \\
        [--pack workplace-single] [--split dev] [--tasks-root tasks] [--decline-at MARGIN]

`--eval` must be a greedy eval of `--adapter` on `--split` (free decoding). Prints `name: value` lines: the
stored success/unsafe/missed calls, `auc`, `first_token_agreement` (on how many tasks margin > 0 matches the stored
act-or-decline), the frontier's point where unsafe first reaches 0 (with `unsafe_zero_margin`, the margin of the
last act it declines: a threshold read on one split to apply on another) and its best point (success, actions
declined, unsafe). `--decline-at MARGIN` adds the point where every act with a margin at most MARGIN declines.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py


@dataclass(frozen=True)
class Outcome:
    """One task's greedy result as stored, and what a canonical decline would score instead."""

    needs_call: bool
    acted: bool            # the stored answer was a call or an attempt at one (not a plain-words decline)
    success: bool
    unsafe: bool
    decline_success: bool  # the verifier's verdict on the canonical decline for this task


def auc(margins: dict[str, float], needs_call: dict[str, bool]) -> float:
    """P(margin of a call task > margin of a no-call task), ties counted half."""
    calls = [margins[t] for t in margins if needs_call[t]]
    others = [margins[t] for t in margins if not needs_call[t]]
    if not calls or not others:
        return float("nan")
    wins = sum((c > o) + 0.5 * (c == o) for c in calls for o in others)
    return wins / (len(calls) * len(others))


def acts_least_confident_first(margins: dict[str, float], outcomes: dict[str, Outcome]) -> list[str]:
    """The tasks the stored eval acted on, in the order the frontier declines them."""
    return sorted((t for t, o in outcomes.items() if o.acted), key=lambda t: margins[t])


def frontier(margins: dict[str, float], outcomes: dict[str, Outcome]) -> list[dict[str, int]]:
    """Success, unsafe and missed calls as the acting tasks turn into declines, least confident first."""
    declined: set[str] = set()
    points = [_point(outcomes, declined)]
    for task in acts_least_confident_first(margins, outcomes):
        declined.add(task)
        points.append(_point(outcomes, declined))
    return points


def point_at(margins: dict[str, float], outcomes: dict[str, Outcome], threshold: float) -> dict[str, int]:
    """The frontier's point for a fixed threshold: every act whose margin is at most `threshold` declines."""
    return _point(outcomes, {t for t, o in outcomes.items() if o.acted and margins[t] <= threshold})


def _point(outcomes: dict[str, Outcome], declined: set[str]) -> dict[str, int]:
    success = unsafe = missed = 0
    for task, o in outcomes.items():
        if task in declined:
            success += o.decline_success
            missed += o.needs_call
        else:
            success += o.success
            unsafe += o.unsafe
            missed += o.needs_call and not o.acted
    return {"declined": len(declined), "success": success, "unsafe": unsafe, "missed_calls": missed}


def first_token_margins(model: Any, tokenizer: Any, prompts: dict[str, str]) -> dict[str, float]:
    """task id -> log p(best call-starting token) - log p(best other token) at the answer's first position."""
    import torch

    pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    starts_call = torch.tensor([piece.lstrip().startswith(("{", "[")) for piece in pieces])
    margins = {}
    model.eval()
    with torch.no_grad():
        for task_id, prompt in prompts.items():
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
            logits = model(input_ids=ids).logits[0, -1, :len(starts_call)].float()
            logp = torch.log_softmax(logits, dim=-1)
            margins[task_id] = float(logp[starts_call].max() - logp[~starts_call].max())
    return margins


def stored_outcomes(ws: Any, eval_id: str, pack: Any) -> dict[str, Outcome]:
    from appliance.evaluate.scoring import declining_everything

    _, rows = ws.query("SELECT task_id, bucket = 'success', v_unsafe, v_parse_ok AND v_n_calls = 0 FROM eval_samples "
                       "WHERE eval_id = ? AND sample_index = 0", [eval_id])
    if not rows:
        raise SystemExit(f"eval {eval_id!r} has no stored samples in this workspace.")
    declining = declining_everything(pack, [pack.task(task_id) for task_id, *_ in rows])
    outcomes = {}
    for task_id, success, unsafe, declined in rows:
        outcomes[task_id] = Outcome(needs_call=bool(pack.task(task_id).expected), acted=not declined,
                                    success=bool(success), unsafe=bool(unsafe),
                                    decline_success=bool(declining[task_id]))
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default=None, help="adapter folder (none: the base model)")
    parser.add_argument("--eval", required=True, help="a stored greedy eval of that adapter on --split")
    parser.add_argument("--workspace", default="runs")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--tasks-root", default="tasks")
    parser.add_argument("--decline-at", type=float, default=None,
                        help="also print the point where every act with a margin at most this declines")
    args = parser.parse_args()

    from appliance.models import load_model
    from appliance.packs.pack import load_pack
    from appliance.store.workspace import Workspace
    from appliance.train.common import prompt_for

    pack = load_pack(args.pack, root=args.tasks_root)
    with Workspace.open(args.workspace) as ws:
        outcomes = stored_outcomes(ws, args.eval, pack)
    model, tokenizer = load_model(args.model, adapter=args.adapter)
    margins = first_token_margins(model, tokenizer, {t: prompt_for(pack, tokenizer, pack.task(t)) for t in outcomes})
    needs_call = {t: o.needs_call for t, o in outcomes.items()}
    points = frontier(margins, outcomes)
    start = points[0]
    print(f"tasks: {len(outcomes)}")
    for key in ("success", "unsafe", "missed_calls"):
        print(f"stored_{key}: {start[key]}")
    print(f"auc: {auc(margins, needs_call):.3f}")
    agree = sum((margins[t] > 0) == o.acted for t, o in outcomes.items())
    print(f"first_token_agreement: {agree}")
    print(f"no_call_tasks_acted_on: {sum(o.acted and not o.needs_call for o in outcomes.values())}")
    if args.decline_at is not None:
        fixed = point_at(margins, outcomes, args.decline_at)
        for key in ("declined", "success", "unsafe", "missed_calls"):
            print(f"at_margin_{key}: {fixed[key]}")
    safe = next((p for p in points if p["unsafe"] == 0), None)
    if safe is None:
        print("unsafe_zero_declined: never")
        return
    print(f"unsafe_zero_declined: {safe['declined']}")
    last = acts_least_confident_first(margins, outcomes)[safe["declined"] - 1] if safe["declined"] else None
    print(f"unsafe_zero_margin: {margins[last] if last else float('-inf'):.4f}")
    print(f"unsafe_zero_success: {safe['success']}")
    print(f"unsafe_zero_missed_calls: {safe['missed_calls']}")
    best = max(points, key=lambda p: (p["success"], -p["declined"]))
    for key in ("success", "declined", "unsafe"):
        print(f"best_{key}: {best[key]}")


if __name__ == "__main__":
    main()
