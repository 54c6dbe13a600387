"""The pack's tool list (`tools.json`, OpenAI format) and argument checks against it.

Each tool's `parameters` must itself be a valid JSON Schema (Draft 2020-12), so
that every expected call in the pack can be validated against it and so that
chat templates and serving stacks accept the list as it is.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from appliance.errors import PackError
from appliance.packs.manifest import display_path

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def read_tools(path: Path) -> list[dict[str, Any]]:
    """Load and check an OpenAI tools list; raise PackError naming the tool's line."""
    where = display_path(path)
    if not path.is_file():
        raise PackError(f"{where}: the tools file named in pack.toml does not exist.")
    text = path.read_text(encoding="utf-8")
    try:
        tools = json.loads(text)
    except json.JSONDecodeError as error:
        raise PackError(f"{where} line {error.lineno}: not valid JSON ({error.msg}).") from None
    if not isinstance(tools, list) or not tools:
        raise PackError(f"{where} line 1: must be a non-empty JSON array of OpenAI tools.")
    seen: set[str] = set()
    for position, tool in enumerate(tools, start=1):
        name = _check_tool(tool, position, text, where)
        if name in seen:
            raise PackError(f"{_tool_location(where, text, name)}: tool name '{name}' is used twice.")
        seen.add(name)
    return tools


def _check_tool(tool: Any, position: int, text: str, where: str, *, check_schema: bool = True) -> str:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
        raise PackError(f"{where}: tool #{position} must look like {{\"type\": \"function\", \"function\": {{...}}}}.")
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise PackError(
            f"{where}: tool #{position} has name {name!r}; names must match ^[a-zA-Z0-9_-]{{1,64}}$."
        )
    location = _tool_location(where, text, name)
    if not isinstance(function.get("description", ""), str):
        raise PackError(f"{location}: tool '{name}' has a description that is not a string.")
    _check_parameters(function.get("parameters"), name, location, check_schema)
    return name


def _check_parameters(parameters: Any, name: str, location: str, check_schema: bool = True) -> None:
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise PackError(f"{location}: tool '{name}' needs 'parameters' as a JSON Schema of type 'object'.")
    if not check_schema:
        return
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as error:
        path = "/".join(str(p) for p in error.path) or "(root)"
        raise PackError(
            f"{location}: tool '{name}' parameters are not a valid JSON Schema at {path} ({error.message})."
        ) from None


def _tool_location(where: str, text: str, name: str) -> str:
    match = re.search(rf'"name"\s*:\s*{re.escape(json.dumps(name))}', text)
    if not match:
        return where
    return f"{where} line {text.count(chr(10), 0, match.start()) + 1}"


class ToolIndex:
    """Validators by tool name, built once per pack."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        self._validators = {name: Draft202012Validator(schema) for name, schema in self.schemas.items()}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.schemas)

    def argument_problem(self, name: str, arguments: dict[str, Any]) -> str | None:
        """None when `arguments` fit the tool's schema, else one clause saying what is wrong."""
        errors = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        return _describe(name, errors[0]) if errors else None


def _describe(name: str, error: ValidationError) -> str:
    argument = str(error.path[0]) if error.path else None
    if error.validator == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        return f"expected call '{name}' is missing required argument '{missing.group(1) if missing else '?'}'"
    if error.validator == "additionalProperties":
        return f"expected call '{name}' has an argument the tool does not define ({error.message})"
    if error.validator == "enum" and argument:
        options = ", ".join(repr(o) for o in error.validator_value)
        return f"expected call '{name}' argument '{argument}' is {error.instance!r}, not one of {options}"
    if error.validator == "type" and argument:
        return f"expected call '{name}' argument '{argument}' must be of type {error.validator_value}"
    subject = f"argument '{argument}'" if argument else "arguments"
    return f"expected call '{name}' {subject} fail the tool schema ({error.message})"


_VALID_TOOL_KEYS: set[str] = set()  # per-row tool lists repeat a lot (BFCL); check each distinct tool once


def validate_tools(tools: Any, *, check_schemas: bool = True) -> None:
    """Check an in-row OpenAI tools list; raise ValueError with one clause saying what is wrong.

    `check_schemas=False` keeps the shape and name checks but skips the metaschema
    check (about 6 ms a tool), for files already validated in full.
    """
    if not isinstance(tools, list) or not tools:
        raise ValueError("must be a non-empty list of OpenAI tools")
    for position, tool in enumerate(tools, start=1):
        key = json.dumps(tool, sort_keys=True)
        if key in _VALID_TOOL_KEYS:
            continue
        try:
            _check_tool(tool, position, key, "tools", check_schema=check_schemas)
        except PackError as error:
            raise ValueError(str(error).removeprefix("tools: ").rstrip(".")) from None
        _VALID_TOOL_KEYS.add(key)
