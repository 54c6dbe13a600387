"""One scoring front for every pack: the workplace verifier, or BFCL's AST rules.

The evaluator and the trainer ask the same questions (score this text, score
these calls, what reward is that); only the pack decides how they are answered.

BFCL rows follow the leaderboard: an output that does not decode to a call
(empty, a think block only, prose with a brace, a broken or truncated call) is
"no call" there, so on an irrelevance row it is a success, not a format error;
the verdict keeps parse_ok False, so invalid-output rates still count it. On
every other row it stays the verifier's format error.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from appliance.parsing import parse_tool_calls
from appliance.rewards import RewardBreakdown, score
from appliance.task import Task, ToolCall, Verdict
from appliance.verify import Verifier


class Scorer:
    def __init__(self, pack: Any) -> None:
        self.pack = pack
        self.verifier = Verifier.for_pack(pack)
        self.scheme = pack.reward_scheme
        self.is_bfcl = pack.manifest.get("scorer") == "bfcl"

    def score_text(self, task: Task, text: str) -> Verdict:
        verdict = self.verifier.verify(task, text)
        if not self.is_bfcl:
            return verdict
        if not verdict.parse_ok:
            return self._bfcl_undecoded(task, verdict)
        return self._bfcl_verdict(task, parse_tool_calls(text).calls, verdict)

    def score_calls(self, task: Task, calls: Sequence[ToolCall], *, parse_ok: bool, raised: bool,
                    final_text: str = "") -> Verdict:
        verdict = self.verifier.verify_calls(task, list(calls), parse_ok=parse_ok, raised=raised)
        if not self.is_bfcl:
            return verdict
        if not verdict.parse_ok:
            return self._bfcl_undecoded(task, verdict)
        return self._bfcl_verdict(task, tuple(calls), verdict)

    def reward(self, verdict: Verdict) -> RewardBreakdown:
        return score(verdict, self.scheme)

    def change_counts(self, task: Task, calls: Sequence[ToolCall]) -> tuple[int, int]:
        """(expected state-changing calls, state-changing calls made) for long-horizon labels."""
        from appliance.world import STATE_CHANGING_TOOLS

        expected = sum(c.name in STATE_CHANGING_TOOLS for c in task.expected)
        made = sum(c.name in STATE_CHANGING_TOOLS for c in calls)
        return expected, made

    def _bfcl_undecoded(self, task: Task, base: Verdict) -> Verdict:
        """An output that did not decode: BFCL's "no call", which only an irrelevance row wants."""
        from appliance.bfcl import expects_no_call

        if base.bucket != "format_error" or not expects_no_call(task.meta.get("bfcl", {}).get("category", "")):
            return base  # a relevant row, or a verifier error (ours, not the model's)
        verdict = self._bfcl_verdict(task, (), base)
        return replace(verdict, reason=f"decoded no call ({base.reason}), as required")

    def _bfcl_verdict(self, task: Task, calls: Sequence[ToolCall], base: Verdict) -> Verdict:
        """BFCL's AST checker decides success and the bucket; the verifier's format checks stay."""
        from appliance.bfcl import check_bfcl

        outcome = check_bfcl({"bfcl": task.meta.get("bfcl", {}), "tools": list(task.tools or ())}, list(calls))
        if outcome.passed:
            return replace(base, tool_ok=True, arguments_ok=True, arguments_fraction=1.0, executed_ok=True,
                           state_match=True, unsafe=False, unsafe_rule=None, bucket="success",
                           reason=outcome.reason)
        return replace(base, state_match=False, executed_ok=False, bucket=outcome.bucket, reason=outcome.reason,
                       tool_ok=base.tool_ok and outcome.bucket != "wrong_tool",
                       arguments_ok=False if outcome.bucket == "wrong_arguments" else base.arguments_ok)


def make_scorer(pack: Any) -> Scorer:
    return Scorer(pack)


def declining_everything(pack: Any, tasks: Sequence[Task], scorer: Scorer | None = None) -> dict[str, float]:
    """Per task, what doing nothing scores: the pack's canonical decline, judged as any answer is (by `scorer`,
    the eval's own where the caller has one; a decline's success does not depend on the reward scheme).

    WorkBench gives full marks to doing nothing on a task that needs no change, and a base model that cannot
    write a call yet fails many of those; an adapter that only learnt to decline can then beat it. The gate
    compares a candidate with this as well as with its baseline.
    """
    from appliance.prompting import NO_ACTION_TEXT

    scorer = scorer or make_scorer(pack)
    return {task.id: float(scorer.score_text(task, NO_ACTION_TEXT).success) for task in tasks}
