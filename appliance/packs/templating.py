"""The shape of a task template: phrasings plus a sampler that returns slots and the answer.

A template is one intent (for example "delete an email by id"). Its sampler
draws real entities and returns the words to fill the phrasings with and the
expected calls, computed from the same draw so request and answer agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from random import Random
from typing import Any, Callable

from appliance.packs.entities import Entities
from appliance.task import ToolCall


@dataclass(frozen=True)
class Draft:
    """One sampled instance: the phrasing slots and the ground-truth calls."""

    slots: dict[str, str]
    expected: tuple[ToolCall, ...] = ()


Sampler = Callable[[Random, Entities], "Draft | None"]  # None: this draw does not fit, draw again


@dataclass(frozen=True)
class Template:
    """One intent with several phrasings. `held_out` templates appear only in val."""

    id: str
    domain: str
    phrasings: tuple[str, ...]
    sample: Sampler
    held_out: bool = False
    policy: str | None = None  # "refuse": the right answer declines
    difficulty: str = "easy"
    base_template: str | None = None  # the WorkBench template family this one is modelled on
    extra_tags: dict[str, Any] = field(default_factory=dict)

    def phrasings_for(self, split: str) -> tuple[str, ...]:
        """Train sees all but the last phrasing; val sees only that last one.

        A held-out template is val-only: train sees none of it, val all of it.
        """
        if self.held_out:
            return () if split == "train" else self.phrasings
        return self.phrasings[:-1] if split == "train" else self.phrasings[-1:]


def call(tool: str, /, **arguments: str) -> ToolCall:
    return ToolCall(tool, dict(arguments))
