"""One JSONL split: each line parsed into a Task, each mistake named by file and line.

A row is `{"id", "messages", "expected", "kind", "tags", "fixture"?}` (see
tasks/README.md). The system prompt lives in the manifest, so a row carrying a
system message is rejected rather than silently doubled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from appliance.errors import PackError
from appliance.packs.manifest import display_path
from appliance.packs.tools import ToolIndex, validate_tools
from appliance.parsing import parse_tool_calls
from appliance.task import Task, ToolCall

REQUIRED_FIELDS = ("id", "messages", "expected", "kind", "tags")
# "tools": per-row OpenAI tools (packs whose tools vary by task); "bfcl": BFCL's ground truth, kept verbatim;
# "reply": the reference reply of a task that expects no call (what SFT trains on instead of "No action is needed.").
OPTIONAL_FIELDS = ("fixture", "tools", "bfcl", "reply")
KINDS = ("single_step", "multi_step")
ROLES = ("user", "assistant", "tool")
POLICIES = ("refuse",)
_TAG_TYPES: dict[str, tuple[type, ...]] = {
    "domain": (str,),
    "domains": (list,),
    "difficulty": (str,),
    "source": (str,),
    "template": (str,),
    "policy": (str,),
    "unseen_template": (bool,),
}


@dataclass(frozen=True)
class RowRules:
    """How strict row parsing is for a pack: per-row tools packs (BFCL) relax two checks."""

    allow_system: bool = False  # BFCL questions may carry their own system message
    check_expected_schema: bool = True  # BFCL's checker accepts values its docs do not declare
    check_tool_schemas: bool = True  # False once this exact file passed the (slow) metaschema check


def read_split(path: Path, tools: ToolIndex | None, rules: RowRules = RowRules()) -> list[tuple[int, Task]]:
    """(line number, task) for every row of one split file; raise PackError at the first bad line."""
    where = display_path(path)
    if not path.is_file():
        raise PackError(f"{where}: the split file named in pack.toml does not exist.")
    tasks = []
    for number, line in _numbered_lines(path):
        try:
            tasks.append((number, parse_row(line, tools, rules)))
        except _RowProblem as problem:
            raise PackError(f"{where} line {number}: {problem}.") from None
    return tasks


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line


class _RowProblem(Exception):
    """What is wrong with one row, as a clause; the caller adds file and line."""


def parse_row(line: str, tools: ToolIndex | None, rules: RowRules = RowRules()) -> Task:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise _RowProblem(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(row, dict):
        raise _RowProblem("a row must be a JSON object")
    _check_fields(row)
    task_id = _check_id(row["id"])
    messages = _check_messages(row["messages"], rules.allow_system)
    row_tools = _check_row_tools(row.get("tools"), tools, rules.check_tool_schemas)
    index = ToolIndex(row_tools) if row_tools is not None else tools
    expected = _check_expected(row["expected"], index, rules.check_expected_schema)
    tags = _check_tags(row["tags"], expected)
    if row["kind"] not in KINDS:
        raise _RowProblem(f"'kind' must be 'single_step' or 'multi_step', not {row['kind']!r}")
    fixture = row.get("fixture")
    if fixture is not None and not isinstance(fixture, dict):
        raise _RowProblem("'fixture' must be a JSON object when present")
    meta = {"bfcl": row["bfcl"]} if "bfcl" in row else {}
    return Task(task_id, messages, expected, row["kind"], tags, fixture,
                tuple(row_tools) if row_tools is not None else None, meta, _check_reply(row.get("reply"), expected))


def _check_row_tools(row_tools: Any, pack_tools: ToolIndex | None,
                     check_schemas: bool = True) -> list[dict[str, Any]] | None:
    if row_tools is None:
        if pack_tools is None:
            raise _RowProblem("the pack has no tools file, so every row needs its own 'tools' list")
        return None
    try:
        validate_tools(row_tools, check_schemas=check_schemas)
    except ValueError as problem:
        raise _RowProblem(f"'tools': {problem}") from None
    return row_tools


def _check_fields(row: dict[str, Any]) -> None:
    for field in REQUIRED_FIELDS:
        if field not in row:
            raise _RowProblem(f"the required field '{field}' is missing")
    for field in row:
        if field not in REQUIRED_FIELDS + OPTIONAL_FIELDS:
            raise _RowProblem(f"unknown field '{field}'; rows have {', '.join(REQUIRED_FIELDS + OPTIONAL_FIELDS)}")


def _check_reply(reply: Any, expected: tuple[ToolCall, ...]) -> str | None:
    if reply is None:
        return None
    if expected:
        raise _RowProblem("'reply' is for a task that expects no call; this one expects calls")
    # "prose" is what the verifier reads as a deliberate no-call answer: words, no call attempt
    if not isinstance(reply, str) or not reply.strip() or parse_tool_calls(reply).shape != "prose":
        raise _RowProblem("'reply' must be plain text without a tool call (no '{', code fence or <tool_call>)")
    return reply


def _check_id(task_id: Any) -> str:
    if not isinstance(task_id, str) or not task_id.strip():
        raise _RowProblem("'id' must be a non-empty string")
    return task_id


def _check_messages(messages: Any, allow_system: bool = False) -> tuple[dict[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise _RowProblem("'messages' must be a non-empty list of chat messages")
    for position, message in enumerate(messages, start=1):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise _RowProblem(f"message #{position} needs a string 'content'")
        role = message.get("role")
        if role == "system" and not allow_system:
            raise _RowProblem("rows must not carry a system message; the manifest's system_prompt is used")
        if role not in ROLES and role != "system":
            raise _RowProblem(f"message #{position} has role {role!r}; roles are {', '.join(ROLES)}")
    if messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise _RowProblem("the last message must be the user's non-empty request")
    return tuple(messages)


def _check_expected(expected: Any, tools: ToolIndex, check_schema: bool = True) -> tuple[ToolCall, ...]:
    if not isinstance(expected, list):
        raise _RowProblem("'expected' must be a list of calls ([] when no call is correct)")
    calls = []
    for position, call in enumerate(expected, start=1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise _RowProblem(f"expected call #{position} needs a string 'name'")
        arguments = call.get("arguments", {})
        if not isinstance(arguments, dict):
            raise _RowProblem(f"expected call #{position} needs 'arguments' as a JSON object")
        if call["name"] not in tools.schemas:
            raise _RowProblem(f"expected call '{call['name']}' names a tool that is not in the pack's tools.json")
        problem = tools.argument_problem(call["name"], arguments) if check_schema else None
        if problem:
            raise _RowProblem(problem)
        calls.append(ToolCall(call["name"], arguments))
    return tuple(calls)


def _check_tags(tags: Any, expected: tuple[ToolCall, ...]) -> dict[str, Any]:
    if not isinstance(tags, dict):
        raise _RowProblem("'tags' must be a JSON object")
    for key, kinds in _TAG_TYPES.items():
        if key in tags and not isinstance(tags[key], kinds):
            raise _RowProblem(f"tag '{key}' has the wrong type ({type(tags[key]).__name__})")
    policy = tags.get("policy")
    if policy is not None and policy not in POLICIES:
        raise _RowProblem(f"tag 'policy' must be 'refuse' when present, not {policy!r}")
    if policy == "refuse" and expected:
        raise _RowProblem("a task with policy 'refuse' must expect no call ([])")
    return tags
