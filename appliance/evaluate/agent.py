"""The multi-step agent loop: generate → parse calls → execute in the task's world →
append observations as tool messages → repeat until the model answers without a
call or the turn limit is reached.

Trajectories advance in lock-step so every turn is one batched generation call.
The trajectory is scored on the final world state (WorkBench's rule) with all
calls the model made; long-horizon failures get their own label.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from appliance.parsing import parse_tool_calls
from appliance.task import Task, ToolCall

REPEAT_LIMIT = 3  # the same call this many times is a loop, not progress


@dataclass
class Trajectory:
    task: Task
    sample_index: int
    messages: list[dict[str, Any]]
    world: Any
    calls: list[ToolCall] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    parse_failed: bool = False
    raised: bool = False
    done: bool = False
    horizon: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def final_text(self) -> str:
        return self.turns[-1]["output"] if self.turns else ""


def _looped(calls: Sequence[ToolCall]) -> bool:
    if len(calls) < REPEAT_LIMIT:
        return False
    tail = calls[-REPEAT_LIMIT:]
    key = [(c.name, json.dumps(c.arguments, sort_keys=True, default=str)) for c in tail]
    return all(k == key[0] for k in key)


def _advance(traj: Trajectory, output: str) -> None:
    """Apply one model turn to a trajectory: parse, execute, append observations."""
    parsed = parse_tool_calls(output)
    turn: dict[str, Any] = {"output": output, "calls": [c.to_json() for c in parsed.calls],
                            "observations": []}
    traj.turns.append(turn)
    traj.messages.append({"role": "assistant", "content": output})
    if not parsed.ok:
        traj.parse_failed = True
        traj.done = True
        return
    if not parsed.calls:
        traj.done = True
        return
    for call in parsed.calls:
        result = traj.world.call(call)
        traj.calls.append(call)
        traj.raised = traj.raised or result.raised
        turn["observations"].append(result.observation)
        traj.messages.append({"role": "tool", "name": call.name, "content": result.observation})
    if _looped(traj.calls):
        traj.horizon = "looped"
        traj.done = True


def run_trajectories(trajectories: list[Trajectory], *, max_turns: int,
                     generate_turn: Callable[[list[Trajectory]], list[Any]],
                     on_turn: Callable[[int], None] = lambda _turn: None) -> None:
    """Drive all trajectories to completion. `generate_turn` returns one Sample per trajectory."""
    for turn_index in range(max_turns):
        active = [t for t in trajectories if not t.done]
        if not active:
            break
        samples = generate_turn(active)
        for traj, sample in zip(active, samples):
            traj.latency_s += sample.latency_s
            traj.prompt_tokens += sample.prompt_tokens
            traj.completion_tokens += sample.completion_tokens
            _advance(traj, sample.text)
        on_turn(turn_index)
    for traj in trajectories:
        if not traj.done:
            traj.horizon = "ran_out_of_turns"
            traj.done = True


def label_lost_track(traj: Trajectory, expected_changes: int, made_changes: int) -> None:
    """Stopped on its own after some calls but before making every expected change."""
    if traj.horizon is None and traj.calls and made_changes < expected_changes:
        traj.horizon = "lost_track"
