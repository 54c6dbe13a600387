"""`appliance tasks from-failures`: labelled production failures become the pack's regression split.

A labelled failure is a triaged trajectory (`appliance trajectories triage`)
whose failure has a corrected expected call list: the trajectory line's own
`expected` field (kept in its metadata on import), or a line of a corrections
JSONL, `{"trajectory_id": ..., "expected": [{"name": ..., "arguments": {...}}]}`,
which wins over the line's own. Each becomes a task — the trajectory's first
user request with the corrected calls as ground truth — and is kept only if it

  1. parses as a row of the pack (its calls fit the tools' schemas),
  2. passes the pack's own verifier when the corrected calls are played (on
     WorkBench, python and MCP packs they run in the pack's world),
  3. repeats no other regression task (same request, normalised), and
  4. does not leak from training: no exact or near-duplicate (Jaccard, as the
     loader checks) of a `train` or `train_rl` request.

Kept tasks are appended to `regression.jsonl` and pack.toml's [splits] gains
`regression = "regression.jsonl"`; the pack is loaded again and both files are
restored if it does not load. The split is never trained on (it is not one of
TRAIN_SPLITS) and the promotion gate refuses a candidate that regresses on it.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError, PackError
from appliance.flywheel.chat import json_column, text_of
from appliance.packs.leakage import find_collisions, normalise
from appliance.packs.manifest import MANIFEST_FILE, REGRESSION_SPLIT, TRAIN_SPLITS

REGRESSION_FILE = "regression.jsonl"
# Why a labelled failure was not kept, in the order the checks run (the summary counts each).
DROP_REASONS = {
    "unknown_trajectory": "the correction names a trajectory that is not stored",
    "other_pack": "the trajectory belongs to another pack",
    "not_triaged": "the trajectory has not been triaged yet (run `appliance trajectories triage`)",
    "not_a_failure": "triage found no failure in it",
    "no_request": "it has no user request",
    "invalid": "the corrected calls do not fit the pack's tools",
    "does_not_replay": "the corrected calls do not pass the pack's verifier on its world",
    "duplicate": "its request repeats another regression task",
    "leaks_from_train": "its request (nearly) repeats a training request",
}


@dataclass
class FromFailuresSummary:
    pack: str
    file: str
    kept: list[str] = field(default_factory=list)  # new task ids
    dropped: list[tuple[str, str, str]] = field(default_factory=list)  # (trajectory id, reason key, detail)
    uncorrected: int = 0  # triaged failures of the pack with no corrected calls yet

    @property
    def dropped_by_reason(self) -> dict[str, int]:
        counts = Counter(reason for _, reason, _ in self.dropped)
        return {reason: counts[reason] for reason in DROP_REASONS if counts[reason]}


def read_corrections(path: str | Path) -> dict[str, list[Any]]:
    """trajectory id -> corrected expected calls, from a JSONL file; one sentence naming a bad line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ApplianceError(f"cannot read the corrections file {path} ({err}).") from None
    corrections: dict[str, list[Any]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or not isinstance(obj.get("trajectory_id"), str) \
                or not isinstance(obj.get("expected"), list):
            raise ApplianceError(f"{path} line {number}: a correction is one JSON object "
                                 '{"trajectory_id": "...", "expected": [{"name": ..., "arguments": {...}}]}.')
        corrections[obj["trajectory_id"]] = obj["expected"]
    return corrections


def tasks_from_failures(workspace: Any, pack_name: str, *, tasks_root: str = "tasks",
                        corrections: dict[str, list[Any]] | None = None) -> FromFailuresSummary:
    """Turn the labelled failures of `pack_name` into its regression split; say what was kept and dropped."""
    from appliance.packs import load_pack

    pack = load_pack(pack_name, root=tasks_root)
    if not pack.tools:
        raise ApplianceError(f"pack '{pack.name}' has no tools file (its rows carry their own tools); "
                             "regression tasks need the pack's tools.")
    summary = FromFailuresSummary(pack.name, str(pack.path / _regression_file(pack)))
    candidates = _labelled_failures(workspace, pack, corrections or {}, summary)
    existing = pack.tasks(REGRESSION_SPLIT) if REGRESSION_SPLIT in pack.splits else []
    rows = _checked_rows(pack, candidates, existing, summary)
    if rows:
        _write(pack, rows, tasks_root)
    return summary


def _labelled_failures(workspace: Any, pack: Any, corrections: dict[str, list[Any]],
                       summary: FromFailuresSummary) -> list[tuple[str, dict[str, Any], list[Any]]]:
    """(trajectory id, its row, corrected calls) for every labelled failure; the rest go to summary.dropped."""
    columns, records = workspace.query(_FAILURES_SQL)
    rows = {record[0]: dict(zip(columns, record)) for record in records}
    candidates = []
    for trajectory_id in [*corrections, *(i for i in rows if i not in corrections)]:
        row = rows.get(trajectory_id)
        if row is None:
            summary.dropped.append((trajectory_id, "unknown_trajectory", ""))
            continue
        expected = corrections.get(trajectory_id)
        if expected is None:
            expected = (json_column(row["metadata"]) or {}).get("expected")
        if row["pack"] not in (None, "", pack.name):
            if expected is not None and trajectory_id in corrections:
                summary.dropped.append((trajectory_id, "other_pack", f"pack {row['pack']!r}"))
            continue
        if expected is None:
            summary.uncorrected += row["judged_id"] == trajectory_id and row["primary_mode"] != "success"
            continue
        if row["primary_mode"] is None:
            summary.dropped.append((trajectory_id, "not_triaged", ""))
        elif row["primary_mode"] == "success":
            summary.dropped.append((trajectory_id, "not_a_failure", "the verifier passed it"))
        elif not isinstance(expected, list):
            summary.dropped.append((trajectory_id, "invalid", "'expected' must be a list of calls"))
        else:
            candidates.append((trajectory_id, row, expected))
    return candidates


def _checked_rows(pack: Any, candidates: list[tuple[str, dict[str, Any], list[Any]]], existing: list[Any],
                  summary: FromFailuresSummary) -> list[dict[str, Any]]:
    from appliance.evaluate.scoring import make_scorer
    from appliance.packs import rows as pack_rows
    from appliance.packs.tools import ToolIndex
    from appliance.packs.worldbridge import replay_errors

    index, scorer = ToolIndex(pack.tools), make_scorer(pack)
    seen = {normalise(task.request) for task in existing}
    used_ids = {task.id for split in pack.splits for task in pack.tasks(split)}
    kind = Counter(task.kind for split in pack.splits for task in pack.tasks(split)).most_common(1)[0][0]
    valid: list[tuple[str, dict[str, Any], Any]] = []
    try:
        for trajectory_id, row, expected in candidates:
            request = next((text_of(m.get("content")) for m in json_column(row["messages"]) or []
                            if m.get("role") == "user"), "").strip()
            if not request:
                summary.dropped.append((trajectory_id, "no_request", ""))
                continue
            task_row = _task_row(pack, trajectory_id, row, request, expected, kind, used_ids)
            try:
                task = pack_rows.parse_row(json.dumps(task_row), index)
            except pack_rows._RowProblem as problem:
                summary.dropped.append((trajectory_id, "invalid", str(problem)))
                continue
            error = replay_errors(task.expected, task.fixture) if pack.world == "workbench" else None
            if error:
                summary.dropped.append((trajectory_id, "does_not_replay", error))
                continue
            verdict = scorer.score_calls(task, task.expected, parse_ok=True, raised=False)
            if not verdict.success:
                summary.dropped.append((trajectory_id, "does_not_replay", f"{verdict.bucket}: {verdict.reason}"))
                continue
            if normalise(request) in seen:
                summary.dropped.append((trajectory_id, "duplicate", ""))
                continue
            seen.add(normalise(request))
            used_ids.add(task.id)
            valid.append((trajectory_id, task_row, task))
    finally:
        close = getattr(getattr(scorer, "verifier", None), "close", None)
        if close is not None:
            close()
    train = [task for split in TRAIN_SPLITS if split in pack.splits for task in pack.tasks(split)]
    leaked = {c.eval_index: c for c in find_collisions([t.request for t in train], [t.request for *_, t in valid])}
    kept = []
    for position, (trajectory_id, task_row, task) in enumerate(valid):
        if position in leaked:
            hit = leaked[position]
            summary.dropped.append((trajectory_id, "leaks_from_train",
                                    f"repeats {train[hit.train_index].id} (Jaccard {hit.similarity:.2f})"))
            continue
        kept.append(task_row)
        summary.kept.append(task.id)
    return kept


def _task_row(pack: Any, trajectory_id: str, row: dict[str, Any], request: str, expected: list[Any], kind: str,
              used_ids: set[str]) -> dict[str, Any]:
    base = f"{pack.name}-regression-{re.sub(r'[^A-Za-z0-9_.-]+', '-', trajectory_id)}"
    task_id, n = base, 1
    while task_id in used_ids:
        n += 1
        task_id = f"{base}-{n}"
    domains = _domains_of(expected)
    tags: dict[str, Any] = {"domain": domains[0] if len(domains) == 1 else ("multi_domain" if domains else "none")}
    if len(domains) > 1:
        tags["domains"] = domains
    return {"id": task_id, "messages": [{"role": "user", "content": request}], "expected": expected,
            "kind": kind, "tags": {**tags, "source": "flywheel", "template": "regression",
                                   "trajectory_id": trajectory_id, "failure_mode": row["primary_mode"]}}


def _domains_of(expected: list[Any]) -> list[str]:
    """The WorkBench domains the calls use, in order (the directory, shown with every domain, is not one)."""
    from appliance.packs.pack import TOOL_DOMAINS

    found: list[str] = []
    for call in expected:
        name = call.get("name") if isinstance(call, dict) else None
        domain = next((d for d in TOOL_DOMAINS if isinstance(name, str) and name.startswith(f"{d}_")), None)
        if domain and domain not in found:
            found.append(domain)
    return found


def _regression_file(pack: Any) -> str:
    return pack.manifest["splits"].get(REGRESSION_SPLIT, REGRESSION_FILE)


def _write(pack: Any, rows: list[dict[str, Any]], tasks_root: str) -> None:
    """Append the rows and name the split in pack.toml; undo both if the pack then fails to load."""
    from appliance.packs import load_pack

    split_file = pack.path / _regression_file(pack)
    manifest_file = pack.path / MANIFEST_FILE
    old_split = split_file.read_bytes() if split_file.exists() else None
    old_manifest = manifest_file.read_text(encoding="utf-8")
    text = (old_split or b"").decode("utf-8")
    if text and not text.endswith("\n"):
        text += "\n"
    split_file.write_text(text + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    if REGRESSION_SPLIT not in pack.manifest["splits"]:
        manifest_file.write_text(_with_regression_split(old_manifest), encoding="utf-8")
    try:
        load_pack(pack.path, root=tasks_root)
    except PackError as err:
        manifest_file.write_text(old_manifest, encoding="utf-8")
        if old_split is None:
            split_file.unlink()
        else:
            split_file.write_bytes(old_split)
        raise ApplianceError(f"the regression split would break pack '{pack.name}' ({err}); nothing was written.")


def _with_regression_split(manifest_text: str) -> str:
    """pack.toml with `regression = "regression.jsonl"` as the last entry of its [splits] table."""
    lines = manifest_text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == "[splits]")
    end = start + 1
    for i in range(start + 1, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        if lines[i].strip():
            end = i + 1
    if end > 0 and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    lines.insert(end, f'{REGRESSION_SPLIT} = "{REGRESSION_FILE}"\n')
    return "".join(lines)


# Every stored trajectory with its conversation's latest triage (NULL columns: not triaged yet).
_FAILURES_SQL = """
WITH latest AS (
    SELECT * FROM trajectory_triage
    QUALIFY row_number() OVER (PARTITION BY conversation_id ORDER BY created_at DESC, triage_id DESC) = 1
)
SELECT t.id, coalesce(t.pack, l.pack) AS pack, t.messages, t.metadata, l.trajectory_id AS judged_id,
       l.primary_mode
FROM trajectories t LEFT JOIN latest l ON l.conversation_id = coalesce(t.conversation_id, t.id)
ORDER BY t.id
"""
