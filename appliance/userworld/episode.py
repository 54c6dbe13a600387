"""What running one task's calls produced, in a form every executing world shares.

Values are canonical JSON text (sorted keys), so comparing two results or two
states is comparing two strings, and an episode can be cached and hashed.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallResult:
    """One call's outcome: its result as canonical JSON, or why it failed, or that it was not run."""

    value: str | None = None
    error: str = ""
    skipped: bool = False  # a "compare calls, don't execute" tool: judged on its arguments only
    lost: bool = False  # the process or server behind the call died or hung, taking its state with it


@dataclass(frozen=True)
class Episode:
    """A fresh start, some calls, and what came of them."""

    results: tuple[CallResult, ...] = ()
    start: str | None = None  # the state before the calls (after any fixture), when the world has one
    state: str | None = None  # the state after the calls
    error: str = ""  # the episode as a whole failed: a hang, a dead process, a module that does not import

    @property
    def errors(self) -> tuple[str, ...]:
        """Every failure, the episode's own first."""
        own = (self.error,) if self.error else ()
        return own + tuple(r.error for r in self.results if r.error)


def failed(reason: str) -> Episode:
    return Episode(error=reason)
