"""Reading stored evals back: metrics, per-task success, and side-by-side comparison."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from appliance.errors import ApplianceError
from appliance.evaluate.compare import metric_deltas, paired_bootstrap, stored_templates, templates_of


def eval_metrics(ws: Any, eval_id: str) -> dict[str, Any]:
    _, rows = ws.query("SELECT metrics FROM evals WHERE id = ?", [eval_id])
    if not rows or rows[0][0] is None:
        raise ApplianceError(f"no finished eval {eval_id!r} in this workspace; list them with "
                             "`appliance sql \"SELECT id, model, adapter, split FROM evals\"`.")
    value = rows[0][0]
    return json.loads(value) if isinstance(value, str) else dict(value)


def per_task_success(ws: Any, eval_id: str) -> dict[str, float]:
    _, rows = ws.query("SELECT task_id, avg(CASE WHEN bucket = 'success' THEN 1.0 ELSE 0.0 END) "
                       "FROM eval_samples WHERE eval_id = ? GROUP BY task_id", [eval_id])
    return {task: float(rate) for task, rate in rows}


def compare_stored(ws: Any, a: str, b: str, tasks_root: str | None = None) -> dict[str, Any]:
    """Metric deltas and the paired success difference of two stored evals.

    The bootstrap resamples templates as the evals stored them; for evals stored before evals kept their
    templates, `tasks_root` lets them be read from the pack named in the eval (when it is still there).
    """
    ma, mb = eval_metrics(ws, a), eval_metrics(ws, b)
    templates = stored_templates(ma, mb) or (_pack_templates(ws, a, tasks_root) if tasks_root else {})
    answers = first_answers(ws, a, b)
    return {"a": a, "b": b, "deltas": metric_deltas(ma, mb),
            "success": paired_bootstrap(per_task_success(ws, a), per_task_success(ws, b), clusters=templates),
            "decoding": mixed_decoding(ma, mb), "moved": moved_answers(answers),
            "templates": moved_templates(answers, templates)}


MOVED_EXAMPLES = 3  # task ids shown per kind of move: enough to open one in `appliance sql`


def first_answers(ws: Any, a: str, b: str) -> list[tuple[str, str, str]]:
    """(task, bucket of its first answer in a, in b) for every task both evals answered, in task order."""
    _, rows = ws.query(
        "WITH x AS (SELECT task_id, bucket FROM eval_samples WHERE eval_id = ? AND sample_index = 0), "
        "y AS (SELECT task_id, bucket FROM eval_samples WHERE eval_id = ? AND sample_index = 0) "
        "SELECT task_id, x.bucket, y.bucket FROM x JOIN y USING (task_id) ORDER BY task_id", [a, b])
    return [(str(task), str(before), str(after)) for task, before, after in rows]


def moved_answers(answers: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, int, list[str]]]:
    """How the tasks of both evals changed bucket, by their first sample (`first_answers`): (bucket in a, bucket
    in b, tasks, the first few task ids), most tasks first. What moved, not only how much: a gain of 0 can hide
    7 tasks fixed and 7 broken."""
    moves: dict[tuple[str, str], list[str]] = {}
    for task, before, after in answers:
        if before != after:
            moves.setdefault((before, after), []).append(task)
    return [(before, after, len(tasks), tasks[:MOVED_EXAMPLES])
            for (before, after), tasks in sorted(moves.items(), key=lambda move: (-len(move[1]), move[0]))]


def moved_summary(moved: Sequence[tuple[str, str, int, list[str]]]) -> str:
    """One line for `moved_answers`: how many tasks changed bucket, became successes, stopped being one."""
    if not moved:
        return "no task's first answer changed bucket"
    fixed = sum(n for _, after, n, _ in moved if after == "success")
    broken = sum(n for before, _, n, _ in moved if before == "success")
    return (f"{sum(n for _, _, n, _ in moved)} tasks changed bucket (first samples): {fixed} became successes, "
            f"{broken} stopped being one")


def moved_templates(answers: Sequence[tuple[str, str, str]],
                    templates: dict[str, str]) -> list[tuple[str, int, int, int]]:
    """The templates whose first answers (`first_answers`) succeed on a different number of tasks in b than in
    a: (template, its tasks in both evals, successes in a, in b), largest change first. Held-out splits ask each
    template in one or two wordings, so a template that moves tends to move whole: this names the unit the
    interval resamples."""
    counts: dict[str, tuple[int, int, int]] = {}
    for task, before, after in answers:
        if task in templates:
            n, in_a, in_b = counts.get(templates[task], (0, 0, 0))
            counts[templates[task]] = (n + 1, in_a + (before == "success"), in_b + (after == "success"))
    moved = [(name, n, in_a, in_b) for name, (n, in_a, in_b) in counts.items() if in_a != in_b]
    return sorted(moved, key=lambda row: (-abs(row[3] - row[2]), row[0]))


def moved_templates_summary(moved: Sequence[tuple[str, int, int, int]]) -> str:
    """One line for `moved_templates`: how many templates changed, up and down."""
    up = sum(1 for _, _, in_a, in_b in moved if in_b > in_a)
    return f"{len(moved)} templates changed (first samples): {up} up, {len(moved) - up} down"


def _pack_templates(ws: Any, eval_id: str, tasks_root: str) -> dict[str, str]:
    """Task → template for the pack and split an eval ran on, or {} when that pack cannot be read."""
    from appliance.packs import load_pack

    _, rows = ws.query("SELECT pack, split FROM evals WHERE id = ?", [eval_id])
    if not rows or not rows[0][0]:
        return {}
    pack, split = rows[0]
    try:
        return templates_of(load_pack(pack, root=tasks_root).tasks(split))
    except (ApplianceError, OSError, KeyError):
        return {}


def mixed_decoding(ma: dict[str, Any], mb: dict[str, Any]) -> str:
    """A warning when one eval held its answers to the tool schemas and the other did not, else ''."""
    from appliance.generate.strict import decoding

    strict_a, strict_b = bool(ma.get("strict")), bool(mb.get("strict"))
    if strict_a == strict_b:
        return ""
    return (f"a was decoded {decoding(strict_a)} and b {decoding(strict_b)}: "
            "the difference is the decoder's as much as the model's")
