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
out (the verdict depended on something the text does not show). Where a task's expected calls change
nothing in the world (packs.check.changes_nothing), only a success that is the expected calls themselves
is kept: the verifier has compared such a task's arguments since session 37, but a store's older
verdicts passed any call that changed nothing there, as WorkBench's state rule does.
Selecting needs no model: the run refuses a source without enough rows before anything loads.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ApplianceError
from .pairs import SUCCESS, distinct_samples, stored_samples

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
                f"{self.rules['source']} ({c['calls']} calls, {c['declines']} declines; "
                f"{c['tasks_changing_nothing']} left out: their expected calls change nothing and no success made them)")


def select_successes(workspace: Any, pack: Any, split: str, source: str) -> SuccessSelection:
    """One row per `split` task with a stored success in `source` (a run id or an eval id)."""
    from ..packs.check import changes_nothing
    from ..parsing import parse_tool_calls

    tasks = {task.id: task for task in pack.tasks(split)}
    by_task: dict[str, list[Any]] = {}
    for sample in stored_samples(workspace, pack.name, source):
        if sample.task_id in tasks:
            by_task.setdefault(sample.task_id, []).append(sample)
    rows, blunt = [], 0
    for task_id in (task_id for task_id in tasks if task_id in by_task):  # the split's order
        successes = distinct_samples(by_task[task_id])[SUCCESS]
        if successes and pack.world == "workbench" and changes_nothing(tasks[task_id]):
            # The state comparison cannot tell these apart: keep only the expected calls themselves.
            expected = tuple(tasks[task_id].expected)
            successes = [s for s in successes if parse_tool_calls(s.completion).calls == expected]
            blunt += not successes
        if not successes:
            continue
        first = min(successes, key=lambda s: (s.source, s.source_id, s.step or 0, s.sample_index or 0))
        rows.append({"task_id": task_id, "completion": first.completion.strip(), "from": first.ref})
    calls = sum(bool(parse_tool_calls(row["completion"]).calls) for row in rows)
    counts = {"tasks_with_samples": len(by_task), "tasks_with_success": len(rows) + blunt,
              "tasks_changing_nothing": blunt, "calls": calls, "declines": len(rows) - calls}
    return SuccessSelection(rows=rows, rules={"source": source, "split": split, "per_task": 1}, counts=counts)


def successes_or_fail(config: Any, pack: Any, workspace: Any) -> SuccessSelection:
    """The selection, or one sentence before any model loads when it cannot fill a batch."""
    split = config.training_split(pack)
    if split not in pack.splits or not pack.tasks(split):
        raise ApplianceError(f"pack '{pack.name}' has no tasks in a '{split}' split; it has "
                             f"{', '.join(pack.splits)}.")
    selection = select_successes(workspace, pack, split, config.successes_from)
    if len(selection.rows) < config.batch_size:
        source = config.successes_from
        _, rows = workspace.query("SELECT split FROM evals WHERE id = $1", [source])
        sampled = rows[0][0] if rows else None
        fix = (f"{source} sampled `{sampled}`: pass --train-split {sampled}" if sampled and sampled != split else
               f"sample more with `appliance eval --split {split} -k 4 --adapter <A>` from an adapter that "
               f"sometimes succeeds")
        raise ApplianceError(f"Only {len(selection.rows)} verified successes on {split} tasks in {source} (need "
                             f"{config.batch_size}, one batch); {fix}.")
    return selection


def success_rows(pack: Any, tokenizer: Any, selection: SuccessSelection) -> list[dict[str, str]]:
    """SFT's prompt/completion rows: each task's prompt as eval renders it, the model's own answer."""
    from .common import prompt_for

    tasks = {task.id: task for split in pack.splits for task in pack.tasks(split)}
    return [{"prompt": prompt_for(pack, tokenizer, tasks[row["task_id"]]), "completion": row["completion"],
             "task_id": row["task_id"]} for row in selection.rows]
