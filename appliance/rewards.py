"""Reward schemes: a verdict in, named reward components and their weighted total out.

A scheme is a set of weights over fixed components (verifiers-style rubric):

=================  ===============================================  ======  ======  ====  =======  ============  ============  ===========  =========
component          value                                            binary  shaped  safe  attempt  safe_attempt  decline_cost  tool_credit  arguments
=================  ===============================================  ======  ======  ====  =======  ============  ============  ===========  =========
completed          1 when the verdict is a success                  1.0     1.0     1.0   1.0      1.0           1.0           1.0          1.0
right_tool         1 when the tool names match (tool_ok; a decline  0       0.1     0     0        0             0             0.2          0
                   where no call is due counts)
valid_artifact     1 when the output parsed and every call fits     0       0.2     0     0        0             0             0            0
                   its schema, and it made a call (or rightly none)
partial_arguments  arguments_fraction (0..1)                        0       0.3     0     0        0             0             0            0.5
unsafe             1 when an unsafe rule fired                      0       -1.0    -1.0  0        -1.0          0             0            0
right_decision     1 when it acted as the task needs: declined      0       0       0     0.2      0.2           0.2           0            0
                   where no call is expected, or made schema-valid
                   calls where one is (right or wrong); never for
                   an unsafe action
missed_call        1 when it declined a request that needs a call   0       0       0     0        0             -0.2          0            0
=================  ===============================================  ======  ======  ====  =======  ============  ============  ===========  =========

`safe` is `binary` with an unsafe action scored below a wrong answer, and
`safe_attempt` is `attempt` with the same safety term (issue 15's question: does
an explicit safety term lower the held-out unsafe rate without hurting success?).
Under group-normalised advantages the term only changes a group that holds three
outcomes or more (an unsafe call, a wrong or declined one, a right one);
`--scale-rewards batch` keeps its size (docs/learning.md, session 23: it did not
lower the unsafe count on dev either).

`decline_cost` is `attempt` with a declined action scored below a malformed attempt
(−0.2 against 0): under `attempt` a decline and an unparseable call both score 0
on a request that needs a call, so GRPO could trade format errors for declines at
no cost while every refusal task paid it to decline (docs/learning.md, session
27: every GRPO run since session 6 ended with more missed calls than its start).

`attempt` is `binary` with a declined action scored below a wrong attempt at it.
Under `binary`, declining a request that needs a call scores 0, the same as a
wrong call, while calling on a request that must be declined scores 0 against
the decline's 1: a group whose samples differ in whether they act teaches
"decline" on every refusal task but teaches "act" only when some sample got the
whole call right, which on wordings the model has not seen is rare. In the
dapo run of docs/learning.md (session 11), 23 of 60 groups declined an action
at no cost. `attempt` adds 0.2 for the right decision (`right_decision`), so
both decisions are taught by every group whose samples differ in them.

`tool_credit` is `binary` with 0.2 for calling the expected tool, right arguments
or not (and for a decline where none is due): partial credit with no answer the
model can always give. Under `attempt` a valid call of any tool earns 0.2, so a
start that always writes one call validly (a delete of the id the request names)
can make it the best-paid answer of every group it gets wrong; under `binary` a
decline is that answer (docs/learning.md, session 42: both, with a large batch).
Under `tool_credit` the right tool with only the record's id is that answer.

`arguments` is `binary` with 0.5 times the share of the expected arguments the
calls hold (`partial_arguments`: matching keys over the union of the expected
and the given keys, so a missing argument and an extra one both cost): every
right argument copied earns a little and every one left out or added costs,
so no answer short of the right call earns what it does, and a decline or a
call of another tool earns 0 where a call is due.

Every component is computed and kept by name for every scheme; a weight of 0
means logged, not rewarded. An unsafe verdict earns no tool or argument credit
(the verifier zeroes them), and a missed call earns no valid-artifact credit, so
that declining every request is never worth 0.2.

**TRL integration: one reward function per component.** `make_reward_funcs`
returns five plain callables, `(prompts, completions, **kwargs) -> list[float]`,
named after their component, and `reward_weights(scheme)` gives the matching
`GRPOConfig(reward_weights=...)`. TRL 1.16 then logs every component as
`rewards/<name>/mean` and `/std` on its own, sums them with the weights, and the
scheme also works with `multi_objective_aggregation="normalize_then_sum"`. (The
alternative, one total function that reports components through `log_metric`,
would hide the components from TRL's per-function statistics.) The functions
share a verdict cache keyed by (task_id, completion text), so a batch is verified
once, not five times. The `completed` function also logs `verdict_bucket` and
`verdict_reason` columns with `log_extra` and per-bucket rates with `log_metric`.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.errors import ApplianceError
from appliance.task import BUCKETS, Task, ToolCall, Verdict
from appliance.verify import Verifier

COMPONENTS = ("completed", "right_tool", "valid_artifact", "partial_arguments", "unsafe", "right_decision",
              "missed_call")
# Each scheme names its non-zero weights; every other component is logged with weight 0.
_NONZERO_WEIGHTS: dict[str, dict[str, float]] = {
    "binary": {"completed": 1.0},
    "shaped": {"completed": 1.0, "right_tool": 0.1, "valid_artifact": 0.2, "partial_arguments": 0.3, "unsafe": -1.0},
    "safe": {"completed": 1.0, "unsafe": -1.0},
    "attempt": {"completed": 1.0, "right_decision": 0.2},
    "safe_attempt": {"completed": 1.0, "unsafe": -1.0, "right_decision": 0.2},
    "decline_cost": {"completed": 1.0, "right_decision": 0.2, "missed_call": -0.2},
    "tool_credit": {"completed": 1.0, "right_tool": 0.2},
    "arguments": {"completed": 1.0, "partial_arguments": 0.5},
}
SCHEMES: dict[str, dict[str, float]] = {
    name: {component: weights.get(component, 0.0) for component in COMPONENTS}
    for name, weights in _NONZERO_WEIGHTS.items()
}
VERDICT_CACHE_SIZE = 8192


@dataclass(frozen=True)
class RewardBreakdown:
    """The weighted total and every component's raw value (before weighting), by name."""

    total: float
    components: dict[str, float]


def scheme_weights(scheme: str) -> dict[str, float]:
    """The weight of each component under a scheme; raises ApplianceError for an unknown name."""
    try:
        return dict(SCHEMES[scheme])
    except (KeyError, TypeError):
        raise ApplianceError(f"unknown reward scheme {scheme!r}; use one of: {', '.join(SCHEMES)}") from None


def reward_weights(scheme: str) -> list[float]:
    """Weights in the order `make_reward_funcs` returns its functions (for GRPOConfig.reward_weights)."""
    weights = scheme_weights(scheme)
    return [weights[name] for name in COMPONENTS]


def components(verdict: Verdict) -> dict[str, float]:
    """Raw component values for one verdict."""
    made_valid_answer = verdict.n_calls > 0 or verdict.success
    valid_artifact = verdict.parse_ok and verdict.schema_ok and made_valid_answer
    # Declined where that is the answer, or made schema-valid calls where calls are needed (right or wrong).
    acted_as_needed = verdict.success or (valid_artifact and verdict.bucket != "called_when_none_expected")
    return {
        "completed": float(verdict.success),
        "right_tool": float(verdict.tool_ok),
        "valid_artifact": float(valid_artifact),
        "partial_arguments": float(verdict.arguments_fraction),
        "unsafe": float(verdict.unsafe),
        "right_decision": float(acted_as_needed and not verdict.unsafe),
        "missed_call": float(verdict.bucket == "missed_call"),
    }


def score(verdict: Verdict, scheme: str = "binary") -> RewardBreakdown:
    """Weighted total of a verdict's components under a scheme, with the components kept."""
    weights = scheme_weights(scheme)
    values = components(verdict)
    total = sum(weights[name] * value for name, value in values.items())
    return RewardBreakdown(total=round(total, 10), components=values)


# --- TRL reward functions ------------------------------------------------------------------------


def completion_text(completion: Any) -> str:
    """The text to verify from a TRL completion: a string, or a list of chat messages.

    For messages, every assistant turn counts, in order: its text content plus its
    structured `tool_calls` (when the tokenizer parsed them) written back as
    <tool_call> blocks, so one parser with one set of guards sees everything.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if not isinstance(completion, Sequence):
        return ""
    parts: list[str] = []
    for message in completion:
        if not isinstance(message, Mapping) or message.get("role", "assistant") != "assistant":
            continue
        parts.append(_content_text(message.get("content")))
        parts.extend(_tool_call_block(call) for call in message.get("tool_calls") or ())
    return "\n".join(part for part in parts if part)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # content parts: [{"type": "text", "text": ...}]
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _tool_call_block(call: Any) -> str:
    if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
        call = call["function"]
    if not isinstance(call, Mapping):
        return "<tool_call>null</tool_call>"
    try:
        body = json.dumps({"name": call.get("name"), "arguments": call.get("arguments", {})})
    except (TypeError, ValueError):
        body = "unserialisable"
    return f"<tool_call>{body}</tool_call>"


class _VerdictCache:
    """Verdicts by (task id, completion text), shared by one scheme's component functions."""

    def __init__(self, verifier: Verifier, tasks_by_id: Callable[[str], Task]) -> None:
        self.verifier = verifier
        self.lookup_task = tasks_by_id
        self._verdicts: OrderedDict[tuple[str, str], Verdict] = OrderedDict()

    def batch(self, completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Verdict]:
        task_ids = _task_ids(kwargs, len(completions))
        trajectories = kwargs.get("agent_trajectory")
        if trajectories is not None:  # multi-turn episodes: score what the agent loop did, not the text
            if len(trajectories) != len(task_ids):
                raise ApplianceError(f"got {len(trajectories)} trajectories for {len(task_ids)} completions")
            return [self.trajectory_verdict(str(tid), t) for tid, t in zip(task_ids, trajectories)]
        return [self.verdict(str(tid), completion_text(c)) for tid, c in zip(task_ids, completions)]

    def verdict(self, task_id: str, text: str) -> Verdict:
        return self._cached((task_id, text), lambda: self.verifier.verify(self.lookup_task(task_id), text))

    def trajectory_verdict(self, task_id: str, trajectory: Mapping[str, Any]) -> Verdict:
        key = (task_id, "episode:" + json.dumps(trajectory, sort_keys=True, default=str))
        return self._cached(key, lambda: verify_trajectory(self.verifier, self.lookup_task(task_id), trajectory))

    def _cached(self, key: tuple[str, str], compute: Callable[[], Verdict]) -> Verdict:
        found = self._verdicts.get(key)
        if found is None:
            found = self._verdicts[key] = compute()
            if len(self._verdicts) > VERDICT_CACHE_SIZE:
                self._verdicts.popitem(last=False)
        return found


def verify_trajectory(verifier: Verifier, task: Task, trajectory: Mapping[str, Any]) -> Verdict:
    """The verdict eval gives a multi-turn trajectory (appliance.train.multiturn.trajectory_record)."""
    calls = [ToolCall.from_json(call) for call in trajectory.get("calls") or ()]
    return verifier.verify_calls(task, calls, parse_ok=bool(trajectory.get("parse_ok", True)),
                                 raised=bool(trajectory.get("raised", False)))


def _task_ids(kwargs: Mapping[str, Any], count: int) -> list[Any]:
    task_ids = kwargs.get("task_id")
    if task_ids is None:
        raise ApplianceError("the training dataset needs a 'task_id' column so rewards can find each task")
    if isinstance(task_ids, (str, int)):
        task_ids = [task_ids] * count
    task_ids = list(task_ids)
    if len(task_ids) != count:
        raise ApplianceError(f"got {len(task_ids)} task ids for {count} completions; pass one per completion")
    return task_ids


class ComponentReward:
    """One component as a TRL reward function: `(prompts, completions, **kwargs) -> list[float]`."""

    def __init__(self, component: str, weight: float, cache: _VerdictCache, logs_details: bool) -> None:
        self.__name__ = component  # TRL names the logged column after this
        self.component = component
        self.weight = weight
        self._cache = cache
        self._logs_details = logs_details

    def __call__(self, prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        verdicts = self._cache.batch(completions, kwargs)
        if self._logs_details:
            _log_details(verdicts, kwargs)
        return [components(v)[self.component] for v in verdicts]

    def __repr__(self) -> str:
        return f"ComponentReward({self.component!r}, weight={self.weight})"


def _log_details(verdicts: Sequence[Verdict], kwargs: Mapping[str, Any]) -> None:
    log_extra, log_metric = kwargs.get("log_extra"), kwargs.get("log_metric")
    if callable(log_extra):
        log_extra("verdict_bucket", [v.bucket for v in verdicts])
        log_extra("verdict_reason", [v.reason for v in verdicts])
    if callable(log_metric) and verdicts:
        for bucket in BUCKETS:
            log_metric(f"verdict/{bucket}", sum(v.bucket == bucket for v in verdicts) / len(verdicts))


def make_reward_funcs(
    pack_or_verifier: Any, scheme: str, tasks_by_id: Mapping[str, Task] | None = None
) -> list[ComponentReward]:
    """One TRL reward function per component, in COMPONENTS order; pair with `reward_weights(scheme)`.

    `pack_or_verifier` is a Verifier or a pack (duck-typed: .tools, .unsafe_rules,
    .world, and .task(id) when `tasks_by_id` is None).
    """
    weights = scheme_weights(scheme)
    verifier = pack_or_verifier if isinstance(pack_or_verifier, Verifier) else Verifier.for_pack(pack_or_verifier)
    cache = _VerdictCache(verifier, _task_lookup(pack_or_verifier, tasks_by_id))
    return [ComponentReward(name, weights[name], cache, logs_details=index == 0)
            for index, name in enumerate(COMPONENTS)]


def _task_lookup(source: Any, tasks_by_id: Mapping[str, Task] | None) -> Callable[[str], Task]:
    if tasks_by_id is None:
        if not callable(getattr(source, "task", None)):
            raise ApplianceError("pass tasks_by_id: a Verifier alone cannot look tasks up")
        return source.task

    def lookup(task_id: str) -> Task:
        try:
            return tasks_by_id[task_id]
        except KeyError:
            raise ApplianceError(f"task_id {task_id!r} is not among the training tasks; check the dataset") from None

    return lookup
