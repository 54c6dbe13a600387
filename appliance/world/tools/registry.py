"""The tool registry: each tool function registers itself with its schema.

A tool is a plain function `fn(world, **arguments)` that reads and replaces
tables on the world. It returns an `ErrorText` for WorkBench's error strings, a
plain string for text results, or a JSON-able value for structured results.
It may raise, exactly where WorkBench's tool would raise.

Names follow NeMo Gym's convention: WorkBench's `email.delete_email` is exposed
as `email_delete_email` (a valid OpenAI function name).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

ToolFn = Callable[..., Any]


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its OpenAI name, WorkBench name, function and JSON schema."""

    name: str  # e.g. "email_delete_email"
    workbench_name: str  # e.g. "email.delete_email"
    fn: ToolFn
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]
    changes_state: bool

    @property
    def argument_names(self) -> frozenset[str]:
        return frozenset(self.properties)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {k: dict(v) for k, v in self.properties.items()},
                    "required": list(self.required),
                    "additionalProperties": False,
                },
            },
        }


TOOLS: dict[str, ToolSpec] = {}


def text(description: str, enum: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A string parameter (WorkBench passes every argument as text)."""
    prop: dict[str, Any] = {"type": "string", "description": description}
    if enum is not None:
        prop["enum"] = list(enum)
    return prop


def tool(
    toolkit: str,
    name: str,
    *,
    description: str,
    properties: dict[str, dict[str, Any]],
    required: tuple[str, ...] = (),
    changes_state: bool = False,
) -> Callable[[ToolFn], ToolFn]:
    """Register `fn` as `<toolkit>_<name>`; the parameters' order follows WorkBench's signature."""

    def register(fn: ToolFn) -> ToolFn:
        spec = ToolSpec(
            name=f"{toolkit}_{name}",
            workbench_name=f"{toolkit}.{name}",
            fn=fn,
            description=description,
            properties=properties,
            required=required,
            changes_state=changes_state,
        )
        if spec.name in TOOLS:
            raise RuntimeError(f"tool {spec.name} registered twice")
        TOOLS[spec.name] = spec
        return fn

    return register
