"""`appliance trajectories triage`: name what went wrong in every stored trajectory.

A trajectory is matched to a task of its pack (its task_id, else its first user
message equals a task's request). With a task, its calls go to the pack's
verifier, which runs them in the pack's world (WorkBench's, or the pack's own
python or MCP tools; appliance.verify): its failure bucket is one failure mode.
Without one, calls are still replayed in the workplace world (for packs that
use it) to find calls that raise, or else the recorded tool results are read
for errors. Every trajectory, matched or not, is also checked for:

  hallucinated_api       a call to a tool that was not offered (or, with no tools list, is not the
                         pack's), or an argument that tool does not take
  bad_planning           the same call REPEAT_LIMIT times in a row; a state-changing call on an id no
                         earlier message showed (guessed, not looked up); or the right calls in an
                         order that leaves a different state
  incomplete_execution   it ends on a call whose result never came, on a tool result or a user
                         message without an answer, on an answer cut at the token limit; it made
                         fewer of the expected changes than the task needs; or it reports `partial`
  human_intervention     the trajectory says a person stepped in
  reported_failure       it reports `failure` and nothing above explains it

A trajectory may show several; `primary_mode` is the first in FAILURE_MODES
order, else `success` (the verifier passed it) or `unverified` (no task to judge
it by and nothing found). Requests of one served conversation are judged once,
on the longest. By default only trajectories not yet judged are; `everything`
judges all again (views read each conversation's latest judgement).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from appliance.errors import ApplianceError
from appliance.evaluate.agent import REPEAT_LIMIT
from appliance.flywheel.chat import Reading, Step, json_column, read_calls, text_of
from appliance.safety import is_state_changing
from appliance.task import BUCKETS, Task, ToolCall, Verdict

# In priority order: the primary mode is the first one found.
FAILURE_MODES = (
    "hallucinated_api",
    "format_error",
    "unsafe_action",
    "bad_planning",
    "incomplete_execution",
    *(b for b in BUCKETS if b not in ("format_error", "unsafe_action", "success")),
    "human_intervention",
    "reported_failure",
)

# Worlds whose verifier runs the calls (a pack's own python or MCP tools too); "none" and "arguments" compare only.
EXECUTING_WORLDS = frozenset({"workbench", "python", "mcp"})
_COLUMNS = ("id", "conversation_id", "pack", "task_id", "messages", "tools", "outcome", "human_intervention",
            "intervention", "finish_reason")


@dataclass
class Judgement:
    """The failure modes of one trajectory and how they were found."""

    trajectory_id: str
    conversation_id: str
    pack: str | None
    task_id: str | None
    replayed: bool
    n_calls: int
    reasons: dict[str, str]  # failure mode -> one line, in FAILURE_MODES order
    verdict: Verdict | None = None

    @property
    def failure_modes(self) -> list[str]:
        return list(self.reasons)

    @property
    def primary_mode(self) -> str:
        if self.reasons:
            return next(iter(self.reasons))
        return "success" if self.verdict is not None and self.verdict.success else "unverified"

    def to_row(self, triage_id: str) -> dict[str, Any]:
        return {"triage_id": triage_id, "trajectory_id": self.trajectory_id, "conversation_id": self.conversation_id,
                "pack": self.pack, "task_id": self.task_id, "replayed": self.replayed, "n_calls": self.n_calls,
                "failure_modes": self.failure_modes, "primary_mode": self.primary_mode, "reasons": self.reasons,
                **(self.verdict.to_row() if self.verdict is not None else {})}


@dataclass
class TriageSummary:
    triage_id: str
    judged: int
    modes: Counter = field(default_factory=Counter)  # primary mode -> trajectories
    notes: list[str] = field(default_factory=list)  # packs that could not be used, in one sentence each


@dataclass
class _PackContext:
    pack: Any
    scorer: Any
    by_request: dict[str, Task]


class Judge:
    """Judges trajectory rows; each pack, its verifier and its request index are loaded once."""

    def __init__(self, *, tasks_root: str = "tasks", default_pack: str | None = None) -> None:
        self.tasks_root, self.default_pack = tasks_root, default_pack
        self._contexts: dict[str, _PackContext | None] = {}
        self.notes: list[str] = []

    def judge(self, row: dict[str, Any]) -> Judgement:
        messages = json_column(row.get("messages")) or []
        tools = json_column(row.get("tools"))
        pack_name = row.get("pack") or self.default_pack
        context = self._context(pack_name) if pack_name else None
        task = _find_task(context, row.get("task_id"), messages) if context else None
        reading = read_calls(messages)
        calls = [step.call for step in reading.steps]
        found: dict[str, str] = {}
        api = tools if tools else (context.pack.tools if context else None)
        unknown = _unknown_api(calls, api) if api else {}
        if unknown:
            found["hallucinated_api"] = next(iter(unknown.values()))
        if reading.parse_problem:
            found["format_error"] = reading.parse_problem
        verdict, replayed = None, False
        if task is not None and context.scorer is not None:
            verdict = context.scorer.score_calls(task, calls, parse_ok=reading.parse_problem is None, raised=False)
            replayed = context.pack.world in EXECUTING_WORLDS
            _add_verdict(found, verdict, context.scorer, task, calls)
        elif context is not None and context.pack.world == "workbench":
            replayed = True
            _add(found, "execution_error", _replay_error(calls, skip=set(unknown)))
        else:
            _add(found, "execution_error", _recorded_error(reading.steps))
        _add(found, "bad_planning", _looped(calls) or _guessed_id(messages, reading.steps))
        _add(found, "incomplete_execution", _unfinished(messages, reading, row.get("finish_reason")))
        if row.get("outcome") == "partial":
            found.setdefault("incomplete_execution", "reported as partial")
        if row.get("human_intervention"):
            found["human_intervention"] = _intervention_note(json_column(row.get("intervention")))
        if not found and row.get("outcome") == "failure":
            found["reported_failure"] = ("reported as failed, yet the verifier passed it" if verdict is not None
                                         else "reported as failed; no failure mode was detected")
        reasons = {mode: found[mode] for mode in FAILURE_MODES if mode in found}
        return Judgement(row["id"], row.get("conversation_id") or row["id"], pack_name,
                         task.id if task is not None else None, replayed, len(calls), reasons, verdict)

    def close(self) -> None:
        """Stop what the packs' verifiers started (a function sandbox, an MCP server)."""
        for context in self._contexts.values():
            close = getattr(getattr(context.scorer, "verifier", None), "close", None) if context else None
            if close is not None:
                close()

    def _context(self, name: str) -> _PackContext | None:
        if name not in self._contexts:
            self._contexts[name] = self._load(name)
        return self._contexts[name]

    def _load(self, name: str) -> _PackContext | None:
        from appliance.evaluate.scoring import make_scorer
        from appliance.packs import load_pack

        try:
            pack = load_pack(name, root=self.tasks_root)
        except ApplianceError as err:
            self.notes.append(f"pack {name!r} could not be loaded ({err}); its trajectories were judged without "
                              "a verifier.")
            return None
        try:
            scorer = make_scorer(pack)
        except ApplianceError as err:
            self.notes.append(f"pack {name!r} has no verifier here ({err}); its trajectories were not replayed.")
            scorer = None
        by_request: dict[str, Task] = {}
        for split in pack.splits:
            for task in pack.tasks(split):
                by_request.setdefault(_normalise(task.request), task)
        return _PackContext(pack, scorer, by_request)


def triage(workspace: Any, *, pack: str | None = None, tasks_root: str = "tasks", everything: bool = False,
           source_id: str | None = None) -> TriageSummary:
    """Judge the stored trajectories not judged yet (all of them with `everything`) and store the judgements."""
    judge = Judge(tasks_root=tasks_root, default_pack=pack)
    rows = pending_trajectories(workspace, everything=everything, source_id=source_id)
    try:
        judgements = [judge.judge(row) for row in rows]
    finally:
        judge.close()
    triage_id = workspace.new_id("triage")
    workspace.append("trajectory_triage", [j.to_row(triage_id) for j in judgements])
    return TriageSummary(triage_id, len(judgements), Counter(j.primary_mode for j in judgements), judge.notes)


def pending_trajectories(workspace: Any, *, everything: bool = False, source_id: str | None = None
                         ) -> list[dict[str, Any]]:
    """The longest row of each conversation, minus those already judged (unless `everything`)."""
    judged = "" if everything else "WHERE id NOT IN (SELECT trajectory_id FROM trajectory_triage)"
    columns, rows = workspace.query(
        f"SELECT {', '.join(_COLUMNS)} FROM ("
        f"  SELECT * FROM trajectories WHERE $source IS NULL OR source_id = $source"
        f"  QUALIFY row_number() OVER (PARTITION BY coalesce(conversation_id, id)"
        f"    ORDER BY json_array_length(messages) DESC, created_at DESC, id) = 1"
        f") {judged} ORDER BY created_at, id", {"source": source_id})
    return [dict(zip(columns, row)) for row in rows]


# -- the checks ---------------------------------------------------------------------------------

def _add(found: dict[str, str], mode: str, reason: str | None) -> None:
    if reason:
        found.setdefault(mode, reason)


def _add_verdict(found: dict[str, str], verdict: Verdict, scorer: Any, task: Task, calls: list[ToolCall]) -> None:
    if verdict.success:
        return
    found.setdefault(verdict.bucket, verdict.reason)
    if verdict.bucket == "wrong_arguments" and verdict.tool_ok and verdict.arguments_ok:
        found.setdefault("bad_planning", "the right calls and arguments, in an order that leaves a different state")
    expected, made = scorer.change_counts(task, calls)
    if calls and made < expected:
        found.setdefault("incomplete_execution", f"made {made} of the {expected} changes the task needs, then stopped")


def _unknown_api(calls: Sequence[ToolCall], tools: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Call index -> why it names a tool or argument that does not exist."""
    schemas = {}
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            schemas[function["name"]] = function.get("parameters") or {}
    problems = {}
    for index, call in enumerate(calls):
        schema = schemas.get(call.name)
        if schema is None:
            problems[index] = f"called {call.name}, a tool that does not exist (not among the {len(schemas)} offered)"
            continue
        properties = schema.get("properties")
        if isinstance(properties, dict) and schema.get("additionalProperties") is not True:
            extra = sorted(set(call.arguments) - set(properties))
            if extra:
                problems[index] = f"called {call.name} with {extra[0]!r}, an argument it does not take"
    return problems


def _replay_error(calls: Sequence[ToolCall], skip: set[int]) -> str | None:
    """The first call that raises when replayed on a fresh workplace world (calls to unknown APIs skipped)."""
    from appliance.world import World

    world = World.fresh()
    for index, call in enumerate(calls):
        if index in skip:
            continue
        result = world.call(call)
        if result.raised:
            return f"{call.name} raised: {result.observation}"
    return None


def _recorded_error(steps: Sequence[Step]) -> str | None:
    """Without a world to replay in, the tool results the trajectory recorded."""
    for step in steps:
        if step.result and step.result.lstrip().lower().startswith("error"):
            return f"{step.call.name} returned {step.result.strip()[:120]!r}"
    return None


def _looped(calls: Sequence[ToolCall]) -> str | None:
    run, previous = 1, None
    for call in calls:
        key = (call.name, json.dumps(call.arguments, sort_keys=True, default=str))
        run = run + 1 if key == previous else 1
        previous = key
        if run >= REPEAT_LIMIT:
            return f"called {call.name} with the same arguments {REPEAT_LIMIT} times in a row"
    return None


def _guessed_id(messages: Sequence[dict[str, Any]], steps: Sequence[Step]) -> str | None:
    """A state-changing call on an id that no system, user or tool message before it showed."""
    for step in steps:
        if not is_state_changing(step.call.name):
            continue
        seen = " ".join(text_of(m.get("content")) for m in messages[:step.message_index]
                        if m.get("role") in ("system", "developer", "user", "tool"))
        for key, value in step.call.arguments.items():
            if key.endswith("_id") and isinstance(value, (str, int)) and str(value).strip() \
                    and str(value) not in seen:
                return (f"{step.call.name} used {key} {str(value)!r}, which no earlier message showed "
                        "(guessed, not looked up)")
    return None


def _unfinished(messages: Sequence[dict[str, Any]], reading: Reading, finish_reason: str | None) -> str | None:
    last = messages[-1] if messages else {}
    unanswered = [s for s in reading.steps if s.result is None and s.message_index == len(messages) - 1]
    if last.get("role") == "assistant" and unanswered:
        return f"ended on a call to {unanswered[0].call.name} whose result never came"
    if last.get("role") == "tool":
        return "ended on a tool result, without a final answer"
    if last.get("role") == "user":
        return "ended on a user message, without an answer"
    if finish_reason == "length":
        return "the last answer was cut off at the token limit"
    return None


def _intervention_note(detail: Any) -> str:
    if isinstance(detail, str) and detail.strip():
        return detail.strip()[:200]
    if isinstance(detail, dict):
        note = detail.get("note") or detail.get("reason") or detail.get("description")
        if isinstance(note, str) and note.strip():
            return note.strip()[:200]
    return "a person stepped in"


def _find_task(context: _PackContext, task_id: str | None, messages: Sequence[dict[str, Any]]) -> Task | None:
    if task_id:
        try:
            return context.pack.task(task_id)
        except ApplianceError:
            pass
    request = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return context.by_request.get(_normalise(request)) if request else None


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


