"""OpenAI chat format: check messages and tools, turn model output into an assistant message, read calls back.

One module for the three places that speak it: `serve` (requests and answers),
`trajectories` (imported lines) and `triage` (the calls a trajectory made).

A message is `{"role": system | developer | user | assistant | tool, "content": ...}`;
content is text, null (an assistant message that only calls tools) or a list of
`{"type": "text", "text": ...}` parts. An assistant message may carry
`tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]`,
arguments as a JSON string (OpenAI) or an object; a tool message answers one,
by `tool_call_id` when it has one, else in order.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

from appliance.parsing import parse_tool_calls
from appliance.task import ToolCall

ROLES = ("system", "developer", "user", "assistant", "tool")


def messages_problem(messages: Any, *, strict_arguments: bool) -> str | None:
    """What is wrong with a message list, naming the place (`messages[2].tool_calls[0]`), or None.

    `strict_arguments`: a call's arguments must decode to an object (a request we render); an
    imported trajectory keeps undecodable ones, since they record what a model did.
    """
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list of chat messages"
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return f"{where} is not an object"
        role = message.get("role")
        if role not in ROLES:
            return f"{where} has role {role!r} (expected {', '.join(ROLES[:-1])} or {ROLES[-1]})"
        problem = _content_problem(message.get("content"), where)
        if problem:
            return problem
        if "tool_calls" in message and message["tool_calls"] is not None:
            if role != "assistant":
                return f"{where} has tool_calls but only an assistant message may make calls"
            problem = _tool_calls_problem(message["tool_calls"], where, strict_arguments)
            if problem:
                return problem
        elif role != "assistant" and message.get("content") is None:
            return f"{where} ({role}) has no content"
    return None


def tools_problem(tools: Any) -> str | None:
    """What is wrong with an OpenAI tools list, or None."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools must be a list of OpenAI tools"
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            return f'tools[{index}] is not {{"type": "function", "function": {{"name": ..., "parameters": ...}}}}'
        if tool.get("type", "function") != "function":
            return f"tools[{index}] has type {tool.get('type')!r}; only function tools are supported"
        if not isinstance(function.get("parameters", {}), dict):
            return f"tools[{index}].function.parameters must be a JSON Schema object"
    return None


def _content_problem(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return None
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text", ""), str)
                                         for p in content):
        return None
    return f"{where}.content must be text, null or a list of text parts"


def _tool_calls_problem(calls: Any, where: str, strict_arguments: bool) -> str | None:
    if not isinstance(calls, list):
        return f"{where}.tool_calls must be a list"
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return f'{at} is not {{"type": "function", "function": {{"name": ..., "arguments": ...}}}}'
        if not isinstance(function.get("name"), str) or not function["name"]:
            return f"{at} has no function name"
        arguments = function.get("arguments", {})
        if not isinstance(arguments, (str, dict)):
            return f"{at}.function.arguments must be a JSON string or an object"
        if strict_arguments and decode_arguments(arguments) is None:
            return f"{at}.function.arguments is not a JSON object"
    return None


def decode_arguments(arguments: Any) -> dict[str, Any] | None:
    """A call's arguments as an object (OpenAI sends a JSON string), or None when they are not one."""
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def text_of(content: Any) -> str:
    """Message content as plain text (parts joined)."""
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def for_prompt(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as appliance.prompting renders them: text content, developer as system, calls kept."""
    rendered = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        out: dict[str, Any] = {"role": role, "content": text_of(message.get("content"))}
        if message.get("tool_calls"):
            out["tool_calls"] = message["tool_calls"]
        if message.get("name"):
            out["name"] = message["name"]
        rendered.append(out)
    return rendered


def new_call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def openai_tool_call(call: ToolCall, call_id: str | None = None) -> dict[str, Any]:
    return {"id": call_id or new_call_id(), "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}


@dataclass(frozen=True)
class Answer:
    """A model output as the chat API returns it: an assistant message and why it ended."""

    message: dict[str, Any]
    finish_reason: str
    calls: tuple[ToolCall, ...] = ()


def assistant_answer(text: str, *, tools_offered: bool, finish_reason: str) -> Answer:
    """Tool calls in the output (appliance.parsing's shapes) become `tool_calls`; anything else is content."""
    parsed = parse_tool_calls(text) if tools_offered else None
    if parsed is not None and parsed.ok and parsed.calls:
        message = {"role": "assistant", "content": None,
                   "tool_calls": [openai_tool_call(call) for call in parsed.calls]}
        return Answer(message, "tool_calls", parsed.calls)
    return Answer({"role": "assistant", "content": text}, finish_reason)


@dataclass(frozen=True)
class Step:
    """One tool call of a trajectory, where it was made and what came back."""

    call: ToolCall
    message_index: int
    result: str | None = None  # the tool message that answered it (None: never answered)


@dataclass(frozen=True)
class Reading:
    """The calls a trajectory made, read back from its messages."""

    steps: tuple[Step, ...]
    parse_problem: str | None  # the first assistant turn whose calls do not decode, and why


def read_calls(messages: Sequence[dict[str, Any]]) -> Reading:
    """Calls from `tool_calls`, or from assistant text in the shapes appliance.parsing reads; results paired."""
    steps: list[Step] = []
    pending: list[tuple[int, str | None]] = []  # (index in steps, call id) still waiting for a result
    problem: str | None = None
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            pending = []
            for call, call_id, error in _assistant_calls(message):
                if error:
                    problem = problem or f"messages[{index}]: {error}"
                    continue
                pending.append((len(steps), call_id))
                steps.append(Step(call, index))
        elif role == "tool" and pending:
            wanted = message.get("tool_call_id")
            position = next((p for p, (_, cid) in enumerate(pending) if wanted and cid == wanted), 0)
            step_index, _ = pending.pop(position)
            old = steps[step_index]
            steps[step_index] = Step(old.call, old.message_index, text_of(message.get("content")))
    return Reading(tuple(steps), problem)


def _assistant_calls(message: dict[str, Any]) -> list[tuple[ToolCall | None, str | None, str]]:
    """(call, call id, error) for each call of an assistant message."""
    if message.get("tool_calls"):
        found = []
        for call in message["tool_calls"]:
            function = call.get("function", {})
            arguments = decode_arguments(function.get("arguments", {}))
            if arguments is None:
                found.append((None, None, f"the arguments of {function.get('name')} are not a JSON object"))
            else:
                found.append((ToolCall(function["name"], arguments), call.get("id"), ""))
        return found
    text = text_of(message.get("content"))
    if not text.strip():
        return []
    parsed = parse_tool_calls(text)
    if not parsed.ok:
        return [(None, None, parsed.error)]
    return [(call, None, "") for call in parsed.calls]


def json_column(value: Any) -> Any:
    """A JSON column as DuckDB returns it (text), or a value already decoded; None when it does not decode."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value
