"""Turn a model's text output into tool calls, or say precisely why not.

Accepted shapes (whitespace around any of them is fine):

* a bare JSON call object ``{"name": ..., "arguments": {...}}``; ``"parameters"``
  is accepted as an alias of ``"arguments"``, and the OpenAI form
  ``{"type": "function", "function": {"name": ..., "arguments": ...}}`` too.
  ``arguments`` may be an object or a JSON string holding an object (OpenAI
  sends a string); it may be left out for a tool without arguments;
* a JSON list of such objects (``[]`` is an explicit "no call");
* one or more fenced blocks (```` ```json ```` or a bare ```` ``` ````) holding a
  call or a list of calls, with prose around them;
* one or more ``<tool_call>...</tool_call>`` blocks (Hermes / Qwen style), with
  prose around them.

A leading ``<think>...</think>`` block (Qwen3, DeepSeek-R1) is dropped first. Text
that is one JSON document is read as such, even when its strings mention fences
or tags.

**No call versus a broken call.** Text is a deliberate no-call answer
(``ok=True``, no calls) only when it holds no call attempt at all: no ``{``, no
``<tool_call`` and no code fence. "No action is needed." is a valid answer;
``{"name": "x",`` is a format error, and so is prose with a stray brace. Prose that
merely starts with ``[`` ("[Note] nothing to do") is prose unless it holds a ``{``.

Robustness: the parser never raises and runs in time linear in its input. Input
over ``MAX_CHARS`` is rejected before any parsing; bracket depth is scanned
before ``json.loads`` so deep nesting never reaches the recursive decoder;
NaN/Infinity (and floats that overflow to infinity), duplicate keys, lone
surrogates, integers too long for Python to convert, empty or non-string names,
non-object arguments and more than ``MAX_CALLS`` calls are format errors.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from appliance.task import ToolCall

MAX_CHARS = 64 * 1024  # Real tool-call outputs are a few hundred characters.
MAX_DEPTH = 64  # A tool call needs about 4 levels; anything near this is an attack.
MAX_CALLS = 32  # WorkBench caps an episode at 20 steps.
MAX_NAME_CHARS = 256

_OPEN_TAG, _CLOSE_TAG = "<tool_call>", "</tool_call>"
_FENCE = "```"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_OPENAI_KEYS = frozenset({"type", "function", "id", "index"})
_FENCE_TAGS = frozenset({"", "json", "jsonc", "tool_call", "tool_code"})
# A JSON \u escape in the surrogate range: only then can a lone surrogate appear in the decoded value.
_EMPTY_LIST = re.compile(r"\[\s*\]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WORD = re.compile(r"[^\W\d_]{2,}")  # two letters in a row, in any script
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


@dataclass(frozen=True)
class ParseResult:
    """What `parse_tool_calls` found: the calls, or why the text is not a valid answer."""

    ok: bool
    calls: tuple[ToolCall, ...] = ()
    error: str = ""
    shape: str = ""  # "bare", "list", "fence", "tool_call", "prose" or "" on failure


class _FormatError(ValueError):
    """Internal: carries the one-line reason for a format error."""


def parse_tool_calls(text: Any) -> ParseResult:
    """Parse a model output into tool calls. Never raises."""
    try:
        return _parse(text)
    except _FormatError as err:
        return ParseResult(ok=False, error=str(err))
    except (RecursionError, MemoryError) as err:  # belt and braces: the depth scan should prevent these
        return ParseResult(ok=False, error=f"output too complex to parse ({type(err).__name__})")


def _parse(text: Any) -> ParseResult:
    if not isinstance(text, str):
        raise _FormatError(f"output is {type(text).__name__}, not text")
    if len(text) > MAX_CHARS:
        raise _FormatError(f"output is {len(text)} characters, over the {MAX_CHARS} limit")
    _require_encodable(text)
    body = _drop_think_block(text.strip())
    if body.startswith("{") or (body.startswith("[") and ("{" in body or _EMPTY_LIST.fullmatch(body))):
        try:
            return _result(_calls_from_json(body), "bare" if body.startswith("{") else "list")
        except _FormatError:
            # Not one JSON document; it may still be a call wrapped in tags or a fence after a leading brace.
            if not _has_wrapper(body):
                raise
    if _OPEN_TAG in body or _CLOSE_TAG in body:
        return _result(_calls_from_tags(body), "tool_call")
    if _FENCE in body:
        return _result(_calls_from_fences(body), "fence")
    if "{" in body or "<tool_call" in body:
        raise _FormatError("text contains a '{' but is not a tool call in an accepted shape")
    _require_readable_prose(body)
    return ParseResult(ok=True, calls=(), shape="prose")


def _require_readable_prose(body: str) -> None:
    """A no-call answer must say something: empty, control-character or symbol-only text is garbage."""
    if not body:
        raise _FormatError("empty output")
    if _CONTROL.search(body):
        raise _FormatError("output contains control characters")
    if not _WORD.search(body):
        raise _FormatError("output has no words: neither a tool call nor a plain answer")


def _has_wrapper(body: str) -> bool:
    return _OPEN_TAG in body or _CLOSE_TAG in body or _FENCE in body


def _result(calls: list[ToolCall], shape: str) -> ParseResult:
    if len(calls) > MAX_CALLS:
        raise _FormatError(f"{len(calls)} calls, over the {MAX_CALLS} limit")
    return ParseResult(ok=True, calls=tuple(calls), shape=shape)


def _require_encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeError:
        raise _FormatError("output contains an invalid unicode surrogate") from None


def _drop_think_block(body: str) -> str:
    if body.startswith(_THINK_OPEN):
        end = body.find(_THINK_CLOSE)
        if end < 0:
            raise _FormatError("unclosed <think> block")
        return body[end + len(_THINK_CLOSE):].strip()
    return body


def _calls_from_tags(body: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    position = 0
    while True:
        start = body.find(_OPEN_TAG, position)
        stray_close = body.find(_CLOSE_TAG, position)
        if start < 0:
            if stray_close >= 0:
                raise _FormatError("</tool_call> without a matching <tool_call>")
            return calls
        if 0 <= stray_close < start:
            raise _FormatError("</tool_call> without a matching <tool_call>")
        end = body.find(_CLOSE_TAG, start + len(_OPEN_TAG))
        if end < 0:
            raise _FormatError("unclosed <tool_call> block")
        inner = body[start + len(_OPEN_TAG):end].strip()
        if _OPEN_TAG in inner:
            raise _FormatError("nested <tool_call> blocks")
        calls.extend(_calls_from_json(inner))
        position = end + len(_CLOSE_TAG)


def _calls_from_fences(body: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    position = 0
    while True:
        start = body.find(_FENCE, position)
        if start < 0:
            return calls
        end = body.find(_FENCE, start + len(_FENCE))
        if end < 0:
            raise _FormatError("unclosed ``` fence")
        calls.extend(_calls_from_json(_fence_content(body[start + len(_FENCE):end])))
        position = end + len(_FENCE)


def _fence_content(block: str) -> str:
    """Strip the info string (```json) from a fenced block; only JSON-ish tags are accepted."""
    first_line, newline, rest = block.partition("\n")
    tag = first_line.strip()
    if newline and (tag == "" or tag.isalnum() or "_" in tag) and not tag.startswith(("{", "[")):
        if tag.lower() not in _FENCE_TAGS:
            raise _FormatError(f"fenced block is tagged '{tag[:20]}', expected json")
        return rest.strip()
    return block.strip()


def _calls_from_json(source: str) -> list[ToolCall]:
    value = _load_json(source)
    if isinstance(value, list):
        return [_call_from_object(item) for item in value]
    return [_call_from_object(value)]


# --- guarded JSON -------------------------------------------------------------------------------


def _load_json(source: str) -> Any:
    if not source:
        raise _FormatError("empty tool call")
    _require_shallow(source)
    try:
        value = json.loads(
            source,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except _FormatError:
        raise
    except json.JSONDecodeError as err:
        raise _FormatError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    except ValueError as err:  # e.g. an integer longer than sys.get_int_max_str_digits()
        raise _FormatError(f"invalid JSON: {str(err)[:120]}") from None
    except (RecursionError, UnicodeError) as err:
        raise _FormatError(f"invalid JSON ({type(err).__name__})") from None
    if _SURROGATE_ESCAPE.search(source):
        _require_no_lone_surrogates(value)
    return value


def _require_shallow(source: str) -> None:
    """Reject bracket nesting deeper than MAX_DEPTH before the recursive decoder sees it."""
    if source.count("{") + source.count("[") <= MAX_DEPTH:
        return  # cannot possibly be deeper: skip the character scan (the common case)
    depth = 0
    in_string = False
    escaped = False
    for char in source:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
            if depth > MAX_DEPTH:
                raise _FormatError(f"JSON nested deeper than {MAX_DEPTH} levels")
        elif char in "}]":
            depth -= 1


def _reject_constant(name: str) -> Any:
    raise _FormatError(f"invalid JSON: {name} is not a number")


def _finite_float(literal: str) -> float:
    number = float(literal)
    if not math.isfinite(number):
        raise _FormatError(f"invalid JSON: number {literal[:20]} overflows")
    return number


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _FormatError(f"duplicate key '{duplicate[:40]}' in JSON object")
    return result


def _require_no_lone_surrogates(value: Any) -> None:
    # Depth is bounded by _require_shallow, so this recursion is safe.
    if isinstance(value, str):
        _require_encodable(value)
    elif isinstance(value, list):
        for item in value:
            _require_no_lone_surrogates(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _require_encodable(key)
            _require_no_lone_surrogates(item)


# --- call objects -------------------------------------------------------------------------------


def _call_from_object(obj: Any) -> ToolCall:
    if not isinstance(obj, dict):
        raise _FormatError(f"a tool call must be a JSON object, got {_json_type(obj)}")
    if "function" in obj:
        return _call_from_openai(obj)
    unexpected = set(obj) - _CALL_KEYS
    if unexpected:
        raise _FormatError(f"unexpected key '{sorted(unexpected)[0][:40]}' in tool call")
    if "arguments" in obj and "parameters" in obj:
        raise _FormatError("tool call has both 'arguments' and 'parameters'")
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    return ToolCall(name=_call_name(obj), arguments=_call_arguments(arguments))


def _call_from_openai(obj: dict[str, Any]) -> ToolCall:
    unexpected = set(obj) - _OPENAI_KEYS
    if unexpected:
        raise _FormatError(f"unexpected key '{sorted(unexpected)[0][:40]}' in tool call")
    if obj.get("type", "function") != "function":
        raise _FormatError("tool call 'type' must be \"function\"")
    function = obj["function"]
    if not isinstance(function, dict):
        raise _FormatError(f"'function' must be an object, got {_json_type(function)}")
    unexpected = set(function) - {"name", "arguments", "parameters"}
    if unexpected:
        raise _FormatError(f"unexpected key '{sorted(unexpected)[0][:40]}' in function")
    arguments = function["arguments"] if "arguments" in function else function.get("parameters", {})
    return ToolCall(name=_call_name(function), arguments=_call_arguments(arguments))


def _call_name(obj: dict[str, Any]) -> str:
    if "name" not in obj:
        raise _FormatError("tool call has no 'name'")
    name = obj["name"]
    if not isinstance(name, str):
        raise _FormatError(f"tool name must be a string, got {_json_type(name)}")
    if not name.strip():
        raise _FormatError("tool name is empty")
    if len(name) > MAX_NAME_CHARS:
        raise _FormatError(f"tool name is {len(name)} characters long")
    return name


def _call_arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):  # OpenAI sends arguments as a JSON-encoded string
        arguments = _load_json(arguments.strip())
    if not isinstance(arguments, dict):
        raise _FormatError(f"arguments must be a JSON object, got {_json_type(arguments)}")
    return arguments


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__
