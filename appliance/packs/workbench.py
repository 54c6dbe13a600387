"""Import WorkBench's 690 tasks (olly-styles/WorkBench, MIT, Copyright (c) 2024 Mindsdb) as Tasks.

Each `*_queries_and_answers.csv` row becomes one task: the query is the user
message, the answer (a Python list literal of call strings, parsed with
ast.literal_eval, never eval) becomes the expected calls via the world's
`parse_workbench_call`. WorkBench answers hold only state-changing calls, so a
task is `single_step` only when it needs exactly one call whose every argument
is spelled out in the query; anything else needs a look-up and is `multi_step`.
"""
from __future__ import annotations

import ast
import csv
from pathlib import Path

from appliance.errors import PackError
from appliance.task import Task, ToolCall

# file stem -> short id prefix, in the order WorkBench's README lists the domains
QUERY_FILES = {
    "email": "email",
    "calendar": "calendar",
    "analytics": "analytics",
    "project_management": "pm",
    "customer_relationship_manager": "crm",
    "multi_domain": "multi",
}
QUERIES_DIR = Path("data/processed/queries_and_answers")
DOMAIN_ALIASES = {"crm": "customer_relationship_manager"}


def find_queries_dir(src_dir: str | Path) -> Path:
    """The folder holding the query CSVs: `src_dir` itself or its data/processed/queries_and_answers."""
    src = Path(src_dir)
    for candidate in (src / QUERIES_DIR, src):
        if (candidate / "email_queries_and_answers.csv").is_file():
            return candidate
    raise PackError(
        f"{src}: no WorkBench query CSVs found; pass the WorkBench folder that holds {QUERIES_DIR}."
    )


def import_workbench(src_dir: str | Path) -> list[Task]:
    """All WorkBench tasks, file by file in a fixed order, ids like 'wb-email-000'."""
    from appliance.world import parse_workbench_call

    folder = find_queries_dir(src_dir)
    tasks = []
    for stem, prefix in QUERY_FILES.items():
        path = folder / f"{stem}_queries_and_answers.csv"
        with path.open(newline="", encoding="utf-8") as handle:
            for row_number, row in enumerate(csv.DictReader(handle)):
                calls = tuple(parse_workbench_call(text) for text in ast.literal_eval(row["answer"]))
                tasks.append(_task(f"wb-{prefix}-{row_number:03d}", row, calls))
    return tasks


def _task(task_id: str, row: dict[str, str], calls: tuple[ToolCall, ...]) -> Task:
    domains = [DOMAIN_ALIASES.get(d, d) for d in ast.literal_eval(row["domains"])]
    kind = classify_kind(row["query"], calls)
    tags = {
        "domain": domains[0] if len(domains) == 1 else "multi_domain",
        "domains": domains,
        "difficulty": _difficulty(kind, calls),
        "source": "workbench",
        "template": row["base_template"].strip(),
        "phrasing": row["chosen_template"].strip(),
        "unseen_template": True,
    }
    messages = ({"role": "user", "content": row["query"]},)
    return Task(task_id, messages, calls, kind, tags)


def classify_kind(query: str, calls: tuple[ToolCall, ...]) -> str:
    """single_step only for one call whose argument values all appear in the query text."""
    if len(calls) != 1:
        return "multi_step"
    text = _flatten(query)
    if all(_flatten(str(value)) in text for value in calls[0].arguments.values()):
        return "single_step"
    return "multi_step"


def _flatten(text: str) -> str:
    # Queries spell line breaks as a backslash and an n; answers carry real ones after parsing.
    return text.replace("\\n", "\n").lower()


def _difficulty(kind: str, calls: tuple[ToolCall, ...]) -> str:
    if kind == "single_step":
        return "easy"
    return "medium" if len(calls) <= 2 else "hard"
