"""The seed's decision after a baseline: SFT first, GRPO, out of reach, or promote.

Thresholds are settings with documented defaults; the recommendation always
carries the numbers that produced it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DecisionThresholds:
    min_valid_format: float = field(default=0.6, metadata={
        "help": "below this valid-JSON rate the model cannot follow the format: SFT first"})
    target_success: float = field(default=0.9, metadata={
        "help": "at or above this pass@1 the model is good enough: check safety and promote"})
    min_passk_gap: float = field(default=0.05, metadata={
        "help": "pass@k minus pass@1 at least this large means sampling sometimes succeeds: GRPO"})
    success_band: tuple[float, float] = field(default=(0.05, 0.9), metadata={
        "help": "pass@1 inside this band means the model sometimes succeeds: GRPO"})
    out_of_reach_passk: float = field(default=0.02, metadata={
        "help": "pass@k at or below this with good format means the task is out of reach"})


@dataclass(frozen=True)
class Recommendation:
    action: str  # sft | grpo | out_of_reach | promote
    reason: str

    def __str__(self) -> str:
        return f"{self.action}: {self.reason}"


def recommend(metrics: dict[str, Any], t: DecisionThresholds = DecisionThresholds()) -> Recommendation:
    valid = metrics["valid_json_rate"]
    p1 = metrics["pass@1"]
    k = metrics.get("k", 1)
    pk = metrics.get(f"pass@{k}", p1)
    nums = f"valid JSON {valid:.0%}, pass@1 {p1:.0%}" + (f", pass@{k} {pk:.0%}" if k > 1 else "")
    if valid < t.min_valid_format:
        return Recommendation("sft", f"SFT first: the format is rarely right ({nums}); "
                                     "teach the format and the tool family before RL.")
    if p1 >= t.target_success:
        return Recommendation("promote", f"already above target ({nums}); "
                                         "check safety and general ability, then promote without training.")
    if pk <= t.out_of_reach_passk:
        return Recommendation("out_of_reach", f"format is fine but it almost never succeeds ({nums}); "
                                              "use a bigger model, an easier curriculum or more SFT data.")
    low, high = t.success_band
    if pk - p1 >= t.min_passk_gap or low <= p1 < high:
        return Recommendation("grpo", f"GRPO with verifiable rewards: the model sometimes succeeds ({nums}).")
    return Recommendation("sft", f"more SFT: success is low and sampling does not help ({nums}).")
