"""Strict answers: decoding held to the tools' schemas (what OpenAI's strict function calling does).

A strict answer is one of the shapes the parser accepts as a valid answer, and
no other: a call object `{"name": ..., "arguments": {...}}` whose name is one of
the prompt's tools and whose arguments its schema allows, or a JSON list of such
calls, bare or alone in a ```json fence or a <tool_call> tag (the shape Qwen and
Hermes models write); or a plain-prose reply that holds no call attempt (a
deliberate no-call, e.g. "No action is needed."). Arguments are held to each schema as the verifier
reads it: properties and required arguments in their declared order, enums,
types, and no argument the schema does not declare when it lists properties
without `additionalProperties` (see `appliance.verify.closed_arguments`).

The grammar is written once as EBNF (xgrammar converts each JSON schema), so the
transformers backend (xgrammar's matcher, here) and vLLM (its structured
outputs, xgrammar inside) hold answers to the same language. A tool whose
schema xgrammar cannot convert keeps its name held and its arguments free JSON.

Held decoding removes the answers that break a schema (an argument copied from
another tool, an unknown tool name, an enum value that does not exist); it does
not make a wrong choice right.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Sequence

# Whether evals, training and the gate hold answers to the tools' schemas unless told otherwise: the one
# default that EvalSettings, TrainConfig, GateSettings and PipelineSettings read.
STRICT_BY_DEFAULT = False
# What strict means, for every help string; each setting adds only where it applies.
STRICT_HELP = ("hold every answer to the tools' schemas while decoding (no unknown tool, no undeclared argument, "
               "no value outside an enum), as OpenAI's strict function calling does")

# Prose the parser reads as a deliberate no-call (appliance.parsing): it does not open with JSON or
# whitespace; it holds no brace, no `<` (a <tool_call> tag), no backtick (a code fence) and no control
# character; and it has a word (two letters in a row; here ASCII ones, a subset of the parser's any-script rule).
# The wrappers a call may sit in, as the parser reads them: a ```json fence and a Hermes/Qwen <tool_call> tag.
CALL_WRAPPERS = (("```json\n", "\n```"), ("<tool_call>\n", "\n</tool_call>"))

_PROSE_CHAR = r"[^{<`\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
_PROSE_FIRST = r"[^ \t\r\n{\[<`\x00-\x1f\x7f]"
PROSE_REGEX = rf"({_PROSE_FIRST}{_PROSE_CHAR}*)?[A-Za-z][A-Za-z]{_PROSE_CHAR}*"


def decoding(strict: bool) -> str:
    """How an eval's answers were decoded, in one word, for messages that compare two evals."""
    return "strictly" if strict else "freely"


def answer_grammar(tools: Sequence[dict[str, Any]]) -> str:
    """The EBNF (xgrammar's dialect, root rule `root`) of every strict answer for these tools."""
    # The cache key keeps key order: a schema's property order is the order its arguments are written in.
    return _answer_grammar(json.dumps(list(tools), default=str))


@lru_cache(maxsize=256)
def _answer_grammar(tools_json: str) -> str:
    import xgrammar as xgr

    prose = xgr.Grammar.from_regex(PROSE_REGEX)
    calls = [_call_schema(xgr, tool) for tool in json.loads(tools_json)]
    if not calls:
        return str(prose)
    listed = {"type": "array", "items": {"anyOf": calls}, "minItems": 1}
    call_or_list = xgr.Grammar.from_json_schema({"anyOf": [*calls, listed]}, any_whitespace=False)
    wrapped = [xgr.Grammar.concat(_literal(xgr, opening), call_or_list, _literal(xgr, closing))
               for opening, closing in CALL_WRAPPERS]
    return str(xgr.Grammar.union(call_or_list, *wrapped, prose))


def _literal(xgr: Any, text: str) -> Any:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")


def _call_schema(xgr: Any, tool: dict[str, Any]) -> dict[str, Any]:
    """One tool's call object; its arguments free JSON when xgrammar cannot convert their schema."""
    function = tool.get("function", tool)
    schema = {"type": "object",
              "properties": {"name": {"const": function["name"]},
                             "arguments": call_arguments_schema(function.get("parameters"))},
              "required": ["name", "arguments"], "additionalProperties": False}
    try:
        xgr.Grammar.from_json_schema(schema, any_whitespace=False)
    except (RuntimeError, ValueError, TypeError):
        schema["properties"]["arguments"] = {"type": "object"}
    return schema


def call_arguments_schema(parameters: Any) -> dict[str, Any]:
    """A tool's parameters as strict decoding holds them: closed where the verifier reads them closed."""
    from appliance.verify import closed_arguments

    schema = dict(parameters) if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    if closed_arguments(schema):
        schema["additionalProperties"] = False
    return schema
