"""The one generation interface every backend implements.

A backend takes finished prompt strings (see appliance.prompting) and returns,
for each prompt in order, `n` samples in order. Stop strings are removed from
the returned text, as vLLM does. Temperature 0 means greedy decoding; with
n > 1 the greedy answer is repeated n times rather than decoded n times.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Sequence

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Sample:
    """One generated completion.

    finish_reason is "stop" when the model ended its turn (EOS) or hit a stop
    string, "length" when it ran out of max_new_tokens. latency_s is the wall
    time of the backend call that produced it (shared by a whole batch).
    """

    text: str
    completion_tokens: int
    prompt_tokens: int
    latency_s: float
    finish_reason: FinishReason
    token_ids: tuple[int, ...] = ()  # what the model produced, EOS included (the hf backend fills it)


class Generator(ABC):
    """Generates completions for prompt strings; one implementation per backend."""

    name: str = "generator"

    @abstractmethod
    def generate(
        self,
        prompts: list[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        stop: list[str] | None = None,
        seed: int | None = None,
        strict_tools: Sequence[Sequence[dict[str, Any]]] | None = None,
    ) -> list[list[Sample]]:
        """For each prompt, in order, `n` samples in order.

        With `strict_tools` (one tool list per prompt) every answer is held to its
        tools' schemas while it is decoded (appliance.generate.strict).
        """

    def close(self) -> None:
        """Release the model; the default has nothing to release."""


def trim_at_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    """Cut text at the earliest stop string; report whether one was found."""
    cut = min((index for s in stop or () if s and (index := text.find(s)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)
