"""Reward-hacking alarm: a pure function over the run's checkpoint history.

Two signs that the model is learning the reward instead of the task, each
measured between the first and the latest point of the history:
1. the training reward rose while held-out success stayed flat or fell;
2. a shaped reward rose while strict success (the verifier's `success`
   bucket on the same training samples) fell.
DESIGN.md measured case 2 on this project: a shaped reward climbed to valid
JSON 48/48 while the exact call rate fell from 11/48 to 7/48.

A history point is a mapping with `step` and any of: `train_reward`,
`heldout_success`, `shaped_reward`, `strict_success`. Points missing a value
are skipped for the rule that needs it.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..events import Alarm

MIN_REWARD_RISE = 0.05  # absolute rise in mean reward that counts as "rising"
FLAT_TOLERANCE = 0.01  # a success change within this is "flat"


def _series(history: Sequence[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(int(p.get("step", 0)), float(p[key])) for p in history if p.get(key) is not None]


def _paired(history: Sequence[Mapping[str, Any]], a: str, b: str) -> list[Mapping[str, Any]]:
    return [p for p in history if p.get(a) is not None and p.get(b) is not None]


def check_reward_hacking(history: Sequence[Mapping[str, Any]], *, run_id: str = "",
                         min_reward_rise: float = MIN_REWARD_RISE,
                         flat_tolerance: float = FLAT_TOLERANCE) -> Alarm | None:
    """An Alarm(kind="reward_hacking") when either sign is present, else None."""
    points = _paired(history, "train_reward", "heldout_success")
    if len(points) >= 2:
        first, last = points[0], points[-1]
        reward_rise = last["train_reward"] - first["train_reward"]
        success_change = last["heldout_success"] - first["heldout_success"]
        if reward_rise >= min_reward_rise and success_change <= flat_tolerance:
            return Alarm(run_id=run_id, kind="reward_hacking", step=int(last.get("step", 0)), message=(
                f"Training reward rose by {reward_rise:+.3f} since step {first.get('step', 0)} but held-out "
                f"success changed by {success_change:+.3f}; inspect recent rollouts and the reward before "
                f"promoting this adapter."))
    points = _paired(history, "shaped_reward", "strict_success")
    if len(points) >= 2:
        first, last = points[0], points[-1]
        reward_rise = last["shaped_reward"] - first["shaped_reward"]
        strict_change = last["strict_success"] - first["strict_success"]
        if reward_rise >= min_reward_rise and strict_change < -flat_tolerance:
            return Alarm(run_id=run_id, kind="reward_hacking", step=int(last.get("step", 0)), message=(
                f"The shaped reward rose by {reward_rise:+.3f} while strict success fell by {strict_change:+.3f}; "
                f"the model is learning the shaping, not the task: switch to a binary reward or reduce shaping."))
    return None


FLAT_WINDOW = 3  # consecutive GRPO steps
FLAT_SHARE = 0.9  # share of groups whose completions all got the same reward


def check_no_learning_signal(history: Sequence[Mapping[str, Any]], *, run_id: str = "",
                             window: int = FLAT_WINDOW, share: float = FLAT_SHARE) -> Alarm | None:
    """An Alarm(kind="no_learning_signal") when the last `window` steps had (almost) only flat groups.

    GRPO learns from differences within a group; when every completion of a
    prompt gets the same reward the advantage is zero and the step teaches
    nothing — the "reward stuck at zero" trap.
    """
    recent = [p for p in history if p.get("frac_reward_zero_std") is not None][-window:]
    if len(recent) < window or any(float(p["frac_reward_zero_std"]) < share for p in recent):
        return None
    mean_reward = sum(float(p.get("reward/mean", 0.0)) for p in recent) / window
    hint = ("SFT first, or use a shaped reward for the first steps" if mean_reward <= 0.05 else
            "the task may already be solved on these prompts: use harder tasks")
    return Alarm(run_id=run_id, kind="no_learning_signal", step=int(recent[-1].get("step", 0)), message=(
        f"In the last {window} steps at least {share:.0%} of groups gave every completion the same reward "
        f"(mean reward {mean_reward:.2f}), so GRPO has nothing to learn from; raise num_generations or "
        f"temperature, or {hint}."))
