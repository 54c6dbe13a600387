"""Parse WorkBench answer strings such as `email.delete_email.func(email_id="00000479")`.

WorkBench stores each ground-truth (and recorded) call as a Python call
expression: `<toolkit>.<tool>.func(<arg>="<text>", ...)`, keyword arguments
only, every value a string literal. We parse it with `ast` (never `eval`) into
a ToolCall named `<toolkit>_<tool>`. Like WorkBench's scorer, real line breaks
inside the string are first turned into the escape backslash-n.
"""
from __future__ import annotations

import ast

from appliance.task import ToolCall


def _dotted_name(node: ast.expr) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise ValueError("the callee is not a dotted name")
    parts.append(node.id)
    return parts[::-1]


def parse_workbench_call(s: str) -> ToolCall:
    """`toolkit.tool.func(k="v", ...)` (the `.func` is optional) -> ToolCall("toolkit_tool", {k: v})."""
    if not isinstance(s, str):
        raise ValueError(f"expected a call string, got {type(s).__name__}")
    try:
        tree = ast.parse(s.strip().replace("\n", "\\n"), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a Python call expression: {s!r}") from exc
    node = tree.body
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a call: {s!r}")
    try:
        parts = _dotted_name(node.func)
    except ValueError as exc:
        raise ValueError(f"{exc}: {s!r}") from None
    if parts[-1] == "func":
        parts = parts[:-1]
    if len(parts) != 2:
        raise ValueError(f"expected <toolkit>.<tool>.func(...), got {s!r}")
    if node.args:
        raise ValueError(f"positional arguments are not allowed: {s!r}")
    arguments: dict[str, str] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"**kwargs are not allowed: {s!r}")
        if not (isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)):
            raise ValueError(f"argument {keyword.arg!r} is not a string literal: {s!r}")
        arguments[keyword.arg] = keyword.value.value
    return ToolCall(name=f"{parts[0]}_{parts[1]}", arguments=arguments)
