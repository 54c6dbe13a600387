"""OpenAI tool schemas from plain Python functions: signatures, type hints and docstrings.

    def assign_issue(state, issue_id: int, assignee: str, notify: bool = False) -> dict:
        '''Assign an issue to a person.

        Args:
            issue_id: the issue's number.
            assignee: who takes it, an email address.
        '''

becomes a tool `assign_issue` whose description is the docstring's first
paragraph and whose parameters are `issue_id` (integer, required), `assignee`
(string, required) and `notify` (boolean, default false), each with its line
from the docstring (Google `Args:`, reST `:param x:` or NumPy `Parameters`).

Which functions are tools: the module's `__all__` when it has one, else every
public function defined in the module itself (not imported), except the state
factory. A parameter named `state` is not shown to the model: the runner passes
the task's state object there. Types: str, int, float, bool, None, list/tuple/
set-like sequences, dict, Literal, Enum, Optional/Union and Annotated (a string
in Annotated is the parameter's description). A type outside that list is a
PackError naming the function and parameter.

Stdlib only: the sandbox's child process imports this module too.
"""
from __future__ import annotations

import collections.abc
import enum
import importlib.util
import inspect
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable

from appliance.errors import PackError
from appliance.userworld import READ_ONLY_ATTRIBUTE

STATE_PARAMETER = "state"
DEFAULT_STATE_FACTORY = "make_state"
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Iterable,
              collections.abc.Set, collections.abc.MutableSequence)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


# --- which functions ----------------------------------------------------------------------------


def load_module(path: str | Path, name: str | None = None) -> types.ModuleType:
    """Import a .py file by path, with its folder importable (for its sibling modules)."""
    path = Path(path).resolve()
    name = name or f"userworld_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PackError(f"{path}: not a Python module that can be imported.")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's module: report its error in one sentence
        sys.modules.pop(name, None)
        raise PackError(f"{path.name} failed to import: {type(err).__name__}: {err}") from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module


def tool_functions(module: types.ModuleType, state_factory: str | None = None) -> dict[str, Callable]:
    """name -> function for the module's tools (see the module docstring for the rule)."""
    exported = getattr(module, "__all__", None)
    if exported is not None:
        names = [str(n) for n in exported]
        missing = [n for n in names if not callable(getattr(module, n, None))]
        if missing:
            raise PackError(f"{module.__name__}: __all__ names '{missing[0]}', which is not a function.")
    else:
        names = [name for name, value in vars(module).items()
                 if inspect.isfunction(value) and not name.startswith("_")
                 and value.__module__ == module.__name__]
    skip = {state_factory, DEFAULT_STATE_FACTORY} - {None}
    return {name: getattr(module, name) for name in names if name not in skip}


def is_read_only(function: Callable) -> bool | None:
    """True/False when the function is marked (decorator or attribute), None when it is not."""
    mark = getattr(function, READ_ONLY_ATTRIBUTE, None)
    return mark if isinstance(mark, bool) else None


def takes_state(function: Callable) -> bool:
    return STATE_PARAMETER in inspect.signature(function).parameters


# --- schemas ------------------------------------------------------------------------------------


def function_tool(function: Callable, name: str | None = None) -> dict[str, Any]:
    """One function as an OpenAI tool: {"type": "function", "function": {name, description, parameters}}."""
    name = name or function.__name__
    if not TOOL_NAME.match(name):
        raise PackError(f"function '{name}' cannot be a tool: names must match ^[a-zA-Z0-9_-]{{1,64}}$.")
    summary, argument_help = parse_docstring(inspect.getdoc(function) or "")
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as err:  # noqa: BLE001 - an unresolvable annotation is the user's to fix
        raise PackError(f"function '{name}': its type hints cannot be read ({err}).") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == STATE_PARAMETER:
            continue
        where = f"function '{name}' parameter '{parameter.name}'"
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            raise PackError(f"{where}: tools are called with named arguments, so *args, **kwargs and "
                            "positional-only parameters cannot be part of one.")
        spec = type_schema(hints.get(parameter.name, inspect.Parameter.empty), where)
        if parameter.name in argument_help and "description" not in spec:
            spec["description"] = argument_help[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            default = parameter.default.value if isinstance(parameter.default, enum.Enum) else parameter.default
            if _is_json(default):
                spec["default"] = default
        properties[parameter.name] = spec
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": parameters}}


def type_schema(annotation: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of one type hint; PackError for a type JSON cannot carry."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        spec = type_schema(arguments[0], where)
        notes = [a for a in arguments[1:] if isinstance(a, str)]
        return {**spec, "description": notes[0]} if notes else spec
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if origin is typing.Literal:
        return _enum_schema(list(arguments), where)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([member.value for member in annotation], where)
    if origin in (typing.Union, types.UnionType):
        return _union_schema(arguments, where)
    if annotation in _SEQUENCES or origin in _SEQUENCES:
        if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
            arguments = arguments[:1]
        items = type_schema(arguments[0], where) if len(arguments) == 1 else {}
        return {"type": "array", "items": items} if items else {"type": "array"}
    if annotation in _MAPPINGS or origin in _MAPPINGS:
        values = type_schema(arguments[1], where) if len(arguments) == 2 else {}
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    raise PackError(f"{where} has type {getattr(annotation, '__name__', annotation)!s}, which has no JSON "
                    "form; use str, int, float, bool, list, dict, Literal, an Enum or Optional of those.")


def _union_schema(arguments: tuple[Any, ...], where: str) -> dict[str, Any]:
    options = [type_schema(a, where) for a in arguments]
    simple = [o.get("type") for o in options if set(o) == {"type"} and isinstance(o.get("type"), str)]
    if len(simple) == len(options):
        return {"type": simple}
    nullable = [o for o in options if o != {"type": "null"}]
    if len(nullable) == 1 and "enum" in nullable[0]:  # Optional[Literal[...]]
        return {**nullable[0], "enum": [*nullable[0]["enum"], None], "type": _with_null(nullable[0].get("type"))}
    return {"anyOf": options}


def _with_null(kind: Any) -> Any:
    if kind is None:
        return None
    return [*(kind if isinstance(kind, list) else [kind]), "null"]


def _enum_schema(values: list[Any], where: str) -> dict[str, Any]:
    if not values or not all(_is_json(v) and not isinstance(v, (list, dict)) for v in values):
        raise PackError(f"{where}: a Literal or Enum must list plain JSON values (text, numbers, booleans).")
    kinds = {_SCALARS.get(type(v)) for v in values}
    spec: dict[str, Any] = {"enum": values}
    if len(kinds) == 1:
        spec = {"type": kinds.pop(), "enum": values}
    return spec


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


# --- docstrings ---------------------------------------------------------------------------------

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?|Notes?):$")
_ARGUMENT_SECTIONS = ("args", "arguments", "parameters", "params")
_GOOGLE_ARG = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(summary paragraph, parameter -> description) from a Google (`Args:`) or reST (`:param x:`) docstring."""
    lines = doc.strip().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()) or line.strip().startswith(":"):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    current: str | None = None
    in_arguments = False
    base_indent: int | None = None
    for raw in lines:
        line = raw.strip()
        rest = _REST_PARAM.match(line)
        heading = _SECTION.match(line)
        if rest:
            current, in_arguments = rest.group(1), False
            described[current] = rest.group(2).strip()
        elif heading:
            in_arguments, current, base_indent = heading.group(1).lower() in _ARGUMENT_SECTIONS, None, None
        elif not line:
            current = current if in_arguments else None
        elif in_arguments:
            indent = len(raw) - len(raw.lstrip())
            google = _GOOGLE_ARG.match(line)
            if google and (base_indent is None or indent <= base_indent):
                base_indent, current = indent, google.group(1)
                described[current] = google.group(2).strip()
            elif current is not None:
                described[current] = f"{described[current]} {line}".strip()
        elif current is not None and not line.startswith(":"):
            described[current] = f"{described[current]} {line}".strip()
    return " ".join(summary), {k: v for k, v in described.items() if v}
