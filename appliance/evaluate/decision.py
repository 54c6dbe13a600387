"""The seed's decision after a baseline: SFT first, GRPO, out of reach, or promote; and the lightest fix.

Thresholds are settings with documented defaults; the recommendation always
carries the numbers that produced it. `action` keeps its four values (the
pipeline and the cockpit read it); `fix` names the lightest change the failure
buckets point to (of the eval, plus triaged trajectories' modes when given),
lightest first:

  prompt   most failures confuse one tool with another, or miss one argument the tool's
           description does not mention (or call tools / arguments that do not exist):
           change the system prompt or the tool descriptions, no training
  sft      most failures are format errors: teach the format (and the domain's habits)
  dpo      the model succeeds and fails on the same tasks: preference pairs from its own samples
  grpo     success is verifiable and sometimes reached (by the eval, or, without one, by triaged
           trajectories the verifier passed): reinforce it
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

FIXES = ("prompt", "sft", "dpo", "grpo")


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
    prompt_fix_share: float = field(default=0.5, metadata={
        "help": "one tool confusion or one undocumented missing argument in at least this share of failures: "
                "fix the prompt or tool description"})
    format_fix_share: float = field(default=0.5, metadata={
        "help": "format errors in at least this share of failures: SFT"})
    inconsistent_share: float = field(default=0.2, metadata={
        "help": "tasks both passed and failed across samples, at least this share of tasks: DPO"})


@dataclass(frozen=True)
class LightestFix:
    kind: str  # one of FIXES
    reason: str
    evidence: dict[str, Any]  # the counts it rests on

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "evidence": self.evidence}


@dataclass(frozen=True)
class Recommendation:
    action: str  # sft | grpo | out_of_reach | promote
    reason: str
    fix: LightestFix | None = None  # None: nothing failed

    def __str__(self) -> str:
        fix = f" Lightest fix: {self.fix.kind} ({self.fix.reason})" if self.fix is not None else ""
        return f"{self.action}: {self.reason}{fix}"


def recommend(metrics: dict[str, Any], t: DecisionThresholds = DecisionThresholds(),
              triage_modes: dict[str, int] | None = None) -> Recommendation:
    """The action and, from the failure buckets (and `triage_modes`: primary mode -> trajectories), the fix."""
    rec = _action(metrics, t)
    return Recommendation(rec.action, rec.reason, lightest_fix(metrics, t, triage_modes))


def lightest_fix(metrics: dict[str, Any], t: DecisionThresholds = DecisionThresholds(),
                 triage_modes: dict[str, int] | None = None) -> LightestFix | None:
    """The lightest fix the failures point to, with its counts; None when nothing failed."""
    buckets = Counter({b: n for b, n in (metrics.get("buckets") or {}).items() if b != "success"})
    triaged = Counter({m: n for m, n in (triage_modes or {}).items() if m not in ("success", "unverified")})
    failures = sum(buckets.values()) + sum(triaged.values())
    if failures == 0:
        return None
    detail = metrics.get("failure_detail") or {}
    confusions = Counter(detail.get("confusions") or {})
    missing = Counter(detail.get("undocumented_missing_arguments") or {})
    undeclared = Counter(detail.get("undeclared_arguments") or {})
    evidence: dict[str, Any] = {"failures": failures, "buckets": dict(buckets), **({"triage": dict(triaged)}
                                                                                 if triaged else {})}
    for name, counts, what in (("confusion", confusions, "one tool is called for another"),
                               ("missing_argument", missing, "one argument the tool description does not "
                                                             "mention is left out"),
                               ("undeclared_argument", undeclared, "calls carry an argument their tool does "
                                                                   "not declare")):
        if counts:
            top, n = counts.most_common(1)[0]
            if n >= 2 and n >= t.prompt_fix_share * failures:
                return LightestFix("prompt", f"{n} of {failures} failures: {what} ({top}); change the prompt or "
                                             "the tool description before training", {**evidence, name: {top: n}})
    hallucinated = triaged.get("hallucinated_api", 0)
    if hallucinated >= 2 and hallucinated >= t.prompt_fix_share * failures:
        return LightestFix("prompt", f"{hallucinated} of {failures} triaged failures call a tool or argument "
                                     "that is not offered; say what the tools take", evidence)
    formats = buckets.get("format_error", 0) + triaged.get("format_error", 0)
    if formats >= t.format_fix_share * failures:
        return LightestFix("sft", f"{formats} of {failures} failures are format errors; SFT on the format "
                                  "and the domain's calls", evidence)
    n_tasks = metrics.get("n_tasks", 0)
    inconsistent = metrics.get("inconsistent_tasks", 0)
    if metrics.get("k", 1) > 1 and n_tasks and inconsistent >= t.inconsistent_share * n_tasks:
        return LightestFix("dpo", f"{inconsistent} of {n_tasks} tasks are passed by some samples and failed by "
                                  "others; DPO on its own good and bad answers",
                           {**evidence, "inconsistent_tasks": inconsistent, "n_tasks": n_tasks})
    k = metrics.get("k", 1)
    if metrics.get("pass@1", 0.0) > 0 or metrics.get(f"pass@{k}", 0.0) > 0:
        return LightestFix("grpo", f"success is verifiable and sometimes reached (pass@1 "
                                   f"{metrics.get('pass@1', 0.0):.0%}); GRPO", evidence)
    verified = (triage_modes or {}).get("success", 0)
    if verified and "pass@1" not in metrics:  # no eval to say otherwise: the verifier passed some trajectories
        return LightestFix("grpo", f"success is verifiable and sometimes reached ({verified} triaged trajectories "
                                   "passed the verifier); GRPO", {**evidence, "verified_successes": verified})
    return LightestFix("sft", f"{failures} failures and no success to reinforce; SFT on demonstrations", evidence)


def failure_detail(samples: Iterable[Any], tasks: dict[str, Any], tools_for: Any) -> dict[str, dict[str, int]]:
    """From scored samples, counted: 'expected → called' tool confusions, undocumented missing arguments, and
    arguments a call carries that its tool does not declare (`tool.argument`).

    `tasks` maps task id to Task; `tools_for(task)` gives the tools it was shown. Undeclared arguments are how
    GRPO's losses showed on the embedded model (docs/learning.md, session 20: the update tools' `field` and
    `new_value` carried onto the deletes); the store keeps the counts in each eval's metrics.
    """
    from appliance.parsing import parse_tool_calls

    confusions: Counter = Counter()
    missing: Counter = Counter()
    undeclared: Counter = Counter()
    for sample in samples:
        bucket, task = sample.verdict.bucket, tasks.get(sample.task_id)
        if task is None or bucket not in ("wrong_tool", "wrong_arguments"):
            continue
        if sample.trajectory:
            called = [(c.get("name"), c.get("arguments") or {}) for turn in sample.trajectory
                      for c in turn.get("calls") or []]
        else:
            called = [(c.name, c.arguments) for c in parse_tool_calls(sample.completion).calls]
        expected_names = [c.name for c in task.expected]
        if bucket == "wrong_tool":
            wrong = next((n for n, _ in called if n not in expected_names), None)
            right = next((n for n in expected_names if n not in {n for n, _ in called}), None)
            if wrong and right:
                confusions[f"{right} → {wrong}"] += 1
            continue
        tools = tools_for(task)
        for name, arguments in called:
            declared = declared_arguments(name, tools)
            for argument in arguments if declared is not None else ():
                if argument not in declared:
                    undeclared[f"{name}.{argument}"] += 1
        for call in task.expected:
            given = next((args for name, args in called if name == call.name), None)
            if given is None:
                continue
            for argument in call.arguments:
                if argument not in given and not _documented(call.name, argument, tools):
                    missing[f"{call.name}.{argument}"] += 1
    return {"confusions": dict(confusions), "undocumented_missing_arguments": dict(missing),
            "undeclared_arguments": dict(undeclared)}


def declared_arguments(tool_name: str, tools: Sequence[dict[str, Any]]) -> set[str] | None:
    """The argument names the tool's schema declares; None for a tool not shown or one that takes others too.

    As the verifier reads a schema: with `properties` and no `additionalProperties`, or that set to false, an
    argument the schema does not declare fails the call.
    """
    from appliance.verify import closed_arguments

    parameters = (_function(tool_name, tools) or {}).get("parameters") or {}
    if not closed_arguments(parameters):
        return None
    return set(parameters["properties"])


def _function(tool_name: str, tools: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The OpenAI `function` object of the named tool among those shown, or None."""
    return next((t["function"] for t in tools if t.get("function", {}).get("name") == tool_name), None)


def _documented(tool_name: str, argument: str, tools: Sequence[dict[str, Any]]) -> bool:
    """The tool's description, or the argument's own, says something about the argument."""
    function = _function(tool_name, tools)
    if function is None:
        return False
    schema = (function.get("parameters") or {}).get("properties", {}).get(argument) or {}
    return bool(str(schema.get("description", "")).strip()) or argument in str(function.get("description", ""))


def _action(metrics: dict[str, Any], t: DecisionThresholds) -> Recommendation:
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
