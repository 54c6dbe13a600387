"""The workplace world: our implementation of the WorkBench sandbox (olly-styles/WorkBench @ 42f1b6d).

Five scored tables (calendar events, emails, analytics plots, project tasks,
CRM customers), the read-only analytics visits and company directory, and all
27 WorkBench tools with their arguments, effects, return values, error texts
and quirks. Tools are exposed under OpenAI-valid names, `<toolkit>_<tool>`
(e.g. `email_delete_email`). Scoring follows WorkBench's `is_correct`: the five
tables must be equal after lower-casing every column except status, list_name
and board, with the same columns, rows, order and row labels.

    world = World.fresh()
    result = world.call(ToolCall("email_delete_email", {"email_id": "00000479"}))
    expected = replay([parse_workbench_call('email.delete_email.func(email_id="00000479")')])
    world.same_state(expected)  # True
"""
from __future__ import annotations

from typing import Any

from appliance.world.base import NOW, base_tables, directory
from appliance.world.parse import parse_workbench_call
from appliance.world.tools import TOOLS
from appliance.world.world import FixtureError, ToolResult, World, replay

# Toolkit order of WorkBench's "all tools" prompt, then registration order within a toolkit.
_TOOLKIT_ORDER = (
    "calendar",
    "email",
    "analytics",
    "project_management",
    "customer_relationship_manager",
    "company_directory",
)

STATE_CHANGING_TOOLS: frozenset[str] = frozenset(n for n, s in TOOLS.items() if s.changes_state)
READ_ONLY_TOOLS: frozenset[str] = frozenset(n for n, s in TOOLS.items() if not s.changes_state)


def tool_schemas() -> list[dict[str, Any]]:
    """All 27 tools in OpenAI function-calling format (a fresh copy each call)."""
    specs = sorted(TOOLS.values(), key=lambda s: _TOOLKIT_ORDER.index(s.workbench_name.split(".")[0]))
    return [spec.schema() for spec in specs]


def workbench_name(name: str) -> str:
    """`email_delete_email` -> `email.delete_email` (KeyError for an unknown tool)."""
    return TOOLS[name].workbench_name


__all__ = [
    "NOW",
    "READ_ONLY_TOOLS",
    "STATE_CHANGING_TOOLS",
    "FixtureError",
    "ToolResult",
    "World",
    "base_tables",
    "directory",
    "parse_workbench_call",
    "replay",
    "tool_schemas",
    "workbench_name",
]
