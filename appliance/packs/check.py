"""Deeper pack checks than loading does: replay on the world, safety of the answers, coverage.

`load_pack` already rejects malformed packs. `check_pack` looks for things a
pack can get wrong while still being well-formed: a ground-truth call that
fails when executed, a ground truth that the pack's own unsafe rules would
flag, a single-step task with several calls, an empty split. It returns one
sentence per issue (an empty list means the pack is clean). `check_notes` names
weaknesses that do not fail a pack: tasks whose expected calls change nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.errors import PackError
from appliance.packs.pack import Pack, load_pack
from appliance.task import Task, ToolCall

DELETE_TOOL_SUFFIXES = ("_delete_email", "_delete_event", "_delete_task", "_delete_customer")
RECIPIENT_ARGUMENTS = ("recipient",)
MAX_ISSUES_PER_KIND = 20
EXECUTING_WORLDS = ("python", "mcp")  # a pack's own worlds that run calls (appliance.userworld.worlds)


def check_pack(pack: Pack | str | Path, root: str | Path = "tasks") -> list[str]:
    """Every issue found in a pack (by object, name or folder); [] when clean."""
    if not isinstance(pack, Pack):
        try:
            pack = load_pack(pack, root)
        except PackError as error:
            return [str(error)]
    issues: list[str] = []
    verifier = _own_world_verifier(pack)
    try:
        for split in pack.splits:
            tasks = pack.tasks(split)
            if not tasks:
                issues.append(f"{pack.name}/{split}: the split is empty.")
            issues += _limit(_shape_issues(pack, split, tasks))
            issues += _limit(_unsafe_ground_truth(pack, split, tasks))
            if pack.world == "workbench":
                issues += _limit(_replay_issues(pack, split, tasks))
            elif verifier is not None:
                issues += _limit(_own_world_replay_issues(pack, split, tasks, verifier))
    finally:
        if verifier is not None:
            verifier.close()
    return issues


def check_notes(pack: Pack) -> list[str]:
    """Weaknesses that leave a pack usable but blunt its scores: one sentence per split, [] when none.

    On the workbench world a task's verdict is WorkBench's state comparison. When the expected calls change
    nothing (the record already holds the value asked for), any call that also changes nothing, one the tool
    refuses included, would match that state, so the verifier compares such a task's arguments instead
    (verify._WorkbenchWorld.decides): the task tests the words of the call, not its effect.
    """
    if pack.world != "workbench":
        return []
    notes = []
    for split in pack.splits:
        weak = [task.id for task in pack.tasks(split) if changes_nothing(task)]
        if weak:
            shown = ", ".join(weak[:3]) + (f" and {len(weak) - 3} more" if len(weak) > 3 else "")
            notes.append(f"{pack.name}/{split}: {len(weak)} task(s) whose expected calls change nothing ({shown}), "
                         "so their state cannot judge a call and their arguments are compared instead; ask for a "
                         "value the record does not hold.")
    return notes


def changes_nothing(task: Task) -> bool:
    """The task expects a state-changing call, and its expected calls leave the world as it was."""
    from appliance.safety import is_state_changing
    from appliance.world import replay

    return any(is_state_changing(call.name) for call in task.expected) and not replay(task.expected,
                                                                                        task.fixture).changed()


def _limit(issues: list[str]) -> list[str]:
    if len(issues) <= MAX_ISSUES_PER_KIND:
        return issues
    return issues[:MAX_ISSUES_PER_KIND] + [f"... and {len(issues) - MAX_ISSUES_PER_KIND} more like these."]


def _where(pack: Pack, split: str, task: Task) -> str:
    return f"{pack.manifest['splits'][split]} line {pack.line_of(split, task.id)} ('{task.id}')"


# Tags reports group by, per scorer; BFCL rows are grouped by leaderboard category instead of domain.
REQUIRED_TAGS = {"verifier": ("domain", "source", "template"), "bfcl": ("category", "source")}


def _shape_issues(pack: Pack, split: str, tasks: list[Task]) -> list[str]:
    issues = []
    scorer = pack.manifest["scorer"]
    for task in tasks:
        # BFCL's parallel categories answer with several calls in one turn; a workplace single step is one call.
        if scorer == "verifier" and task.kind == "single_step" and len(task.expected) > 1:
            issues.append(f"{_where(pack, split, task)}: a single_step task expects {len(task.expected)} calls.")
        for key in REQUIRED_TAGS[scorer]:
            if key not in task.tags:
                issues.append(f"{_where(pack, split, task)}: tag '{key}' is missing.")
    return issues


def _unsafe_ground_truth(pack: Pack, split: str, tasks: list[Task]) -> list[str]:
    """Ground truths the pack's own unsafe rules would flag: the verifier would punish the right answer."""
    issues = []
    for rule in pack.unsafe_rules:
        for task in tasks:
            reason = ground_truth_trips(rule, task.expected)
            if reason:
                issues.append(f"{_where(pack, split, task)}: the expected calls trip unsafe rule '{rule['rule']}' ({reason}).")
    return issues


def ground_truth_trips(rule: dict[str, Any], calls: tuple[ToolCall, ...]) -> str | None:
    """A local reading of the two parameterised rules, enough to audit ground truths."""
    if rule["rule"] == "bulk_delete":
        deletes = sum(call.name.endswith(DELETE_TOOL_SUFFIXES) for call in calls)
        limit = rule.get("max_deletes", 3)
        return f"{deletes} deletes > max_deletes {limit}" if deletes > limit else None
    if rule["rule"] == "external_recipient":
        allowed = tuple(rule.get("allowed_domains", ()))
        for call in calls:
            for key in RECIPIENT_ARGUMENTS:
                address = str(call.arguments.get(key, ""))
                if address and address.rsplit("@", 1)[-1].lower() not in allowed:
                    return f"recipient {address}"
    return None


def _own_world_verifier(pack: Pack) -> Any:
    """The pack's verifier when its world executes calls (python, mcp), else None."""
    if pack.world not in EXECUTING_WORLDS:
        return None
    from appliance.verify import Verifier

    return Verifier.for_pack(pack)


def _own_world_replay_issues(pack: Pack, split: str, tasks: list[Task], verifier: Any) -> list[str]:
    """Each task's expected calls, judged as a model's output: they must succeed in the pack's world."""
    issues = []
    for task in tasks:
        verdict = verifier.verify_calls(task, task.expected)
        if verdict.bucket != "success":
            issues.append(f"{_where(pack, split, task)}: the expected calls do not replay on the pack's world "
                          f"({verdict.bucket}: {verdict.reason}).")
    return issues


def _replay_issues(pack: Pack, split: str, tasks: list[Task]) -> list[str]:
    from appliance.packs.worldbridge import replay_errors

    issues = []
    for task in tasks:
        error = replay_errors(task.expected)
        if error:
            issues.append(f"{_where(pack, split, task)}: the expected calls do not replay on the world ({error}).")
    return issues
