"""The shared vocabulary: a tool call, a task, and the verdict a verifier gives.

Everything else (world, packs, verifier, store, generation, training) speaks in
these types. They are plain frozen dataclasses so they serialise to the ecosystem
formats (OpenAI tool calls, chat messages, JSONL rows) without our code.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TaskKind = Literal["single_step", "multi_step"]

# One failure bucket per verdict, in the order the verifier checks them.
BUCKETS = (
    "format_error",
    "unsafe_action",
    "called_when_none_expected",
    "missed_call",
    "wrong_tool",
    "wrong_arguments",
    "execution_error",
    "success",
)
Bucket = Literal[
    "format_error",
    "unsafe_action",
    "called_when_none_expected",
    "missed_call",
    "wrong_tool",
    "wrong_arguments",
    "execution_error",
    "success",
]


@dataclass(frozen=True)
class ToolCall:
    """One function call in OpenAI terms: a tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "ToolCall":
        return cls(name=obj["name"], arguments=dict(obj.get("arguments") or {}))


@dataclass(frozen=True)
class Task:
    """One row of a task pack split.

    `expected` is the ground-truth call list in execution order; an empty list
    means the correct behaviour is to make no (state-changing) call.
    `tags` carries domain, difficulty, source, template, and `policy`
    ("refuse" marks a request the correct answer declines).
    """

    id: str
    messages: tuple[dict[str, Any], ...]
    expected: tuple[ToolCall, ...]
    kind: TaskKind = "single_step"
    tags: dict[str, Any] = field(default_factory=dict)
    fixture: dict[str, Any] | None = None
    # Per-task tool list (OpenAI format) for packs whose tools vary by task (BFCL);
    # None means the pack's tools.
    tools: tuple[dict[str, Any], ...] | None = None
    # Scorer-specific ground truth kept verbatim (e.g. BFCL's possible_answer).
    meta: dict[str, Any] = field(default_factory=dict)
    # The reference reply of a task that expects no call, when it is more than "No action is needed." (a
    # refusal that names the rule and the detail that breaks it). Training data only: any reply without a
    # call is right for such a task, so the verifier never reads it.
    reply: str | None = None

    @property
    def request(self) -> str:
        """The last user message: the natural-language request."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return str(message.get("content", ""))
        return ""

    @property
    def out_of_policy(self) -> bool:
        return self.tags.get("policy") == "refuse"

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": self.id,
            "messages": list(self.messages),
            "expected": [c.to_json() for c in self.expected],
            "kind": self.kind,
            "tags": dict(self.tags),
        }
        if self.fixture is not None:
            row["fixture"] = self.fixture
        if self.tools is not None:
            row["tools"] = list(self.tools)
        if self.meta:
            row["meta"] = dict(self.meta)
        if self.reply is not None:
            row["reply"] = self.reply
        return row


@dataclass(frozen=True)
class Verdict:
    """What the verifier concluded about one output. Never raised, always returned.

    Boolean checks are cumulative: a later check is False when an earlier one
    failed. `bucket` is the single failure class; `reason` is one human line.
    """

    parse_ok: bool
    schema_ok: bool
    tool_ok: bool
    arguments_ok: bool
    arguments_fraction: float
    executed_ok: bool
    state_match: bool
    unsafe: bool
    unsafe_rule: str | None
    bucket: Bucket
    reason: str
    n_calls: int = 0

    @property
    def success(self) -> bool:
        return self.bucket == "success"

    def to_row(self) -> dict[str, Any]:
        """Flat columns for the store (prefixed to sit beside reward columns)."""
        return {f"v_{k}": v for k, v in asdict(self).items()}
