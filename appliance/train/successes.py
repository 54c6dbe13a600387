"""Expert iteration: SFT rows from the model's own verified answers (ReST-EM, STaR, rejection-sampling FT).

The other classic RL from verifiable rewards next to a policy gradient: sample the policy on training
prompts, keep what the verifier accepts, and maximise its likelihood (the EM form of maximising
expected reward; a policy gradient that keeps only the reward-1 samples). In the appliance it is two
commands over the store:

    appliance eval --split train_rl -k 4 --adapter A             # sample, verify, store
    appliance train sft --init-adapter A --train-split train_rl --successes-from <that eval>

For each task of the training split with a stored success, the first success (by source and sample
index) becomes one SFT row: the task's prompt and the model's own text. Only training-split tasks are
read, so a held-out eval's samples never become training rows. A text stored with two verdicts is left
out (the verdict depended on something the text does not show), and each success is judged again by
today's verifier: verdicts stored under an older rule are not trusted (until session 37 a task whose
expected calls change nothing passed any call that changed nothing, WorkBench's state rule).
Multi-turn packs are refused: a stored episode keeps only its last turn's text.
Selecting needs no model: the run refuses a source without enough rows before anything loads.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ApplianceError
from .config import TRAIN_SPLITS
from .pairs import SUCCESS, distinct_samples, single_turn_split_or_fail, stored_samples

SUCCESSES_FILE = "successes.json"


@dataclass
class SuccessSelection:
    """The rows and where each came from (saved as runs/<run_id>/successes.json)."""

    rows: list[dict[str, Any]]
    rules: dict[str, Any]
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        c = self.counts
        return (f"expert iteration: {len(self.rows)} rows, the first verified success of each of "
                f"{c['tasks_with_success']} of {c['tasks_with_samples']} {self.rules['split']} tasks sampled in "
                f"{self.rules['source']} ({c['calls']} calls, {c['declines']} declines; {c['stale_verdicts']} "
                f"left out whose stored successes today's verifier does not pass)")


def select_successes(workspace: Any, pack: Any, split: str, source: str) -> SuccessSelection:
    """One row per `split` task with a stored success in `source` (a run id or an eval id) that today's verifier
    still judges a success: a verdict stored under an older rule (see the module docstring) is not trusted."""
    from ..verify import Verifier

    tasks = {task.id: task for task in pack.tasks(split)}
    by_task: dict[str, list[Any]] = {}
    samples = stored_samples(workspace, pack.name, source, flag="--successes-from")
    for sample in samples:
        if sample.task_id in tasks:
            by_task.setdefault(sample.task_id, []).append(sample)
    sampled_ids = {sample.task_id for sample in samples}
    sampled_splits = [name for name in pack.splits if sampled_ids & {task.id for task in pack.tasks(name)}]
    verifier = Verifier.for_pack(pack)
    rows, stale, calls = [], 0, 0
    try:
        for task_id in (task_id for task_id in tasks if task_id in by_task):  # the split's order
            successes = sorted(distinct_samples(by_task[task_id])[SUCCESS],
                               key=lambda s: (s.source, s.source_id, s.step or 0, s.sample_index or 0))
            verdicts = (verifier.verify(tasks[task_id], s.completion) for s in successes)
            first = next(((s, v) for s, v in zip(successes, verdicts) if v.bucket == SUCCESS), None)
            if first is None:
                stale += bool(successes)
                continue
            rows.append({"task_id": task_id, "completion": first[0].completion.strip(), "from": first[0].ref})
            calls += first[1].n_calls > 0
    finally:
        verifier.close()
    counts = {"tasks_with_samples": len(by_task), "tasks_with_success": len(rows) + stale,
              "stale_verdicts": stale, "calls": calls, "declines": len(rows) - calls}
    rules = {"source": source, "split": split, "per_task": 1, "sampled_splits": sampled_splits}
    return SuccessSelection(rows=rows, rules=rules, counts=counts)


def successes_or_fail(config: Any, pack: Any, workspace: Any) -> SuccessSelection:
    """The selection, or one sentence before any model loads when it cannot fill a batch."""
    split = single_turn_split_or_fail(config, pack, "expert iteration (--successes-from)")
    selection = select_successes(workspace, pack, split, config.successes_from)
    if len(selection.rows) < config.batch_size:
        raise ApplianceError(f"Only {len(selection.rows)} verified successes on {split} tasks in "
                             f"{config.successes_from} (need {config.batch_size}, one batch); "
                             f"{_what_to_do(selection)}.")
    return selection


def _what_to_do(selection: SuccessSelection) -> str:
    """Where the source's samples are from another split, say which and whether --train-split takes it."""
    split, source = selection.rules["split"], selection.rules["source"]
    sampled = [name for name in selection.rules["sampled_splits"] if name != split]
    trainable = [name for name in sampled if name in TRAIN_SPLITS]
    if trainable:
        return f"{source} sampled `{trainable[0]}`: pass --train-split {trainable[0]}"
    sample = f"`appliance eval --split {split} -k 4 --adapter <A>` from an adapter that sometimes succeeds"
    if sampled:
        return f"{source} sampled `{sampled[0]}`, whose tasks never become training rows; sample with {sample}"
    return f"sample more with {sample}"


def saved_successes(run_dir: Any) -> SuccessSelection:
    """The rows a run chose when it started (runs/<run_id>/successes.json)."""
    import json

    data = json.loads((run_dir / SUCCESSES_FILE).read_text(encoding="utf-8"))
    return SuccessSelection(rows=data["rows"], rules=data["rules"], counts=data.get("counts", {}))


def success_rows(pack: Any, tokenizer: Any, selection: SuccessSelection) -> list[dict[str, str]]:
    """SFT's prompt/completion rows: each task's prompt as eval renders it, the model's own answer."""
    from .common import prompt_for

    tasks = {task.id: task for split in pack.splits for task in pack.tasks(split)}
    return [{"prompt": prompt_for(pack, tokenizer, tasks[row["task_id"]]), "completion": row["completion"],
             "task_id": row["task_id"]} for row in selection.rows]
