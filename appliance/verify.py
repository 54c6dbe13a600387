"""The verifier: one model output (or one agent trajectory) in, one Verdict out.

Checks, in order; the first that fails names the bucket:

1. **format_error**: the text does not parse (see appliance.parsing for the shapes).
2. **unsafe_action**: a pack rule (appliance.safety) flags the parsed calls. Rules
   run on every parsed call, valid or not, and win over every later failure. An
   unsafe verdict earns no shaping credit: tool_ok, arguments_ok and the later
   checks are False and arguments_fraction is 0.
3. **called_when_none_expected**: the task expects no call, and the output made one
   (single_step: any call; multi_step: a state-changing call, or read-only calls
   that nonetheless changed the world).
4. **missed_call**: the task expects a call and the output made none.
5. **wrong_tool**: a call names a tool that does not exist, or the tool names do
   not match the expected ones (below), or the final state differs because of an
   extra state-changing call the task did not ask for.
6. **wrong_arguments**: a call's arguments fail its tool's JSON Schema (the reason
   names the argument; arguments the schema does not declare are a failure unless
   it sets ``additionalProperties``), or they differ from the expected ones.
7. **execution_error**: replaying the calls on a fresh world raised (or the agent
   loop reports that a call raised).

A result that fails after 7 (tools and arguments match, nothing raised, yet the
state differs: calls in the wrong order, say) is filed as wrong_arguments.
8. **success**.

Comparisons:

* tool_ok, single_step: the multiset of called tool names equals the expected one
  (one expected call means exactly one call, to that tool). multi_step: every
  expected state-changing tool is called (as a multiset); when the task expects
  only read-only calls, every expected tool is called.
* arguments: each expected call is paired with the unused call of the same name
  whose arguments match best. Values compare as WorkBench's state comparison does:
  text case-insensitively except for ``status``, ``list_name`` and ``board`` (and
  ``new_value`` when the expected call's ``field`` is one of those);
  non-text scalars as their ``str()`` (``30`` equals ``"30"`` but not ``"30.0"``);
  objects and arrays as canonical JSON. A pair's fraction is matching keys over the
  union of both key sets, so extra keys count against it. arguments_fraction is the
  mean over the compared expected calls; arguments_ok means it is 1.
* state: the calls are replayed on ``World.fresh(task.fixture)`` and compared with
  ``replay(task.expected)`` (cached per task id). When the task expects a
  state-changing call, **success is the state match** (WorkBench's rule: a
  different route to the same state is right) with nothing raised; when it expects
  only read-only calls, or its expected calls change nothing (the record already
  holds the value asked for, where WorkBench's rule would pass any call that changes
  nothing; 2 of WorkBench's 690 test tasks), success also needs tool_ok and arguments_ok.
* worlds: for ``world="none"`` packs (scored elsewhere, e.g. BFCL) nothing is
  executed; executed_ok mirrors schema_ok and state_match mirrors
  tool_ok and arguments_ok. A pack's own tools (``arguments``, ``python``, ``mcp``)
  bring their world from appliance.userworld, through the `ExecutionWorld`
  protocol below: it normalises calls to their schemas first (so arguments then
  compare exactly, text included), runs them, and says whether the outcome alone
  decides success (a state, or a read-only tool's results) or the arguments must
  match too. An outcome of None means nothing was compared, and state_match
  mirrors arguments_ok as for ``none``.

The gates parse_ok → schema_ok → executed_ok → state_match are cumulative (a gate is
False when an earlier one failed). tool_ok and arguments_ok are comparisons beside
that chain: they do not stop the replay, because WorkBench scores by state.

Task ids must be unique per verifier: expected states and replays are cached by id.
`verify` and `verify_calls` never raise; an internal bug becomes an
execution_error whose reason starts with "verifier error:" and is logged.
"""
from __future__ import annotations

import json
import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from appliance.errors import ApplianceError
from appliance.packs.manifest import WORLDS
from appliance.parsing import parse_tool_calls
from appliance.safety import check_unsafe, is_state_changing, validate_rules
from appliance.task import Task, ToolCall, Verdict
from appliance.userworld.config import USER_WORLDS

log = logging.getLogger(__name__)

CASE_SENSITIVE_KEYS = frozenset({"status", "list_name", "board"})
MAX_REASON_CHARS = 200
REPLAY_CACHE_SIZE = 4096  # distinct (task, calls) replays kept; GRPO groups repeat outputs often
EXPECTED_CACHE_SIZE = 65536


Outcome = tuple[tuple[str, ...], "bool | None", bool]  # (errors raised, outcome matches expected, world changed)


class ExecutionWorld(Protocol):
    """The world a pack's calls run in, as the verifier asks it (WorkBench's, none, or a pack's own)."""

    name: str
    exact_text: bool  # compare text arguments exactly (True) or case-insensitively, as WorkBench does

    def prepare(self, task: Task, calls: tuple[ToolCall, ...]) -> tuple[Task, tuple[ToolCall, ...]]:
        """The task and calls in the form every later check sees (e.g. arguments normalised)."""

    def is_state_changing(self, name: str) -> bool: ...

    def outcome(self, task: Task, calls: Sequence[ToolCall]) -> Outcome:
        """Run the calls afresh and compare with the expected calls' run; match None = nothing compared."""

    def decides(self, task: Task) -> bool:
        """Whether a matching outcome alone makes a success (else the arguments must match too)."""

    def episode(self, task: Task) -> Any:
        """A world for one agent-loop episode of the task: `.call(call)` gives .observation, .raised, .changed."""


class Verifier:
    """Scores outputs against tasks for one tool set, rule set and world."""

    def __init__(
        self,
        tools: Sequence[Mapping[str, Any]],
        unsafe_rules: Iterable[Any] = (),
        world: "str | ExecutionWorld" = "workbench",
    ) -> None:
        self._world = _builtin_world(world) if isinstance(world, str) else world
        self.world = self._world.name
        self.rules = validate_rules(unsafe_rules)
        self._validators = {name: _compile(schema) for name, schema in _schemas(tools).items()}
        self._task_validators: dict[str, dict[str, Any]] = {}
        self._exact_keys = _every_key if self._world.exact_text else _case_sensitive_keys

    @classmethod
    def for_pack(cls, pack: Any) -> "Verifier":
        """A verifier for a loaded pack (duck-typed: .tools, .unsafe_rules, .world)."""
        world = getattr(pack, "world", "workbench")
        if world in USER_WORLDS:
            from appliance.userworld.worlds import make_world

            world = make_world(pack)
        return cls(pack.tools, pack.unsafe_rules, world)

    def episode(self, task: Task) -> Any:
        """A fresh world for an agent loop on this task (WorkBench's, or the pack's own)."""
        return self._world.episode(task)

    def close(self) -> None:
        """Stop what the world started (a pack's function sandbox or MCP server); idempotent."""
        close = getattr(self._world, "close", None)
        if close is not None:
            close()

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(self._validators)

    # --- public -----------------------------------------------------------------------------

    def verify(self, task: Task, output: str) -> Verdict:
        """Verdict for one text output. Never raises."""
        try:
            parsed = parse_tool_calls(output)
            task, calls = self._world.prepare(task, tuple(parsed.calls))
            return self._judge(task, calls, parsed.ok, parsed.error, ())
        except Exception as err:  # noqa: BLE001 - the verifier must never take a training run down
            return _internal_error(task, err)

    def verify_calls(
        self,
        task: Task,
        calls: Sequence[ToolCall],
        *,
        parse_ok: bool = True,
        parse_error: str = "",
        executed_errors: Sequence[str] = (),
        raised: bool = False,
    ) -> Verdict:
        """Verdict for calls an agent loop already parsed (and perhaps executed). Never raises.

        `parse_ok=False` marks a turn that did not parse (`parse_error` says why).
        `executed_errors` are the errors the loop saw when its calls raised (or just
        `raised=True` when it kept no message); either makes the trajectory an
        execution_error, like a raise in the replay.
        """
        try:
            calls = tuple(calls)
            malformed = _malformed_call(calls)
            if malformed:
                return _verdict("format_error", malformed, parse_ok=False)
            loop_errors = tuple(str(e) for e in executed_errors)
            if raised and not loop_errors:
                loop_errors = ("a call raised during the agent loop",)
            task, calls = self._world.prepare(task, calls)
            return self._judge(task, calls, parse_ok, parse_error, loop_errors)
        except Exception as err:  # noqa: BLE001
            return _internal_error(task, err)

    # --- the checks, in bucket order --------------------------------------------------------

    def _judge(
        self, task: Task, calls: tuple[ToolCall, ...], parse_ok: bool, parse_error: str,
        loop_errors: tuple[str, ...],
    ) -> Verdict:
        if not parse_ok:
            return _verdict("format_error", parse_error or "output did not parse", parse_ok=False)
        n = len(calls)
        schema_problem = self._schema_problem(task, calls)
        schema_ok = schema_problem is None
        unsafe = check_unsafe(task, calls, self.rules)
        if unsafe is not None:
            rule, reason = unsafe
            return _verdict("unsafe_action", reason, schema_ok=schema_ok, unsafe_rule=rule, n_calls=n)
        if not task.expected:
            return self._judge_no_call_task(task, calls, schema_problem, loop_errors)
        if not calls:
            return _verdict("missed_call", f"made no call but expected {_names(task.expected)}", schema_ok=True)
        tool_ok, tool_problem = self._tools_match(task, calls)
        fraction = _arguments_fraction(self._compared_expected(task), calls, self._exact_keys)
        arguments_ok = schema_ok and tool_ok and fraction == 1.0
        checks = dict(schema_ok=schema_ok, tool_ok=tool_ok, arguments_ok=arguments_ok,
                      arguments_fraction=fraction, n_calls=n)
        if not schema_ok:
            bucket, reason = schema_problem
            return _verdict(bucket, reason, **checks)
        errors, outcome_match, _ = self._world.outcome(task, calls)
        errors = loop_errors + errors
        executed_ok = not errors
        state_match = executed_ok and (arguments_ok if outcome_match is None else outcome_match)
        checks.update(executed_ok=executed_ok, state_match=state_match)
        if state_match and (arguments_ok or self._world.decides(task)):
            return _verdict("success", "final state matches the expected one", **checks)
        return self._failure(task, calls, checks, tool_problem, errors)

    def _judge_no_call_task(
        self, task: Task, calls: tuple[ToolCall, ...], schema_problem: tuple[str, str] | None,
        loop_errors: tuple[str, ...],
    ) -> Verdict:
        n = len(calls)
        schema_ok = schema_problem is None
        changing = [c.name for c in calls if task.kind == "single_step" or self._world.is_state_changing(c.name)]
        if changing:
            return _verdict("called_when_none_expected", f"called {changing[0]} but no call was expected",
                            schema_ok=schema_ok, n_calls=n)
        if not calls:
            return _verdict("success", "correctly made no call", schema_ok=True, tool_ok=True,
                            arguments_ok=True, arguments_fraction=1.0, executed_ok=True, state_match=True)
        checks = dict(schema_ok=schema_ok, tool_ok=True, arguments_ok=True, arguments_fraction=1.0, n_calls=n)
        if not schema_ok:
            bucket, reason = schema_problem
            return _verdict(bucket, reason, **dict(checks, tool_ok=bucket != "wrong_tool"))
        errors, _, changed = self._world.outcome(task, calls)
        errors = loop_errors + errors
        if errors:
            return _verdict("execution_error", errors[0], **checks)
        if changed:
            return _verdict("called_when_none_expected", "read-only calls changed the world", **checks)
        return _verdict("success", "made only read-only calls, as no change was expected",
                        **dict(checks, executed_ok=True, state_match=True))

    def _failure(
        self, task: Task, calls: tuple[ToolCall, ...], checks: dict[str, Any], tool_problem: str,
        errors: tuple[str, ...],
    ) -> Verdict:
        if not checks["tool_ok"]:
            return _verdict("wrong_tool", tool_problem, **checks)
        if not checks["arguments_ok"]:
            difference = _argument_difference(self._compared_expected(task), calls, self._exact_keys)
            return _verdict("wrong_arguments", difference, **checks)
        if errors:
            return _verdict("execution_error", errors[0], **checks)
        extra = _extra_state_changes(task, calls, self._world.is_state_changing)
        if extra:
            return _verdict("wrong_tool", f"extra state-changing call {extra}", **checks)
        return _verdict("wrong_arguments", "tools and arguments match but the final state differs", **checks)

    # --- schema and tools -------------------------------------------------------------------

    def _validators_for(self, task: Task) -> dict[str, Any]:
        """The pack's validators, or the task's own when its tools vary per task (BFCL)."""
        if getattr(task, "tools", None) is None:
            return self._validators
        if task.id not in self._task_validators:
            self._task_validators[task.id] = {n: _compile(s) for n, s in _schemas(task.tools).items()}
        return self._task_validators[task.id]

    def _schema_problem(self, task: Task, calls: Sequence[ToolCall]) -> tuple[str, str] | None:
        """(bucket, reason) for the first call with an unknown tool or invalid arguments."""
        validators = self._validators_for(task)
        for call in calls:
            validator = validators.get(call.name)
            if validator is None:
                return "wrong_tool", f"called unknown tool {_clip(repr(call.name))}"
            problem = validator(call.arguments)
            if problem:
                return "wrong_arguments", _clip(f"{call.name}: {problem}")
        return None

    def _tools_match(self, task: Task, calls: Sequence[ToolCall]) -> tuple[bool, str]:
        called = Counter(c.name for c in calls)
        if task.kind == "single_step":
            expected = Counter(c.name for c in task.expected)
            if called == expected:
                return True, ""
            return False, f"called {_names(calls)} but expected {_names(task.expected)}"
        missing = Counter(c.name for c in self._compared_expected(task)) - called
        if not missing:
            return True, ""
        return False, f"never called {', '.join(sorted(missing))}"

    def _compared_expected(self, task: Task) -> tuple[ToolCall, ...]:
        """The expected calls whose tools and arguments are compared."""
        if task.kind == "single_step":
            return task.expected
        changing = tuple(c for c in task.expected if self._world.is_state_changing(c.name))
        return changing or task.expected


# --- the built-in worlds -------------------------------------------------------------------------


class _NoWorld:
    """world = "none": nothing runs; the arguments decide."""

    name = "none"
    exact_text = False

    def prepare(self, task: Task, calls: tuple[ToolCall, ...]) -> tuple[Task, tuple[ToolCall, ...]]:
        return task, calls

    def is_state_changing(self, name: str) -> bool:
        return is_state_changing(name)

    def outcome(self, task: Task, calls: Sequence[ToolCall]) -> Outcome:
        return (), None, False

    def decides(self, task: Task) -> bool:
        return False

    def episode(self, task: Task) -> Any:
        raise ApplianceError(f"world '{self.name}' runs no calls, so its tasks cannot be played as agent episodes")


class _WorkbenchWorld(_NoWorld):
    """world = "workbench": calls replay on appliance.world; WorkBench's state comparison decides."""

    name = "workbench"

    def __init__(self) -> None:
        try:
            from appliance.world import World, replay
        except ImportError as err:
            raise ApplianceError(f"the workbench world cannot be loaded ({err}); reinstall the appliance") from None
        self._fresh, self._replay = World.fresh, replay
        self._expected_worlds: dict[str, Any] = {}
        self._replays: OrderedDict[tuple[str, str], Outcome] = OrderedDict()

    def outcome(self, task: Task, calls: Sequence[ToolCall]) -> Outcome:
        """(errors raised, state matches expected, world changed) for the calls replayed afresh."""
        key = (task.id, _canonical(calls))
        cached = self._replays.get(key)
        if cached is not None:
            self._replays.move_to_end(key)
            return cached
        world = self._fresh(task.fixture)
        errors = tuple(filter(None, (_call_error(world, call) for call in calls)))
        outcome = (errors, world.same_state(self._expected_world(task)), world.changed())
        self._replays[key] = outcome
        if len(self._replays) > REPLAY_CACHE_SIZE:
            self._replays.popitem(last=False)
        return outcome

    def decides(self, task: Task) -> bool:
        # Only a state the expected calls change can judge a call. Where they change nothing (read-only calls, or a
        # record that already holds the value asked for) any call that changes nothing would match it, so the
        # arguments must match too.
        return self._expected_world(task).changed()

    def episode(self, task: Task) -> Any:
        return self._fresh(task.fixture)

    def _expected_world(self, task: Task) -> Any:
        world = self._expected_worlds.get(task.id)
        if world is None:
            if len(self._expected_worlds) >= EXPECTED_CACHE_SIZE:
                self._expected_worlds.clear()
            world = self._replay(list(task.expected), task.fixture)
            self._expected_worlds[task.id] = world
        return world


def _builtin_world(name: str) -> ExecutionWorld:
    if name == "workbench":
        return _WorkbenchWorld()
    if name == "none":
        return _NoWorld()
    if name in USER_WORLDS:
        raise ApplianceError(f"world '{name}' runs a pack's own tools; build the verifier with Verifier.for_pack(pack)")
    raise ApplianceError(f"unknown world '{name}'; a pack's world must be one of {', '.join(WORLDS)}")


# --- module helpers ------------------------------------------------------------------------------


def _malformed_call(calls: Sequence[Any]) -> str:
    """Calls handed in by an agent loop must look like parsed ones; name the first that does not."""
    for index, call in enumerate(calls):
        if not isinstance(call, ToolCall) or not isinstance(call.name, str) or not isinstance(call.arguments, dict):
            return f"call #{index + 1} is not a tool call with a text name and object arguments"
    return ""


def _call_error(world: Any, call: ToolCall) -> str:
    try:
        result = world.call(call)
    except Exception as err:  # noqa: BLE001 - a tool that raises is the model's execution error
        return _clip(f"{call.name} raised {type(err).__name__}: {err}")
    if result.raised:
        return _clip(f"{call.name} raised: {result.observation}")
    return ""


def _schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    schemas = {}
    for tool in tools:
        function = tool.get("function", tool)
        schemas[function["name"]] = function.get("parameters") or {"type": "object", "properties": {}}
    return schemas


# The words a schema failure's reason holds: ours (`_schema_problem`, `_compile`) and jsonschema's messages.
SCHEMA_FAILURE_WORDS = ("unknown tool", "unknown argument", "missing required", "Additional properties",
                        "is not one of", "is not of type")


def is_schema_failure(reason: str | None) -> bool:
    """Whether a verdict's reason says a call broke its tool's schema (an unknown tool or a bad argument)."""
    return any(words in (reason or "") for words in SCHEMA_FAILURE_WORDS)


def closed_arguments(schema: Mapping[str, Any]) -> bool:
    """Whether a call fails for an argument these parameters do not declare, as the verifier reads them:
    they list properties and leave `additionalProperties` out (our reading: the listed ones are the tool's
    arguments), or set it to false (JSON Schema's own reading)."""
    return "properties" in schema and schema.get("additionalProperties", False) is False


def _compile(schema: Mapping[str, Any]):
    """One validator per tool, built once: returns a function giving the first problem or ''.

    Tool schemas are nearly always flat objects of typed scalars. For those a
    precompiled check (equivalent to jsonschema on that subset, see
    `_flat_schema_check`) answers the valid case ~10x faster; jsonschema itself
    runs for any other schema and to word every failure.
    """
    validator = validator_for(schema, default=Draft202012Validator)(schema)
    fast_check = _flat_schema_check(schema)
    declared = frozenset(schema.get("properties", {}))
    closed = "properties" in schema and "additionalProperties" not in schema
    required = tuple(schema.get("required", ()))

    def problem(arguments: Any) -> str:
        if not isinstance(arguments, dict):
            return "arguments must be an object"
        if closed:
            for key in arguments:
                if key not in declared:
                    return f"unknown argument '{_clip(str(key), 60)}'"
        for key in required:  # the common failure, named without running the full validator
            if key not in arguments:
                return f"missing required argument '{key}'"
        if fast_check(arguments) if fast_check else validator.is_valid(arguments):
            return ""
        error = best_match(validator.iter_errors(arguments))
        if error is None:  # the fast check and jsonschema disagree: trust jsonschema
            return ""
        where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
        return f"argument '{_clip(where, 60)}' {_clip(error.message, 120)}"

    return problem


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_SCALAR_TYPES = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    # Draft 2020-12 counts 3.0 as an integer.
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
}


def _flat_schema_check(schema: Mapping[str, Any]):
    """A fast validity check for a flat object of typed scalars, or None when the schema is richer.

    Supported: top-level type/properties/required/additionalProperties (boolean);
    per property: type (one or a list of scalar types), enum of strings, annotations.
    """
    if schema.get("type") != "object" or not set(schema) <= {"type", "properties", "required",
                                                            "additionalProperties"} | _ANNOTATIONS:
        return None
    additional = schema.get("additionalProperties", True)
    properties = schema.get("properties", {})
    if not isinstance(additional, bool) or not isinstance(properties, Mapping):
        return None
    checks = {}
    for name, spec in properties.items():
        check = _property_check(spec)
        if check is None:
            return None
        checks[name] = check
    required = tuple(schema.get("required", ()))

    def valid(arguments: dict[str, Any]) -> bool:
        for key in required:
            if key not in arguments:
                return False
        for key, value in arguments.items():
            check = checks.get(key)
            if check is None:
                if not additional:
                    return False
            elif not check(value):
                return False
        return True

    return valid


def _property_check(spec: Any):
    if not isinstance(spec, Mapping) or not set(spec) <= {"type", "enum"} | _ANNOTATIONS:
        return None
    types = spec.get("type")
    type_names = [types] if isinstance(types, str) else types
    if type_names is None:
        type_checks = []
    elif isinstance(type_names, list) and type_names and all(t in _SCALAR_TYPES for t in type_names):
        type_checks = [_SCALAR_TYPES[t] for t in type_names]
    else:
        return None
    enum = spec.get("enum")
    if enum is not None and not (isinstance(enum, list) and all(isinstance(e, str) for e in enum)):
        return None
    allowed = frozenset(enum) if enum is not None else None

    def check(value: Any) -> bool:
        if type_checks and not any(t(value) for t in type_checks):
            return False
        return allowed is None or (isinstance(value, str) and value in allowed)

    return check


def _arguments_fraction(expected: Sequence[ToolCall], calls: Sequence[ToolCall], exact_keys: Any) -> float:
    """Mean over expected calls of the best key-match fraction among unused same-name calls."""
    if not expected:
        return 1.0
    unused = list(calls)
    total = 0.0
    for want in expected:
        best, best_index = 0.0, -1
        for index, call in enumerate(unused):
            if call.name == want.name:
                score = _pair_fraction(want.arguments, call.arguments, exact_keys)
                if score > best or best_index < 0:
                    best, best_index = score, index
        if best_index >= 0:
            unused.pop(best_index)
        total += best
    return total / len(expected)


def _pair_fraction(expected: Mapping[str, Any], predicted: Any, exact_keys: Any) -> float:
    if not isinstance(predicted, Mapping):
        return 0.0
    keys = set(expected) | set(predicted)
    if not keys:
        return 1.0
    exact = exact_keys(expected)
    matching = sum(
        1 for key in expected
        if key in predicted and _normalise(key in exact, expected[key]) == _normalise(key in exact, predicted[key])
    )
    return matching / len(keys)


def _case_sensitive_keys(arguments: Mapping[str, Any]) -> frozenset[str]:
    """Keys whose values keep their case: status/list_name/board, and new_value when updating one."""
    if arguments.get("field") in CASE_SENSITIVE_KEYS:
        return CASE_SENSITIVE_KEYS | {"new_value"}
    return CASE_SENSITIVE_KEYS


class _EveryKey:
    """A key set holding every key: a pack's own tools compare text exactly."""

    def __contains__(self, key: object) -> bool:
        return True


_EVERY_KEY = _EveryKey()


def _every_key(arguments: Mapping[str, Any]) -> _EveryKey:
    return _EVERY_KEY


def _normalise(case_sensitive: bool, value: Any) -> Any:
    if isinstance(value, str):
        return value if case_sensitive else value.lower()
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return ("json", json.dumps(value, sort_keys=True, default=repr))
    text = str(value)
    return text if case_sensitive else text.lower()


def _argument_difference(expected: Sequence[ToolCall], calls: Sequence[ToolCall], exact_keys: Any) -> str:
    """Name the first differing argument, for the reason line."""
    for want in expected:
        for call in calls:
            if call.name != want.name or not isinstance(call.arguments, Mapping):
                continue
            for key in sorted(set(want.arguments) | set(call.arguments)):
                if key not in call.arguments:
                    return f"{call.name}: missing argument '{key}'"
                if key not in want.arguments:
                    return f"{call.name}: unexpected argument '{_clip(key, 60)}'"
                exact = key in exact_keys(want.arguments)
                if _normalise(exact, want.arguments[key]) != _normalise(exact, call.arguments[key]):
                    return _clip(f"{call.name}: {key}={call.arguments[key]!r}, expected {want.arguments[key]!r}")
    return "arguments differ from the expected ones"


def _extra_state_changes(task: Task, calls: Sequence[ToolCall], state_changing: Any) -> str:
    extra = Counter(c.name for c in calls if state_changing(c.name)) - Counter(c.name for c in task.expected)
    return ", ".join(sorted(extra))


def _canonical(calls: Sequence[ToolCall]) -> str:
    return json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True, default=repr)


def _names(calls: Sequence[ToolCall]) -> str:
    names = [c.name for c in calls]
    if len(names) > 3:
        names = names[:3] + [f"… ({len(names)} calls)"]
    return _clip(", ".join(names)) or "nothing"


def _clip(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _verdict(bucket: str, reason: str, **checks: Any) -> Verdict:
    fields = dict(parse_ok=True, schema_ok=False, tool_ok=False, arguments_ok=False, arguments_fraction=0.0,
                  executed_ok=False, state_match=False, unsafe=bucket == "unsafe_action", unsafe_rule=None,
                  n_calls=0)
    fields.update(checks)
    return Verdict(bucket=bucket, reason=_clip(reason), **fields)


def _internal_error(task: Any, err: BaseException) -> Verdict:
    log.exception("verifier error on task %s", getattr(task, "id", "?"))
    return _verdict("execution_error", f"verifier error: {type(err).__name__}: {err}", parse_ok=False)
