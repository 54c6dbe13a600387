"""A stateful WorkBench sandbox: five scored tables, 27 tools, WorkBench's state comparison.

A World holds references to immutable tables. `World.fresh()` copies five
references from the shared base, a tool call replaces the tables it changes,
and comparing two worlds is mostly identity checks, so a fresh world per
rollout costs about a microsecond.

Arguments: WorkBench's harness renders every argument as text, so JSON
numbers and booleans are converted with `str()` (30 -> "30", 30.0 -> "30.0",
true -> "True"), a JSON null counts as an omitted argument, and an object or
array value is rejected as a raised call. An argument the tool does not take
is also a raised call (WorkBench's Python function would raise TypeError).

Results: `ok` is False only for WorkBench's error texts ("Email not found.",
"No search parameters provided.", ...) and for raised calls. "No emails found."
and "No events found." are ordinary empty results (ok=True), like an empty list.

Fixture format (task-specific starting state): `{"setup_calls": [{"name": ...,
"arguments": {...}}, ...]}`, tool calls applied in order to the WorkBench base;
every one must succeed. The result is the "fresh base" of worlds made with that
fixture, so `changed()` is measured from it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from appliance.errors import ApplianceError
from appliance.task import ToolCall
from appliance.world.base import SCORED_TABLES, load_base
from appliance.world.matching import ErrorText
from appliance.world.table import Table, tables_equal
from appliance.world.tools import TOOLS, ToolSpec


class FixtureError(ApplianceError):
    """A task fixture is malformed or one of its setup calls fails."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call did."""

    observation: str  # the text shown to the model (JSON for structured results)
    ok: bool  # False when the tool returned an error text or raised
    raised: bool  # the tool raised (bad date, bad regex, ...), the name is unknown or the arguments unusable
    changed: bool  # this call changed the scored state


_Tables = tuple[Table, Table, Table, Table, Table]  # in SCORED_TABLES order


class World:
    """One episode's state. Create with `World.fresh()`; change only through `call()`."""

    __slots__ = ("calendar_events", "emails", "plots", "project_tasks", "crm", "_origin")

    @classmethod
    def fresh(cls, fixture: dict[str, Any] | None = None) -> "World":
        world = object.__new__(cls)
        world._set_tables(_origin_tables(fixture))
        world._origin = world._tables()
        return world

    # ---- acting ---------------------------------------------------------------------

    def call(self, call: ToolCall) -> ToolResult:
        """Run one tool call. Never raises: problems come back as a failed ToolResult."""
        spec = TOOLS.get(call.name)
        if spec is None:
            return ToolResult(f"Error: unknown tool '{call.name}'.", False, True, False)
        kwargs = _coerce_arguments(spec, call.arguments)
        if isinstance(kwargs, str):
            return ToolResult(kwargs, False, True, False)
        before = self._tables()
        try:
            value = spec.fn(self, **kwargs)
        except Exception as exc:  # a tool raising is data here, not a bug: report it
            self._set_tables(before)
            return ToolResult(f"Error: {spec.name} raised {type(exc).__name__}: {exc}", False, True, False)
        changed = _differs(before, self._tables())
        if isinstance(value, ErrorText):
            return ToolResult(str(value), False, False, changed)
        observation = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        return ToolResult(observation, True, False, changed)

    # ---- comparing ------------------------------------------------------------------

    def same_state(self, other: "World") -> bool:
        """WorkBench's correctness test: the five scored tables are equal after case-folding."""
        return not _differs(self._tables(), other._tables())

    def changed(self) -> bool:
        """Whether the scored state differs from the fresh base this world started from."""
        return _differs(self._origin, self._tables())

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The current rows of one scored table as dicts (a copy), e.g. `rows("emails")`."""
        if table not in SCORED_TABLES:
            raise KeyError(f"unknown table {table!r}; expected one of {', '.join(SCORED_TABLES)}")
        return getattr(self, table).records()

    # ---- internals ------------------------------------------------------------------

    def _tables(self) -> _Tables:
        return (self.calendar_events, self.emails, self.plots, self.project_tasks, self.crm)

    def _set_tables(self, tables: _Tables) -> None:
        self.calendar_events, self.emails, self.plots, self.project_tasks, self.crm = tables


def _differs(a: _Tables, b: _Tables) -> bool:
    for table_a, table_b in zip(a, b):
        if table_a is not table_b and not tables_equal(table_a, table_b):
            return True
    return False


def _coerce_arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any] | str:
    """JSON arguments -> keyword arguments as WorkBench would receive them, or an error text."""
    if not isinstance(arguments, dict):
        return f"Error: arguments of {spec.name} must be a JSON object."
    kwargs: dict[str, Any] = {}
    allowed = spec.properties
    for key, value in arguments.items():
        if key not in allowed:
            return f"Error: {spec.name}() got an unexpected keyword argument '{key}'."
        if value is None:
            continue
        if isinstance(value, str):
            kwargs[key] = value
        elif isinstance(value, (bool, int, float)):
            kwargs[key] = str(value)
        else:
            return f"Error: argument '{key}' of {spec.name} must be text, not {type(value).__name__}."
    return kwargs


def replay(calls: Iterable[ToolCall | dict[str, Any]], fixture: dict[str, Any] | None = None) -> World:
    """Run every call in order on a fresh world; failed calls simply change nothing."""
    world = World.fresh(fixture)
    for call in calls:
        world.call(call if isinstance(call, ToolCall) else ToolCall.from_json(call))
    return world


# ---- fresh bases --------------------------------------------------------------------

_FIXTURE_CACHE: dict[str, _Tables] = {}
_FIXTURE_CACHE_LIMIT = 4096


@lru_cache(maxsize=1)
def _base_tables() -> _Tables:
    tables = load_base().tables
    return tuple(tables[name] for name in SCORED_TABLES)  # type: ignore[return-value]


def _origin_tables(fixture: dict[str, Any] | None) -> _Tables:
    if not fixture:
        return _base_tables()
    key = json.dumps(fixture, sort_keys=True, default=str)
    cached = _FIXTURE_CACHE.get(key)
    if cached is None:
        if len(_FIXTURE_CACHE) >= _FIXTURE_CACHE_LIMIT:
            _FIXTURE_CACHE.clear()
        cached = _FIXTURE_CACHE[key] = _apply_fixture(fixture)
    return cached


def _apply_fixture(fixture: dict[str, Any]) -> _Tables:
    setup = fixture.get("setup_calls") if isinstance(fixture, dict) else None
    if not isinstance(setup, list) or set(fixture) - {"setup_calls"}:
        raise FixtureError(
            'A fixture must be {"setup_calls": [{"name": ..., "arguments": {...}}, ...]}; fix the task pack.'
        )
    world = World.fresh()
    for index, entry in enumerate(setup):
        try:
            call = entry if isinstance(entry, ToolCall) else ToolCall.from_json(entry)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise FixtureError(f"Fixture setup call {index} is not a {{name, arguments}} object; fix the task pack.")
        result = world.call(call)
        if not result.ok:
            raise FixtureError(
                f"Fixture setup call {index} ({call.name}) failed with {result.observation!r}; fix the task pack."
            )
    return world._tables()
