"""Reward audit: before training, check that the verifier agrees with a person.

Draw a sample of an eval's outputs stratified by bucket and reward, collect
agree/disagree labels (interactively or from a file), store them in `audits`,
report agreement per bucket, and export disagreements as JSONL that can become
verifier test cases.
"""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError

LABELS = ("agree", "disagree")


def latest_eval_id(ws: Any) -> str:
    _, rows = ws.query("SELECT id FROM evals ORDER BY started_at DESC NULLS LAST LIMIT 1")
    if not rows:
        raise ApplianceError("no evals in this workspace yet; run `appliance eval` first.")
    return rows[0][0]


def _samples(ws: Any, eval_id: str) -> list[dict[str, Any]]:
    columns, rows = ws.query(
        "SELECT task_id, sample_index, completion, bucket, v_reason AS reason, reward, components, "
        "json_extract_string(trajectory, '$.prompt') AS prompt FROM eval_samples WHERE eval_id = ? "
        "ORDER BY task_id, sample_index", [eval_id])
    if not rows:
        raise ApplianceError(f"eval {eval_id!r} has no stored samples; check the id with "
                             "`appliance sql \"SELECT id FROM evals\"`.")
    return [dict(zip(columns, row)) for row in rows]


def draw_sample(ws: Any, eval_id: str, *, n: int = 64, seed: int = 0) -> list[dict[str, Any]]:
    """Round-robin over (bucket, reward) strata so rare buckets are seen, not swamped."""
    strata: dict[tuple[str, float], list[dict[str, Any]]] = defaultdict(list)
    for row in _samples(ws, eval_id):
        row["components"] = dict(row["components"] or {})
        row["request"] = _request_from_prompt(row.pop("prompt") or "")
        strata[(row["bucket"], round(float(row["reward"] or 0.0), 2))].append(row)
    rng = random.Random(seed)
    for rows in strata.values():
        rng.shuffle(rows)
    picked: list[dict[str, Any]] = []
    keys = sorted(strata)
    while len(picked) < n and any(strata[k] for k in keys):
        for key in keys:
            if strata[key] and len(picked) < n:
                picked.append(strata[key].pop())
    return picked


_SPECIAL_TOKEN = re.compile(r"<\|[^|<>]*\|>|</?s>")
_TRAILING_ROLE = re.compile(r"\s*(?:assistant|model)\s*:?\s*$", re.IGNORECASE)


def _request_from_prompt(prompt: str) -> str:
    """The last user turn of a rendered prompt, for display (best effort, template-agnostic): the text after
    the last `user` marker, without chat-template tokens (`<|im_end|>`) or the assistant header after it."""
    tail = _SPECIAL_TOKEN.sub(" ", prompt.rsplit("user", 1)[-1])
    return _TRAILING_ROLE.sub("", tail).strip()[-600:]


def read_labels_file(path: str) -> list[dict[str, Any]]:
    """JSONL rows {task_id, sample_index, label: agree|disagree, note?}."""
    labels = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ApplianceError(f"cannot read labels file {path}: {err.strerror}.") from err
    except UnicodeDecodeError as err:
        raise ApplianceError(f"labels file {path} is not UTF-8 text (invalid byte at offset {err.start}); pass a JSONL "
                             "file of labels.") from err
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            label = row["label"]
            key = (str(row["task_id"]), int(row["sample_index"]))
        except (ValueError, KeyError, TypeError) as err:
            raise ApplianceError(f"{path} line {number}: expected an object with task_id, sample_index and "
                                 f"label ({err}).") from err
        if label not in LABELS:
            raise ApplianceError(f"{path} line {number}: label must be 'agree' or 'disagree', not {label!r}.")
        labels.append({"task_id": key[0], "sample_index": key[1], "label": label, "note": row.get("note", "")})
    return labels


def record_labels(ws: Any, eval_id: str, sample: list[dict[str, Any]], labels: list[dict[str, Any]],
                  auditor: str = "human") -> int:
    known = {(r["task_id"], r["sample_index"]) for r in sample} | _all_keys(ws, eval_id)
    rows = []
    for label in labels:
        if (label["task_id"], label["sample_index"]) not in known:
            raise ApplianceError(f"label for task {label['task_id']} sample {label['sample_index']} does not "
                                 f"match any sample of eval {eval_id}.")
        rows.append({"eval_id": eval_id, **label, "auditor": auditor})
    if rows:
        ws.append("audits", rows)
    return len(rows)


def _all_keys(ws: Any, eval_id: str) -> set[tuple[str, int]]:
    _, rows = ws.query("SELECT task_id, sample_index FROM eval_samples WHERE eval_id = ?", [eval_id])
    return {(r[0], r[1]) for r in rows}


def agreement(ws: Any, eval_id: str) -> dict[str, Any]:
    """Agreement rate per bucket; the newest label per sample wins."""
    _, rows = ws.query(
        "WITH latest AS (SELECT * FROM audits WHERE eval_id = ? "
        "  QUALIFY row_number() OVER (PARTITION BY task_id, sample_index ORDER BY created_at DESC) = 1) "
        "SELECT s.bucket, count(*), count(*) FILTER (WHERE l.label = 'agree') FROM latest l "
        "JOIN eval_samples s ON s.eval_id = l.eval_id AND s.task_id = l.task_id "
        "AND s.sample_index = l.sample_index GROUP BY s.bucket ORDER BY s.bucket", [eval_id])
    by_bucket = {b: {"n": n, "agree": a, "rate": a / n if n else 0.0} for b, n, a in rows}
    total = sum(r["n"] for r in by_bucket.values())
    agreed = sum(r["agree"] for r in by_bucket.values())
    return {"eval_id": eval_id, "n": total, "rate": agreed / total if total else 0.0, "by_bucket": by_bucket}


def export_disagreements(ws: Any, eval_id: str, path: str) -> int:
    """Disagreements as JSONL verifier test cases: the output, the verdict, and the person's note."""
    columns, rows = ws.query(
        "WITH latest AS (SELECT * FROM audits WHERE eval_id = ? "
        "  QUALIFY row_number() OVER (PARTITION BY task_id, sample_index ORDER BY created_at DESC) = 1) "
        "SELECT s.task_id, s.sample_index, s.completion AS output, s.bucket AS verifier_bucket, "
        "s.v_reason AS verifier_reason, l.note FROM latest l JOIN eval_samples s ON s.eval_id = l.eval_id "
        "AND s.task_id = l.task_id AND s.sample_index = l.sample_index WHERE l.label = 'disagree'", [eval_id])
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps({"eval_id": eval_id, **dict(zip(columns, row))}, default=str) + "\n")
    return len(rows)
