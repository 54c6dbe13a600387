"""Prompt and completion text: the one place eval, SFT and GRPO get them from.

`render_prompt` turns a system prompt, chat messages and tool schemas into the
exact string the model continues. When the tokenizer's chat template knows
about tools (it renders the tool names when given `tools=`), the template
places them in its own way. Otherwise the tools go into the system prompt in
one documented form (`tools_system_text`):

    <system prompt>

    Tools:
    - email_send_email(recipient, subject, body): Send an email. ...
    - calendar_search_events(query?, time_min?, time_max?): Search calendar events. ...
    - project_management_create_task(..., list_name: Backlog|In Progress|..., ...): ...

(one line per tool: its name, its arguments with `?` for optional ones, a
non-string type after a colon and enums as a|b|c, then the description) so a
tool costs ~40 tokens instead of ~150 as JSON Schema, which is what makes CPU
runs practical.

    To call a tool, reply with only a JSON object {"name": "<tool>", "arguments": {...}};
    for several calls in order, a JSON list of such objects. If no tool call is
    needed, reply with: No action is needed.

Prompt length matters on a CPU: all 27 WorkBench tools rendered fully take
about 3-4k tokens, so callers should pass only the tools the task can use
(for example, its domain's tools); `tools` is any subset of the pack's tools.

`render_completion` is the canonical assistant answer for an expected call
list: the format SFT teaches and the verifier parses; `reference_answer` is
what training teaches for a task (a no-call task's own `reply`, when it has one).
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from appliance.task import ToolCall

NO_ACTION_TEXT = "No action is needed."
# The decline SFT teaches with `missing_tool_share`: a request none of the listed tools can carry out.
MISSING_TOOL_TEXT = "None of my tools can do that."
# Tokens an answer may take: eval's generation budget per turn, and what GRPO samples per turn.
ANSWER_TOKENS = 96
# Room for the `<think>` block an adapter trained with policy or time checks writes before its answer
# (appliance.train.checks). The longest the shipped packs produce is 20 tokens (`<think>protonmail.com outside;
# 09:30 inside</think>`, workplace-single, both checks); 32 leaves room for a longer domain. Read at 96 tokens, a
# checked answer was cut (session 45).
CHECK_TOKENS = 32


def answer_tokens(checked: bool = False) -> int:
    """Tokens an adapter's answer may take: the answer's own budget, plus a check's for one that writes it."""
    return ANSWER_TOKENS + (CHECK_TOKENS if checked else 0)

ANSWER_INSTRUCTION = (
    'To call a tool, reply with only a JSON object {"name": "<tool>", "arguments": {...}}; '
    "for several calls in order, a JSON list of such objects. "
    f"If no tool call is needed, reply with: {NO_ACTION_TEXT}"
)

_PROBE_TOOL_NAME = "appliance_probe_tool_zq7"
_PROBE_TOOL = {
    "type": "function",
    "function": {"name": _PROBE_TOOL_NAME, "description": "probe", "parameters": {"type": "object", "properties": {}}},
}
# chat template text -> whether it renders tools; templates are few, renders are many.
_TOOL_SUPPORT: dict[str, bool] = {}


def render_prompt(
    tokenizer: Any,
    system_prompt: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
) -> str:
    """The prompt string for one request, ending where the assistant's answer begins."""
    openai_tools = [as_openai_tool(tool) for tool in tools]
    conversation = list(messages)
    leading_system, conversation = _split_leading_system(conversation)
    system_text = "\n\n".join(part for part in (system_prompt, leading_system) if part)
    if openai_tools and template_supports_tools(tokenizer):
        chat = [{"role": "system", "content": system_text}, *conversation]
        return _apply_template(tokenizer, chat, tools=openai_tools)
    if openai_tools:
        system_text = tools_system_text(system_text, openai_tools)
    chat = [{"role": "system", "content": system_text}, *_plain_messages(conversation)]
    return _apply_template(tokenizer, chat, tools=None)


def reference_answer(task: Any) -> str:
    """What training teaches for `task`: a no-call task's own reply when it has one, else the canonical answer."""
    return task.reply or render_completion(task.expected)  # loading a pack keeps `reply` to no-call tasks


def render_completion(calls: Iterable[ToolCall | dict[str, Any]]) -> str:
    """The canonical answer: one bare JSON object, a JSON list for several, or NO_ACTION_TEXT for none."""
    objects = [_call_json(call) for call in calls]
    if not objects:
        return NO_ACTION_TEXT
    if len(objects) == 1:
        return json.dumps(objects[0], ensure_ascii=False)
    return json.dumps(objects, ensure_ascii=False)


def tools_system_text(system_prompt: str, tools: Sequence[dict[str, Any]]) -> str:
    """The system prompt with the tools and the answer format appended (for templates without tools)."""
    listing = "\n".join(tool_signature(as_openai_tool(tool)) for tool in tools)
    parts = [system_prompt.strip(), f"Tools:\n{listing}", ANSWER_INSTRUCTION]
    return "\n\n".join(part for part in parts if part)


def tool_signature(tool: dict[str, Any]) -> str:
    """`- name(arg, opt?, n: integer, kind: a|b): description` for one OpenAI tool."""
    function = tool["function"]
    parameters = function.get("parameters") or {}
    required = set(parameters.get("required") or ())
    args = [_argument_text(name, spec, name in required)
            for name, spec in (parameters.get("properties") or {}).items()]
    description = " ".join(str(function.get("description", "")).split())
    return f"- {function['name']}({', '.join(args)}): {description}"


def _argument_text(name: str, spec: Any, required: bool) -> str:
    text = name if required else f"{name}?"
    spec = spec if isinstance(spec, dict) else {}
    if spec.get("enum"):
        return f"{text}: " + "|".join(str(v) for v in spec["enum"])
    kind = spec.get("type")
    if kind and kind != "string":
        return f"{text}: {kind if isinstance(kind, str) else '|'.join(map(str, kind))}"
    return text


def template_supports_tools(tokenizer: Any) -> bool:
    """True when the chat template renders a `tools=` argument (checked once per template)."""
    template = tokenizer.chat_template or ""
    if template not in _TOOL_SUPPORT:
        probe = [{"role": "user", "content": "hi"}]
        try:
            rendered = _apply_template(tokenizer, probe, tools=[_PROBE_TOOL])
        except Exception:  # a template that chokes on tools does not support them
            rendered = ""
        _TOOL_SUPPORT[template] = _PROBE_TOOL_NAME in rendered
    return _TOOL_SUPPORT[template]


def as_openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """Accept a bare {name, description, parameters} or an OpenAI {"type": "function", "function": ...}."""
    if tool.get("type") == "function" and "function" in tool:
        return tool
    return {"type": "function", "function": tool}


def _call_json(call: ToolCall | dict[str, Any]) -> dict[str, Any]:
    return call.to_json() if isinstance(call, ToolCall) else ToolCall.from_json(call).to_json()


def _split_leading_system(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A task's own system message is merged after ours, so the template sees exactly one."""
    if messages and messages[0].get("role") == "system":
        return str(messages[0].get("content") or ""), messages[1:]
    return "", messages


def _plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier tool calls as canonical text, since a template without tools cannot render `tool_calls`."""
    plain = []
    for message in messages:
        content = message.get("content") or ""
        if message.get("tool_calls"):
            calls = [call.get("function", call) for call in message["tool_calls"]]
            content = render_completion(_decode_arguments(call) for call in calls)
        plain.append({"role": message.get("role", "user"), "content": str(content)})
    return plain


def _decode_arguments(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments") or {}
    if isinstance(arguments, str):  # OpenAI messages carry arguments as a JSON string
        arguments = json.loads(arguments)
    return {"name": call["name"], "arguments": arguments}


def _apply_template(tokenizer: Any, chat: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    # enable_thinking=False keeps Qwen3 from opening a <think> block; other templates ignore it.
    return tokenizer.apply_chat_template(
        chat, tools=tools, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
