"""The worlds a pack's own tools live in, as the verifier asks them (appliance.verify.ExecutionWorld).

    verifier = Verifier.for_pack(load_pack("tasks/tracker"))   # calls make_world(pack)

Every one normalises calls to their tools' schemas first (appliance.userworld.
normalise), so the verifier then compares arguments exactly. Then:

* ``arguments``: nothing runs; the arguments decide (like ``none``).
* ``python`` and ``mcp`` run the expected calls once per task and the model's
  calls afresh each time (cached per distinct call list), and compare:

  - the **state** after the calls, where the world can see one (the module's
    state factory; an MCP pack's `state_tool`): it must equal the expected
    calls' state, whatever the route (WorkBench's rule);
  - the **results** of read-only tools that are executed: each expected
    read-only call's (tool, result) must be among the model's.

  A task is decided by its outcome alone when every expected call is seen
  that way (a read-only tool executed, or a state-changing one whose effect
  the state shows); otherwise the arguments must match too, as for a
  "compare calls, don't execute" MCP tool or a state-changing function in a
  module without a state.

Execution errors (a raise, a hang, a print, an unserialisable result, a dead
process or server) come back as the verifier's execution_error reasons. When
the task's own expected calls fail, the reason says the pack needs fixing.
"""
from __future__ import annotations

import json
import shlex
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from appliance.errors import PackError
from appliance.safety import is_state_changing as guess_state_changing
from appliance.task import Task, ToolCall
from appliance.userworld.config import McpConfig, PythonConfig, world_config
from appliance.userworld.episode import CallResult, Episode, failed
from appliance.userworld.normalise import ArgumentNormaliser

OUTCOME_CACHE_SIZE = 4096  # distinct (task, calls) runs kept; GRPO groups repeat outputs often
TASK_CACHE_SIZE = 65536


class ArgumentsWorld:
    """world = "arguments": calls compared on their normalised arguments; nothing runs."""

    name = "arguments"
    exact_text = True

    def __init__(self, tools: Sequence[dict[str, Any]], read_only: frozenset[str] | None = None) -> None:
        self._normaliser = ArgumentNormaliser(tools)
        self._read_only = read_only
        self._tasks: dict[str, Task] = {}

    def prepare(self, task: Task, calls: tuple[ToolCall, ...]) -> tuple[Task, tuple[ToolCall, ...]]:
        prepared = self._tasks.get(task.id)  # task ids are unique per verifier
        if prepared is None:
            if len(self._tasks) >= TASK_CACHE_SIZE:
                self._tasks.clear()
            prepared = self._tasks[task.id] = self._normaliser.task(task)
        return prepared, self._normaliser.calls(calls)

    def is_state_changing(self, name: str) -> bool:
        """The pack's `read_only` list when it has one, else a guess from the tool's verb."""
        if self._read_only is None:
            return guess_state_changing(name)
        return name not in self._read_only

    def outcome(self, task: Task, calls: Sequence[ToolCall]) -> tuple[tuple[str, ...], bool | None, bool]:
        return (), None, False

    def decides(self, task: Task) -> bool:
        return False

    def episode(self, task: Task) -> "AgentEpisode":
        """A world for one agent-loop episode of `task` (`.call(call)` answers each call)."""
        return AgentEpisode(self, task)

    def run(self, calls: Sequence[ToolCall], fixture: dict[str, Any] | None) -> Episode:
        """Nothing runs here: every call is answered as not executed."""
        return Episode(results=tuple(CallResult(skipped=True) for _ in calls))

    def close(self) -> None:
        pass


class _ExecutingWorld(ArgumentsWorld):
    """What the python and mcp worlds share: running, caching and comparing episodes."""

    has_state = False  # whether episodes carry a state to compare

    def __init__(self, tools: Sequence[dict[str, Any]], read_only: frozenset[str] | None) -> None:
        super().__init__(tools, read_only)
        self._expected: dict[str, Episode] = {}
        self._outcomes: OrderedDict[tuple[str, str], tuple[tuple[str, ...], bool | None, bool]] = OrderedDict()

    def executes(self, name: str) -> bool:
        return True

    def outcome(self, task: Task, calls: Sequence[ToolCall]) -> tuple[tuple[str, ...], bool | None, bool]:
        key = (task.id, json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True, default=repr))
        cached = self._outcomes.get(key)
        if cached is not None:
            self._outcomes.move_to_end(key)
            return cached
        expected = self._expected_episode(task)
        if expected.errors:
            outcome: tuple[tuple[str, ...], bool | None, bool] = (
                (f"the task's expected calls fail, so the pack needs fixing: {expected.errors[0]}",), False, False)
        else:
            predicted = self.run(calls, task.fixture)
            changed = self.has_state and not predicted.error and predicted.state != predicted.start
            outcome = (predicted.errors, self._match(task, expected, calls, predicted), changed)
        self._outcomes[key] = outcome
        if len(self._outcomes) > OUTCOME_CACHE_SIZE:
            self._outcomes.popitem(last=False)
        return outcome

    def decides(self, task: Task) -> bool:
        return all(self._seen(c.name) for c in task.expected)

    def _seen(self, name: str) -> bool:
        """Whether a call's effect shows in the outcome: an executed read-only result, or the state."""
        if not self.executes(name):
            return False
        return not self.is_state_changing(name) or self.has_state

    def _match(self, task: Task, expected: Episode, calls: Sequence[ToolCall], predicted: Episode) -> bool | None:
        if predicted.error:
            return False
        compared, ok = False, True
        if self.has_state:
            compared, ok = True, predicted.state == expected.state
        wanted = Counter((c.name, r.value) for c, r in zip(task.expected, expected.results)
                         if self.executes(c.name) and not self.is_state_changing(c.name))
        if wanted:
            got = Counter((c.name, r.value) for c, r in zip(calls, predicted.results) if not r.error and not r.skipped)
            compared, ok = True, ok and not (wanted - got)
        return ok if compared else None

    def _expected_episode(self, task: Task) -> Episode:
        episode = self._expected.get(task.id)
        if episode is None:
            if len(self._expected) >= TASK_CACHE_SIZE:
                self._expected.clear()
            episode = self.run(task.expected, task.fixture)
            if not episode.error:  # a hang or a dead process may pass; a call's own error will not
                self._expected[task.id] = episode
        return episode


class PythonWorld(_ExecutingWorld):
    """world = "python": the pack's functions in a sandboxed child process (appliance.userworld.sandbox)."""

    name = "python"

    def __init__(self, tools: Sequence[dict[str, Any]], read_only: frozenset[str] | None, sandbox: Any) -> None:
        super().__init__(tools, read_only)
        self.sandbox = sandbox
        self.has_state = sandbox.state_factory is not None

    def run(self, calls: Sequence[ToolCall], fixture: dict[str, Any] | None) -> Episode:
        return self.sandbox.run(calls, fixture)

    def close(self) -> None:
        self.sandbox.close()


class McpWorld(_ExecutingWorld):
    """world = "mcp": calls through an MCP server over stdio (appliance.userworld.mcp_client)."""

    name = "mcp"

    def __init__(self, tools: Sequence[dict[str, Any]], read_only: frozenset[str] | None, server: Any,
                 config: McpConfig) -> None:
        super().__init__(tools, read_only)
        self.server = server
        self.config = config
        self.has_state = config.state_tool is not None
        self._dont_execute = frozenset(config.dont_execute)

    def executes(self, name: str) -> bool:
        return name not in self._dont_execute

    def run(self, calls: Sequence[ToolCall], fixture: dict[str, Any] | None) -> Episode:
        config = self.config
        if config.reset_tool:
            reset = self.server.call(config.reset_tool, {})
            if reset.error:
                return failed(f"the reset tool failed: {reset.error}")
        for index, call in enumerate(_setup_calls(fixture)):
            result = self.server.call(call.name, call.arguments)
            if result.error:
                return failed(f"fixture setup call {index} ({call.name}) failed: {result.error}")
        start = self._state()
        if start.error:
            return failed(start.error)
        results = []
        for call in calls:
            if not self.executes(call.name):
                results.append(CallResult(skipped=True))
                continue
            result = self.server.call(call.name, call.arguments)
            results.append(result)
            if result.lost:  # the server died or hung: the rest (and the state) would be a fresh server's
                results.extend(CallResult(skipped=True) for _ in range(len(calls) - len(results)))
                return Episode(results=tuple(results), start=start.value)
        end = self._state()
        return Episode(results=tuple(results), start=start.value, state=end.value, error=end.error)

    def _state(self) -> CallResult:
        if not self.config.state_tool:
            return CallResult()
        result = self.server.call(self.config.state_tool, {})
        return CallResult(value=result.value, error=f"the state tool failed: {result.error}" if result.error else "")

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class AgentResult:
    """What one call in an agent episode gave, shaped like appliance.world.ToolResult."""

    observation: str
    ok: bool
    raised: bool
    changed: bool


class AgentEpisode:
    """One agent-loop episode on a pack's own world: `call` answers each call as the loop makes it.

    Each call replays the episode's calls so far on a fresh state and answers
    with the last one's result: the worlds run whole episodes, and a few turns
    replayed cost far less than a model turn.
    """

    def __init__(self, world: ArgumentsWorld, task: Task) -> None:
        self._world = world
        self._task = task
        self._calls: list[ToolCall] = []
        self._state: str | None = None

    def call(self, call: ToolCall) -> AgentResult:
        self._calls.append(self._world._normaliser.call(call))
        episode = self._world.run(self._calls, self._task.fixture)
        last = episode.results[-1] if len(episode.results) == len(self._calls) else CallResult(error=episode.error)
        changed = episode.state is not None and episode.state != (self._state or episode.start)
        self._state = episode.state if episode.state is not None else self._state
        if last.error:
            return AgentResult(f"Error: {last.error}", False, True, False)
        if last.skipped:
            return AgentResult(f"{call.name} was not executed; its arguments were recorded.", True, False, False)
        return AgentResult(last.value or "null", True, False, changed)


def make_world(pack: Any) -> ArgumentsWorld:
    """The world of a loaded pack whose world is arguments, python or mcp."""
    from appliance.userworld.mcp_client import McpServer
    from appliance.userworld.sandbox import FunctionSandbox

    config = world_config(pack.manifest)
    table = pack.manifest.get(pack.world, {})
    read_only = frozenset(table["read_only"]) if "read_only" in table else None
    tools = pack.tools
    if isinstance(config, PythonConfig):
        names = [tool["function"]["name"] for tool in tools]
        sandbox = FunctionSandbox(pack.path / config.module, names, state_factory=config.state,
                                  timeout_s=config.timeout_s, memory_mb=config.memory_mb)
        return PythonWorld(tools, read_only, sandbox)
    if isinstance(config, McpConfig):
        server = McpServer(shlex.split(config.command), cwd=pack.path, timeout_s=config.timeout_s,
                           startup_s=config.startup_s)
        return McpWorld(tools, read_only, server, config)
    if config is None:
        raise PackError(f"pack '{pack.name}' has world '{pack.world}', which is not a pack's own world.")
    return ArgumentsWorld(tools, read_only)


def _setup_calls(fixture: dict[str, Any] | None) -> list[ToolCall]:
    if not isinstance(fixture, dict):
        return []
    return [ToolCall.from_json(c) for c in fixture.get("setup_calls", ()) if isinstance(c, dict) and "name" in c]
