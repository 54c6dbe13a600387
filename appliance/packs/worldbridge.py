"""The one place packs touch the workplace world: replaying ground-truth calls.

Kept apart so loading a pack never imports the world; only checks and the
generator (which need execution) do.
"""
from __future__ import annotations

from typing import Any, Iterable

from appliance.task import ToolCall


def replay_errors(calls: Iterable[ToolCall], fixture: dict[str, Any] | None = None) -> str | None:
    """None when every call runs without an error on a fresh world, else what the first failure said."""
    from appliance.world import World

    world = World.fresh(fixture)
    for position, call in enumerate(calls, start=1):
        result = world.call(call)
        if not result.ok:
            return f"call #{position} {call.name} failed: {result.observation}"
    return None
