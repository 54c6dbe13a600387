"""Bring your own behaviour: task packs whose tools are yours, not WorkBench's.

A pack made by `appliance tasks new` names one of three worlds in pack.toml:

* ``arguments``: an OpenAI tools list and nothing to run; calls are compared on
  their arguments after JSON-Schema-aware normalisation (`normalise`).
* ``python``: plain Python functions (`schema` reads their signatures); each
  task's calls run in a sandboxed child process (`sandbox`, `worker`) with a fresh
  state, and the state (or, for read-only tools, the results) is compared.
* ``mcp``: an MCP server over stdio (`mcp_client`); read-only tools are executed
  and their results compared, side-effecting ones compared on their arguments
  unless the pack gives a reset tool.

`worlds.make_world(pack)` builds the world the verifier asks (appliance.verify);
`writer` builds the pack folder; `cli` is the `tasks new` front end.

This module stays import-light: a user's functions module may import the
markers below, and it runs in a child process that must start fast.

    from appliance.userworld import read_only

    @read_only
    def search_issues(state, text: str) -> list[dict]: ...
"""
from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

# The attribute a function carries to say whether it only reads. A module that
# does not import this package can set it by hand: `search_issues.read_only = True`.
READ_ONLY_ATTRIBUTE = "read_only"


def read_only(function: F) -> F:
    """Mark a tool function as read-only: its result is compared, and it must not change the state."""
    setattr(function, READ_ONLY_ATTRIBUTE, True)
    return function


def changes_state(function: F) -> F:
    """Mark a tool function as state-changing: the state after the calls is compared."""
    setattr(function, READ_ONLY_ATTRIBUTE, False)
    return function


__all__ = ["READ_ONLY_ATTRIBUTE", "changes_state", "read_only"]
