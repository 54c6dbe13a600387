"""BFCL function docs → OpenAI tools, and the type-only signature the checker keeps.

BFCL writes its docs with Python type names (`dict`, `float`, `tuple`, `any`)
and dotted function names (`math.factorial`), neither of which an OpenAI-style
tools list accepts. We convert them the way the leaderboard's own FC handlers
do at inference time (upstream `convert_to_tool` with `GORILLA_TO_OPENAPI`), so
a model sees what leaderboard models saw:

- `.` in a function name becomes `_` (the "underscore_to_dot" models);
- dict→object, float→number, tuple→array, any→string; the others keep their name.
  `any` becomes `string`, not "no type", because the checker itself treats
  `any` as `str`: a model told "anything goes" would be marked wrong for it;
- a float property also gets `format: "float"` and " This is a float type value."
  appended to its description, and every function description gets
  " Note that the provided function is in Python 3 syntax.", as upstream adds.

The checker reads its types back from the tool (`checker_signature`): the
mapping is one-to-one for everything it checks except tuple, whose parameters
each row lists under `bfcl.tuples`.
"""
from __future__ import annotations

import copy
from typing import Any

from appliance.errors import PackError

BFCL_TO_OPENAPI = {
    "string": "string",
    "integer": "integer",
    "float": "number",
    "boolean": "boolean",
    "array": "array",
    "tuple": "array",
    "dict": "object",
    "any": "string",
}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
FLOAT_HINT = " This is a float type value."


def openai_name(bfcl_name: str) -> str:
    """The tool name a model sees and must call: dots are not allowed in OpenAI names."""
    return bfcl_name.replace(".", "_")


def to_openai_tool(doc: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as an OpenAI tool `{"type": "function", "function": {...}}`."""
    parameters = copy.deepcopy(doc.get("parameters") or {})
    parameters["type"] = "object"
    parameters["properties"] = {
        name: _property_schema(schema, doc["name"])
        for name, schema in (parameters.get("properties") or {}).items()
    }
    function = {
        "name": openai_name(doc["name"]),
        "description": (doc.get("description") or "") + PYTHON_HINT,
        "parameters": parameters,
    }
    return {"type": "function", "function": function}


def _property_schema(schema: dict[str, Any], function_name: str) -> dict[str, Any]:
    # Only named properties get the float hint; upstream leaves array items alone.
    schema = dict(schema)
    if schema.get("type") == "float":
        schema["format"] = "float"
        schema["description"] = (schema.get("description") or "") + FLOAT_HINT
    return _schema(schema, function_name)


def _schema(schema: dict[str, Any], function_name: str) -> dict[str, Any]:
    schema = dict(schema)
    bfcl_type = schema.get("type", "string")
    if bfcl_type not in BFCL_TO_OPENAPI:
        raise PackError(
            f"BFCL function '{function_name}' uses the unknown type {bfcl_type!r}; "
            f"extend BFCL_TO_OPENAPI in appliance/bfcl/convert.py."
        )
    schema["type"] = BFCL_TO_OPENAPI[bfcl_type]
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {
            name: _property_schema(sub, function_name) for name, sub in schema["properties"].items()
        }
    if isinstance(schema.get("items"), dict):
        schema["items"] = _schema(schema["items"], function_name)
    return schema


OPENAPI_TO_BFCL = {
    "string": "string",
    "integer": "integer",
    "number": "float",
    "boolean": "boolean",
    "array": "array",
    "object": "dict",
}


def tuple_parameters(doc: dict[str, Any]) -> list[str]:
    """The top-level parameters typed `tuple`: the one BFCL type the tool schema cannot show."""
    properties = (doc.get("parameters") or {}).get("properties") or {}
    return [name for name, schema in properties.items() if schema.get("type") == "tuple"]


def checker_signature(tool: dict[str, Any], tuples: list[str] = ()) -> dict[str, Any]:
    """What the checker reads of one OpenAI tool, back in BFCL's type names.

    The mapping inverts `to_openai_tool` for everything the checker looks at:
    number is only ever float, `any` and `string` are both checked as str, and
    tuple parameters are named in `tuples` (kept in the row's `bfcl` field).
    Only the top level and one level of array items are typed, as upstream.
    """
    function = tool["function"]
    parameters = function.get("parameters") or {}
    properties = {}
    for name, schema in (parameters.get("properties") or {}).items():
        entry: dict[str, Any] = {"type": "tuple" if name in tuples else _bfcl_type(schema)}
        items = schema.get("items")
        if isinstance(items, dict) and "type" in items:
            entry["items"] = {"type": _bfcl_type(items)}
        properties[name] = entry
    return {
        "name": function["name"],
        "parameters": {"required": list(parameters.get("required") or []), "properties": properties},
    }


def _bfcl_type(schema: dict[str, Any]) -> str | None:
    openapi_type = schema.get("type")
    return OPENAPI_TO_BFCL.get(openapi_type, openapi_type) if isinstance(openapi_type, str) else None
