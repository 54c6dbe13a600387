"""Arguments in canonical form, as the tool's JSON Schema reads them, so equal calls compare equal.

The verifier compares a pack's own tools' arguments exactly after this step
(WorkBench's case-insensitive text rule is WorkBench's, not a general one).
What is normalised, per property, by what its schema says:

* **defaults**: a property the call leaves out gets its schema `default`, so
  omitting `notify` equals passing its default `false`; a `null` for a property
  whose schema does not allow null counts as left out.
* **types**: `"3"` or `3.0` for an integer is `3`; `"2.5"` for a number is `2.5`
  and `3.0` is `3`; `"true"`/`"false"` for a boolean are booleans; a number for a
  string is its text (`30` -> `"30"`).
* **enum case**: text matching an `enum` member except in case becomes that
  member (`"HIGH"` -> `"high"`), unless two members differ only in case, where
  case is meaningful.
* nested `properties` and array `items` are normalised the same way; `anyOf`
  and `oneOf` use the first branch whose type fits the value.

A value that cannot be normalised is left as it is, for the schema check to name.
Nothing here raises.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from appliance.task import Task, ToolCall

_INTEGER_TEXT = re.compile(r"^\s*[-+]?\d+\s*$")
_MAX_DEPTH = 16


class ArgumentNormaliser:
    """Normalises calls to one tool set (OpenAI format); unknown tools pass through unchanged."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self._schemas = {}
        for tool in tools:
            function = tool.get("function", tool)
            self._schemas[function["name"]] = function.get("parameters") or {}

    def call(self, call: ToolCall) -> ToolCall:
        schema = self._schemas.get(call.name)
        if schema is None or not isinstance(call.arguments, dict):
            return call
        arguments = normalise_value(call.arguments, schema)
        return call if arguments == call.arguments and _same_types(arguments, call.arguments) else \
            ToolCall(call.name, arguments)

    def calls(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        return tuple(self.call(c) if isinstance(c, ToolCall) else c for c in calls)

    def task(self, task: Task) -> Task:
        """The task with its expected calls normalised (the ground truth reads like the model's calls)."""
        from dataclasses import replace

        expected = self.calls(task.expected)
        return task if expected == task.expected else replace(task, expected=expected)


def normalise_value(value: Any, schema: Any, depth: int = 0) -> Any:
    """`value` as `schema` reads it (see the module docstring)."""
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return value
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return _first_fitting_branch(value, schema[key], depth)
    kinds = _types(schema)
    if isinstance(value, dict) and (not kinds or "object" in kinds):
        return _normalise_object(value, schema, depth)
    if isinstance(value, list) and (not kinds or "array" in kinds):
        items = schema.get("items")
        return [normalise_value(v, items, depth + 1) for v in value] if isinstance(items, Mapping) else value
    value = _coerce_scalar(value, kinds)
    enum = schema.get("enum")
    if isinstance(value, str) and isinstance(enum, list) and value not in enum:
        value = _enum_member(value, enum)
    return value


def _normalise_object(value: dict[str, Any], schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    required = set(schema.get("required", ())) if isinstance(schema.get("required"), list) else set()
    out: dict[str, Any] = {}
    for key, item in value.items():
        spec = properties.get(key)
        if item is None and key not in required and isinstance(spec, Mapping) and not _allows_null(spec):
            continue  # a null for an optional argument is the argument left out
        out[key] = normalise_value(item, spec, depth + 1) if spec is not None else item
    for key, spec in properties.items():
        if key not in out and isinstance(spec, Mapping) and "default" in spec:
            out[key] = spec["default"]
    return out


def _first_fitting_branch(value: Any, branches: list[Any], depth: int) -> Any:
    for branch in branches:
        if not isinstance(branch, Mapping):
            continue
        kinds = _types(branch)
        if not kinds or _fits(value, kinds):
            return normalise_value(value, branch, depth + 1)
    for branch in branches:  # nothing fits as it is: the first branch that fits after coercion
        if isinstance(branch, Mapping):
            coerced = normalise_value(value, branch, depth + 1)
            if _fits(coerced, _types(branch)):
                return coerced
    return value


def _coerce_scalar(value: Any, kinds: set[str]) -> Any:
    if not kinds or isinstance(value, (dict, list)) or _fits(value, kinds):
        return _canonical_number(value) if kinds & {"integer", "number"} else value
    if isinstance(value, str):
        text = value.strip()
        if "integer" in kinds and _INTEGER_TEXT.match(text):
            return int(text)
        if "number" in kinds:
            try:
                number = float(text)
            except ValueError:
                number = None
            if number is not None and math.isfinite(number):
                return _canonical_number(number)
        if "boolean" in kinds and text.lower() in ("true", "false"):
            return text.lower() == "true"
        return value
    if "string" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if "integer" in kinds and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _canonical_number(value: Any) -> Any:
    """3.0 -> 3, so an integer-valued number reads the same however it was written."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _enum_member(value: str, members: list[Any]) -> Any:
    texts = [m for m in members if isinstance(m, str)]
    folded = [m.casefold() for m in texts]
    if len(set(folded)) < len(folded):  # members that differ only in case: case is meaningful
        return value
    matches = [m for m in texts if m.casefold() == value.strip().casefold()]
    return matches[0] if len(matches) == 1 else value


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def _allows_null(spec: Mapping[str, Any]) -> bool:
    kinds = _types(spec)
    if "null" in kinds or (isinstance(spec.get("enum"), list) and None in spec["enum"]):
        return True
    branches = [b for key in ("anyOf", "oneOf") for b in spec.get(key, ()) if isinstance(b, Mapping)]
    return any(_allows_null(b) for b in branches) or (not kinds and not branches and "enum" not in spec)


def _fits(value: Any, kinds: set[str]) -> bool:
    checks = {
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (
            isinstance(v, float) and v.is_integer()),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return any(checks[k](value) for k in kinds if k in checks)


def _same_types(a: Any, b: Any) -> bool:
    """== says 1 == 1.0 == True; the normalised call must replace the original when types changed."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b))
    return True
