"""Eval metrics from scored samples: the seed's rates, pass@k, buckets, latency, cost.

Pure functions over plain records so they are easy to test and reuse (the
promotion gate and the TUI read the same numbers).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from appliance.evaluate.compare import templates_of
from appliance.task import BUCKETS, Task, Verdict


@dataclass(frozen=True)
class ScoredSample:
    """One generated answer (or one whole trajectory) with its verdict and costs."""

    task_id: str
    sample_index: int
    completion: str
    verdict: Verdict
    reward: float
    components: dict[str, float]
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    turns: int = 1
    horizon: str | None = None  # multi-step: ran_out_of_turns | looped | lost_track
    trajectory: list[dict[str, Any]] | None = None


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _rate(samples: Sequence[ScoredSample], attr: str) -> float:
    if not samples:
        return 0.0
    return sum(bool(getattr(s.verdict, attr)) for s in samples) / len(samples)


def _valid_format_rate(samples: Sequence[ScoredSample], expects_call: set[str]) -> float:
    """Well-formed output: a parseable JSON call, or a plain no-call answer where no call is expected.

    Prose where a call was expected is not valid JSON, even though it parses as "no call".
    """
    if not samples:
        return 0.0
    valid = sum(s.verdict.parse_ok and (s.verdict.n_calls > 0 or s.task_id not in expects_call) for s in samples)
    return valid / len(samples)


def per_task_success(samples: Iterable[ScoredSample]) -> dict[str, list[bool]]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for s in samples:
        by_task[s.task_id].append(s.verdict.success)
    return dict(by_task)


def success_rate_by_task(samples: Iterable[ScoredSample]) -> dict[str, float]:
    """Per task, the fraction of its samples that succeeded (what paired comparisons resample)."""
    return {task: sum(v) / len(v) for task, v in per_task_success(samples).items()}


def summarize(samples: Sequence[ScoredSample], tasks: Sequence[Task], k: int,
              wall_s: float, do_nothing: Mapping[str, float]) -> dict[str, Any]:
    """All numbers an eval reports, as one flat-ish dict (stored as JSON with the eval).

    `do_nothing` is what declining scores on each task (scoring.declining_everything, the gate's comparison);
    its mean over the answered tasks is the eval's do-nothing floor.
    """
    by_task = per_task_success(samples)
    requires_change = {t.id for t in tasks if t.expected}  # tasks that expect at least one call
    pass1 = [sum(v) / len(v) for v in by_task.values()]
    passk = [pass_at_k(len(v), sum(v), min(k, len(v))) for v in by_task.values()]
    change_tasks = [by_task[t] for t in by_task if t in requires_change]
    latencies = [s.latency_s for s in samples]
    request_tokens = [s.completion_tokens for s in samples]
    gen_tokens = sum(request_tokens)
    buckets = Counter(s.verdict.bucket for s in samples)
    metrics: dict[str, Any] = {
        "n_tasks": len(by_task),
        "n_samples": len(samples),
        "k": k,
        "valid_json_rate": _valid_format_rate(samples, requires_change),
        "correct_tool_rate": _rate(samples, "tool_ok"),
        "correct_argument_rate": _rate(samples, "arguments_ok"),
        "execution_success_rate": _rate(samples, "success"),
        "unsafe_action_rate": _rate(samples, "unsafe"),
        "pass@1": sum(pass1) / len(pass1) if pass1 else 0.0,
        f"pass@{k}": sum(passk) / len(passk) if passk else 0.0,
        "mean_reward": sum(s.reward for s in samples) / len(samples) if samples else 0.0,
        "buckets": {b: buckets.get(b, 0) for b in BUCKETS},
        "inconsistent_tasks": sum(1 for v in by_task.values() if any(v) and not all(v)),
        "n_tasks_requiring_change": len(change_tasks),
        "success_on_change_tasks": (sum(sum(v) / len(v) for v in change_tasks) / len(change_tasks)
                                    if change_tasks else 0.0),
        # WorkBench gives full marks to doing nothing on no-change tasks: that is the floor.
        "do_nothing_floor": sum(do_nothing.get(t, 0.0) for t in by_task) / len(by_task) if by_task else 0.0,
        "latency_p50_s": _percentile(latencies, 0.50),
        "latency_p95_s": _percentile(latencies, 0.95),
        # What one request generates (every turn of an episode): on the same base model, the part of latency
        # an adapter changes, and unlike wall time the same however busy the machine was (promotion.py).
        "completion_tokens_p50": _percentile(request_tokens, 0.50),
        "completion_tokens_p95": _percentile(request_tokens, 0.95),
        "total_prompt_tokens": sum(s.prompt_tokens for s in samples),
        "total_completion_tokens": gen_tokens,
        "tokens_per_s": gen_tokens / wall_s if wall_s > 0 else 0.0,
        "wall_s": wall_s,
    }
    horizons = Counter(s.horizon for s in samples if s.horizon)
    if any(s.turns > 1 or s.horizon for s in samples):
        metrics["mean_turns"] = sum(s.turns for s in samples) / len(samples)
        metrics["long_horizon"] = dict(horizons)
    templates = templates_of(tasks)
    if templates:  # the units a paired bootstrap resamples (compare.py); tasks of one template pass together
        metrics["task_templates"] = templates
    return metrics
