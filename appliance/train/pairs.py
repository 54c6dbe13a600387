"""Preference pairs for DPO, built from samples the store already holds (rollouts and eval samples).

A stored sample is one of three kinds, read from its verdict:
    success   bucket `success` and no unsafe rule fired
    failure   any other bucket, no unsafe rule fired
    unsafe    an unsafe rule fired (v_unsafe) or the bucket is `unsafe_action`
For one task, a pair is (chosen, rejected) with
    success_over_failure  a success chosen over a (safe) failure
    safe_over_unsafe      an unsafe sample always rejected, against a success when the task has one,
                          else against a safe failure (a wrong call still beats a harmful one)
so a task whose samples are all of one kind gives no pair, except that with `reference` on, a task whose
samples all failed (or were unsafe) gets the pack's reference answer as its one chosen completion: its
expected calls rendered exactly as SFT learns them (`reference_over_failure`; the pack validated them by
replay when it loaded). A model that never passes a task then still learns what it got wrong, against
the answer it should have given. Only tasks of the training split are used:
a held-out task's samples (the held-out evals of a run, say) never become training data. Identical
completions are counted once, and a text stored with two different verdicts is left out (the verdict
depended on something the text does not show). Each task gives at most `pairs_per_task` pairs, unsafe
rejections first; which samples meet is a seeded shuffle, so the same store and seed give the same pairs.

Selecting pairs needs no model or tokenizer: the run checks the count before anything loads.

Listing pairs (TrainConfig.pairs_source "listing", listing_pairs) need no store either: each tool-calling task
of the split gives two, its expected calls over a plain decline with its own listing (`call_over_decline`) and
the decline over the calls with the tools it calls left out of the listing (`decline_over_call`; the pair's
`listing` says which listing, common.listing_without_called), so the loss sees whether a tool is listed as the
reason to act or decline.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ApplianceError

SUCCESS, FAILURE, UNSAFE = "success", "failure", "unsafe"
SUCCESS_OVER_FAILURE, SAFE_OVER_UNSAFE = "success_over_failure", "safe_over_unsafe"
REFERENCE_OVER_FAILURE = "reference_over_failure"
CALL_OVER_DECLINE, DECLINE_OVER_CALL = "call_over_decline", "decline_over_call"
REFERENCE_SOURCE = "reference"  # Sample.source of a pack's reference answer (not a stored sample)
PAIRS_FILE = "pairs.json"


@dataclass(frozen=True)
class Sample:
    """One stored completion and where it came from (table, run or eval id, step, sample index)."""

    task_id: str
    completion: str
    kind: str
    source: str  # "rollouts" or "eval_samples"
    source_id: str  # run_id or eval_id
    step: int | None
    sample_index: int | None

    @property
    def ref(self) -> dict[str, Any]:
        if self.source == REFERENCE_SOURCE:
            return {"reference": self.source_id, "task_id": self.task_id}
        return {"table": self.source, "id": self.source_id, "step": self.step, "sample_index": self.sample_index}


def reference_sample(task: Any, pack_name: str) -> Sample:
    """The pack's answer to `task` as a chosen completion: what SFT trains on (reference_answer)."""
    from ..prompting import reference_answer

    return Sample(task.id, reference_answer(task), SUCCESS, REFERENCE_SOURCE, pack_name, None, None)


@dataclass
class PairSelection:
    """The pairs and the rules that chose them (saved as runs/<run_id>/pairs.json)."""

    pairs: list[dict[str, Any]]
    rules: dict[str, Any]
    counts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        c, r = self.counts, self.rules
        if CALL_OVER_DECLINE in r["pairing"]:
            return (f"dpo pairs: {len(self.pairs)} from the pack's answers to {c['tasks_with_pairs']} tool-calling "
                    f"{r['split']} tasks ({c[CALL_OVER_DECLINE]} call over decline with the task's listing, "
                    f"{c[DECLINE_OVER_CALL]} decline over call with the {r['listing']} listing less the called "
                    f"tools; seed {r['seed']})")
        return (f"dpo pairs: {len(self.pairs)} from {c.get('tasks_with_pairs', 0)} of {c.get('tasks_with_samples', 0)} "
                f"{r['split']} tasks with stored samples ({c.get(SUCCESS_OVER_FAILURE, 0)} success over failure, "
                f"{c.get(SAFE_OVER_UNSAFE, 0)} safe over unsafe, {c.get(REFERENCE_OVER_FAILURE, 0)} reference over "
                f"failure; sources: {r['sources']}; "
                f"at most {r['pairs_per_task']} per task, seed {r['seed']})")


def sample_kind(bucket: str | None, unsafe: bool | None) -> str:
    if unsafe or bucket == "unsafe_action":
        return UNSAFE
    return SUCCESS if bucket == SUCCESS else FAILURE


# ---------------------------------------------------------------- reading the store

_ROLLOUTS = ("SELECT task_id, completion, coalesce(bucket, v_bucket), v_unsafe, run_id, step, sample_index "
             "FROM rollouts WHERE {where}")
_EVAL_SAMPLES = ("SELECT task_id, completion, coalesce(bucket, v_bucket), v_unsafe, eval_id, NULL, sample_index "
                 "FROM eval_samples WHERE {where}")


def stored_samples(workspace: Any, pack_name: str, pairs_from: str | None = None,
                   flag: str = "--pairs-from") -> list[Sample]:
    """Every scored sample of `pairs_from` (a run's rollouts and the evals it ran, or one eval), or of every run
    and eval of the pack when None; `flag` is the option that named the source, for the refusals."""
    if pairs_from is None:
        queries = [(_ROLLOUTS.format(where="run_id IN (SELECT run_id FROM runs WHERE pack = $1)"), "rollouts"),
                   (_EVAL_SAMPLES.format(where="eval_id IN (SELECT id FROM evals WHERE pack = $1)"), "eval_samples")]
        params = [pack_name]
    else:
        _refuse_another_packs_source(workspace, pack_name, pairs_from, flag)
        queries = [(_ROLLOUTS.format(where="run_id = $1"), "rollouts"),
                   (_EVAL_SAMPLES.format(where="eval_id = $1 OR eval_id IN (SELECT id FROM evals WHERE run_id = $1)"),
                    "eval_samples")]
        params = [pairs_from]
    samples = []
    for sql, table in queries:
        _, rows = workspace.query(sql, params)
        for task_id, completion, bucket, unsafe, source_id, step, index in rows:
            if task_id is None or not (completion or "").strip():
                continue
            samples.append(Sample(str(task_id), completion, sample_kind(bucket, unsafe), table, str(source_id),
                                  None if step is None else int(step), None if index is None else int(index)))
    if pairs_from is not None and not samples:
        fallback = ", or leave it out to use every run and eval of the pack" if flag == "--pairs-from" else ""
        raise ApplianceError(f"No rollouts or eval samples are stored for {pairs_from!r}; pass {flag} a run id or "
                             f"an eval id of this workspace (`appliance sql \"SELECT id, pack, split FROM evals\"`)"
                             f"{fallback}.")
    return samples


def single_turn_split_or_fail(config: Any, pack: Any, what: str) -> str:
    """The training split of a stage that trains on stored samples (DPO, expert iteration); one sentence when the
    pack is multi-turn (a stored episode keeps only its last turn's text) or the split is empty. `what` is the
    stage's name in that sentence."""
    from .multiturn import is_multi_turn, turn_limit

    if is_multi_turn(pack):
        raise ApplianceError(f"{what} trains on single-turn samples, and pack '{pack.name}' is multi-turn (max_turns "
                             f"{turn_limit(pack)}); train it with sft or grpo.")
    split = config.training_split(pack)
    if split not in pack.splits or not pack.tasks(split):
        raise ApplianceError(f"pack '{pack.name}' has no tasks in a '{split}' split to train {what} on; it has "
                             f"{', '.join(pack.splits)}.")
    return split


def _refuse_another_packs_source(workspace: Any, pack_name: str, source: str, flag: str) -> None:
    """Samples of another pack's run or eval hold its task ids, which may collide with this pack's."""
    _, rows = workspace.query("SELECT pack FROM evals WHERE id = $1 UNION ALL SELECT pack FROM runs WHERE run_id = $1",
                              [source])
    other = {row[0] for row in rows if row[0] and row[0] != pack_name}
    if other:
        raise ApplianceError(f"{flag} {source} holds samples of pack {sorted(other)[0]!r}, not {pack_name!r}; pass "
                             f"a run or an eval of {pack_name!r}.")


# ---------------------------------------------------------------- pairing

def distinct_samples(samples: list[Sample]) -> dict[str, list[Sample]]:
    """Samples by kind, one per completion text; texts stored with two verdicts are dropped."""
    kinds_of: dict[str, set[str]] = {}
    for sample in samples:
        kinds_of.setdefault(sample.completion.strip(), set()).add(sample.kind)
    by_kind: dict[str, list[Sample]] = {SUCCESS: [], FAILURE: [], UNSAFE: []}
    seen: set[str] = set()
    for sample in samples:
        text = sample.completion.strip()
        if len(kinds_of[text]) == 1 and text not in seen:
            seen.add(text)
            by_kind[sample.kind].append(sample)
    return by_kind


def task_pairs(samples: list[Sample], pairs_per_task: int, rng: random.Random,
               reference: Sample | None = None) -> list[dict[str, Any]]:
    """At most `pairs_per_task` pairs for one task's samples (see the module docstring)."""
    by_kind = distinct_samples(samples)
    for pool in by_kind.values():
        rng.shuffle(pool)
    successes, failures, unsafe = by_kind[SUCCESS], by_kind[FAILURE], by_kind[UNSAFE]
    rejected_texts = {sample.completion.strip() for sample in unsafe + failures}
    if not successes and reference is not None and reference.completion.strip() not in rejected_texts:
        # No success of its own (a task the model sometimes passes keeps learning from that): the pack's answer.
        wanted = [(r, [reference], REFERENCE_OVER_FAILURE) for r in unsafe + failures]
    else:
        safe = successes or failures
        wanted = [(r, safe, SAFE_OVER_UNSAFE) for r in unsafe if safe]
        wanted += [(r, successes, SUCCESS_OVER_FAILURE) for r in failures if successes]
    pairs = []
    for i, (rejected, chosen_pool, rule) in enumerate(wanted[:pairs_per_task]):
        chosen = chosen_pool[i % len(chosen_pool)]  # round-robin: each chosen sample meets several rejected ones
        pairs.append({"task_id": rejected.task_id, "rule": rule, "chosen": chosen.completion,
                      "rejected": rejected.completion, "chosen_kind": chosen.kind, "rejected_kind": rejected.kind,
                      "chosen_from": chosen.ref, "rejected_from": rejected.ref})
    return pairs


def build_pairs(samples: list[Sample], task_ids: list[str], *, pairs_per_task: int, seed: int,
                split: str, pairs_from: str | None,
                references: dict[str, Sample] | None = None) -> PairSelection:
    """Pairs from `samples` for the tasks in `task_ids` (the training split), in a seeded order; `references`
    (task id → the pack's answer) pairs the tasks without a stored success."""
    allowed = set(task_ids)
    by_task: dict[str, list[Sample]] = {}
    for sample in samples:
        if sample.task_id in allowed:
            by_task.setdefault(sample.task_id, []).append(sample)
    pairs: list[dict[str, Any]] = []
    for task_id in sorted(by_task):
        pairs += task_pairs(by_task[task_id], pairs_per_task, random.Random(f"{seed}:{task_id}"),
                            references.get(task_id) if references else None)
    random.Random(seed).shuffle(pairs)
    counts = {"samples": len(samples), "samples_in_split": sum(len(v) for v in by_task.values()),
              "samples_outside_split": len(samples) - sum(len(v) for v in by_task.values()),
              "tasks_with_samples": len(by_task), "tasks_with_pairs": len({p["task_id"] for p in pairs}),
              SUCCESS_OVER_FAILURE: sum(p["rule"] == SUCCESS_OVER_FAILURE for p in pairs),
              SAFE_OVER_UNSAFE: sum(p["rule"] == SAFE_OVER_UNSAFE for p in pairs),
              REFERENCE_OVER_FAILURE: sum(p["rule"] == REFERENCE_OVER_FAILURE for p in pairs)}
    rules = {"sources": pairs_from or "every run and eval of the pack", "tables": ["rollouts", "eval_samples"],
             "split": split, "pairs_per_task": pairs_per_task, "seed": seed,
             "pairing": [SAFE_OVER_UNSAFE, SUCCESS_OVER_FAILURE] + ([REFERENCE_OVER_FAILURE] if references is not None else [])}
    return PairSelection(pairs=pairs, rules=rules, counts=counts)


def select_pairs(workspace: Any, pack: Any, split: str, *, pairs_from: str | None, pairs_per_task: int,
                 seed: int, reference: bool = False) -> PairSelection:
    """Read the store and pair its samples of `pack`'s `split` tasks (with the pack's answers, if `reference`)."""
    samples = stored_samples(workspace, pack.name, pairs_from)
    tasks = pack.tasks(split)
    sampled = {sample.task_id for sample in samples}  # only a task with a stored failure can use its answer
    references = ({task.id: reference_sample(task, pack.name) for task in tasks if task.id in sampled}
                  if reference else None)
    return build_pairs(samples, [task.id for task in tasks], pairs_per_task=pairs_per_task, seed=seed,
                       split=split, pairs_from=pairs_from, references=references)


def listing_pairs(pack: Any, split: str, *, listing: str, seed: int) -> PairSelection:
    """Two pairs per tool-calling task of `split` from the pack's answers (see the module docstring); a task whose
    listing would be empty without the tools it calls gives none. Seeded order, as build_pairs."""
    from ..prompting import MISSING_TOOL_TEXT, reference_answer
    from .common import listing_without_called

    pairs: list[dict[str, Any]] = []
    for task in pack.tasks(split):
        if not task.expected or not listing_without_called(pack, task, listing):
            continue
        answer = reference_answer(task)
        pairs.append({"task_id": task.id, "rule": CALL_OVER_DECLINE, "listing": None,
                      "chosen": answer, "rejected": MISSING_TOOL_TEXT})
        pairs.append({"task_id": task.id, "rule": DECLINE_OVER_CALL, "listing": listing,
                      "chosen": MISSING_TOOL_TEXT, "rejected": answer})
    random.Random(seed).shuffle(pairs)
    tasks = len(pairs) // 2  # two pairs a task, one of each rule; the counts keep build_pairs' keys
    counts = {"tasks_with_pairs": tasks, CALL_OVER_DECLINE: tasks, DECLINE_OVER_CALL: tasks}
    rules = {"sources": "the pack's answers", "split": split, "listing": listing, "seed": seed,
             "pairing": [CALL_OVER_DECLINE, DECLINE_OVER_CALL]}
    return PairSelection(pairs=pairs, rules=rules, counts=counts)
