"""Trajectories in and out of the store: the JSONL line format, `appliance trajectories import`, the served log.

One line is one trajectory, an object in OpenAI chat format:

    {"messages": [{"role": "user", "content": "Delete kofi's newest email"},
                  {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "email_search_emails", "arguments": "{\\"query\\": \\"kofi\\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "[{\\"email_id\\": \\"00000259\\", ...}]"},
                  ...],
     "tools": [...OpenAI tools...],
     "outcome": "success", "feedback": {"rating": 4}, "human_intervention": {"turn": 3, "note": "..."}}

Only `messages` is required. Optional fields: id, conversation_id, tools, model,
adapter_version, pack, task_id, outcome (OUTCOMES), feedback (any JSON),
human_intervention (true/false, or an object or text describing it), latency_s,
usage {prompt_tokens, completion_tokens}, finish_reason, created_at (ISO text or
epoch seconds), metadata (an object). Other fields are kept, verbatim, in metadata.
`appliance serve --log FILE` writes this format too, so a served log imports.

An import is all or nothing: every line is checked first, and a malformed line
is reported with its file and line number; then all rows are stored in one
atomic append. A trajectory whose id is already stored is skipped, so importing
a file twice stores it once (a line without an id gets a hash of its content).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.flywheel.chat import messages_problem, tools_problem

OUTCOMES = ("success", "failure", "partial", "unknown")
# Fields a line may carry besides messages; anything else goes into metadata.
_TEXT_FIELDS = ("id", "conversation_id", "model", "adapter_version", "pack", "task_id", "finish_reason")
_KNOWN_FIELDS = frozenset({"messages", "tools", "outcome", "feedback", "human_intervention", "latency_s", "usage",
                           "created_at", "metadata", *_TEXT_FIELDS})
# Line numbers named in one error message; the rest are counted.
_LINES_NAMED = 5


class _LineError(ValueError):
    """Internal: one sentence about one line."""


@dataclass(frozen=True)
class ImportSummary:
    import_id: str
    file: str
    imported: int
    skipped: int  # already stored, or repeated within the file


def import_trajectories(path: str | Path, workspace: Any, *, pack: str | None = None, model: str | None = None,
                        adapter_version: str | None = None) -> ImportSummary:
    """Check every line of `path`, then store them all in one append (or nothing, with one sentence)."""
    rows = read_trajectories_file(path, pack=pack, model=model, adapter_version=adapter_version)
    import_id = workspace.new_id("import")
    stored = _stored_ids(workspace, [row["id"] for row in rows])
    fresh: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in rows:
        if row["id"] in stored or row["id"] in seen:
            continue
        seen.add(row["id"])
        fresh.append({**row, "source_id": import_id})
    workspace.append("trajectories", fresh)
    return ImportSummary(import_id, str(path), len(fresh), len(rows) - len(fresh))


def read_trajectories_file(path: str | Path, *, pack: str | None = None, model: str | None = None,
                           adapter_version: str | None = None) -> list[dict[str, Any]]:
    """Store rows (without source_id) for every line, or ApplianceError naming the malformed lines."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ApplianceError(f"cannot read {path} ({err.strerror}).") from None
    except UnicodeDecodeError:
        raise ApplianceError(f"{path} is not UTF-8 text; pass a JSONL file of chat trajectories.") from None
    defaults = {"pack": pack, "model": model, "adapter_version": adapter_version}
    rows, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(row_from_line(_decode(line), file=str(path), line=number, defaults=defaults))
        except _LineError as err:
            errors.append((number, str(err)))
    if errors:
        raise ApplianceError(_malformed_sentence(path, errors))
    if not rows:
        raise ApplianceError(f"{path} holds no trajectories; it needs one JSON object with `messages` per line.")
    return rows


def row_from_line(obj: Any, *, file: str | None = None, line: int | None = None,
                  defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """One trajectories row from one decoded line; _LineError says what is wrong with it."""
    if not isinstance(obj, dict):
        raise _LineError("the line is not a JSON object")
    if "messages" not in obj:
        raise _LineError("the line has no `messages`")
    problem = messages_problem(obj["messages"], strict_arguments=False) or tools_problem(obj.get("tools"))
    if problem:
        raise _LineError(problem)
    for name in _TEXT_FIELDS:
        if obj.get(name) is not None and not isinstance(obj[name], str):
            raise _LineError(f"`{name}` must be text")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise _LineError("`metadata` must be an object")
    intervened, intervention = _intervention(obj.get("human_intervention"))
    usage = _usage(obj.get("usage"))
    row = {
        **{name: obj.get(name) or (defaults or {}).get(name) for name in _TEXT_FIELDS},
        "id": obj.get("id") or _content_id(obj),
        "source": "imported",
        "file": file,
        "line": line,
        "messages": obj["messages"],
        "tools": obj.get("tools"),
        "outcome": _outcome(obj.get("outcome")),
        "feedback": obj.get("feedback"),
        "human_intervention": intervened,
        "intervention": intervention,
        "latency_s": _number(obj.get("latency_s"), "latency_s"),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "metadata": {**metadata, **{k: v for k, v in obj.items() if k not in _KNOWN_FIELDS}} or None,
        "created_at": _timestamp(obj.get("created_at")),
    }
    row["conversation_id"] = row["conversation_id"] or row["id"]
    return row


def line_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """The JSONL line of a stored row (the served log); `row_from_line` reads it back."""
    line = {name: row.get(name) for name in ("id", "conversation_id", "model", "adapter_version", "pack",
                                             "task_id", "messages", "tools", "finish_reason", "latency_s")}
    line["usage"] = {"prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens")}
    created = row.get("created_at", time.time())
    line["created_at"] = datetime.fromtimestamp(created, timezone.utc).isoformat() \
        if isinstance(created, (int, float)) else str(created)
    line["metadata"] = {**(row.get("metadata") or {}), "served_by": row.get("source_id")}
    return {k: v for k, v in line.items() if v is not None}


def _decode(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as err:
        raise _LineError(f"the line is not JSON ({getattr(err, 'msg', err)} at column {getattr(err, 'colno', '?')})")


def _content_id(obj: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()
    return f"traj-{digest[:20]}"


def _outcome(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in OUTCOMES:
        return value.strip().lower()
    raise _LineError(f"`outcome` is {value!r} (expected {', '.join(OUTCOMES[:-1])} or {OUTCOMES[-1]})")


def _intervention(value: Any) -> tuple[bool | None, Any]:
    """(a person stepped in, what they did): true/false, or an object or text that describes it."""
    if value is None or isinstance(value, bool):
        return value, None
    if isinstance(value, (dict, str)):
        return True, value
    raise _LineError("`human_intervention` must be true, false, or an object or text describing it")


def _usage(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _LineError("`usage` must be an object of token counts")
    counts = {}
    for name in ("prompt_tokens", "completion_tokens"):
        count = value.get(name)
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
            raise _LineError(f"`usage.{name}` must be a whole number")
        counts[name] = count
    return counts


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise _LineError(f"`{name}` must be a number of seconds")
    return float(value)


def _timestamp(value: Any) -> Any:
    if value is None:
        return time.time()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise _LineError(f"`created_at` {value!r} is not an ISO date and time") from None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
    raise _LineError("`created_at` must be ISO text or epoch seconds")


def _malformed_sentence(path: Path, errors: list[tuple[int, str]]) -> str:
    first_line, first_problem = errors[0]
    fix = "nothing was imported; fix {} and run the import again."
    if len(errors) == 1:
        return f"{path} line {first_line}: {first_problem}; " + fix.format("the line")
    named = ", ".join(str(n) for n, _ in errors[:_LINES_NAMED])
    more = f" and {len(errors) - _LINES_NAMED} more" if len(errors) > _LINES_NAMED else ""
    return (f"{path} has {len(errors)} malformed lines ({named}{more}), the first: line {first_line}: "
            f"{first_problem}; " + fix.format("them"))


def _stored_ids(workspace: Any, ids: list[str]) -> set[str]:
    if not ids:
        return set()
    _, rows = workspace.query("SELECT DISTINCT id FROM trajectories WHERE list_contains(?, id)", [ids])
    return {row[0] for row in rows}
