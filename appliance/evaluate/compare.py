"""Compare two evals task by task: deltas and a paired bootstrap interval on success.

Pairing by task removes task difficulty from the noise, which matters when the
held-out split has only ~100 tasks. Tasks written from one template share its
wording, so a model passes or fails them together: on workplace-single's val,
24 of 29 templates were all-or-nothing for session 19's SFT adapter, 14 of 23
on dev (docs/learning.md, session 22). Such tasks are not independent draws,
and resampling them one by one understates the noise (those intervals were 0.6
to 0.7 times as wide on these splits). Where tasks carry a `template` tag the
bootstrap resamples whole templates (a cluster bootstrap); a task without one
is its own unit.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from appliance.task import Task

CLUSTER_TAG = "template"  # tasks sharing this tag are one unit of the bootstrap

COMPARED_METRICS = ("valid_json_rate", "correct_tool_rate", "correct_argument_rate",
                    "execution_success_rate", "unsafe_action_rate", "pass@1", "mean_reward",
                    "latency_p95_s", "tokens_per_s")


@dataclass(frozen=True)
class SuccessDelta:
    n_tasks: int
    delta: float  # mean per-task success of B minus A
    low: float    # bootstrap interval bounds
    high: float
    confidence: float
    n_units: int = 0   # what was resampled: templates (and untagged tasks), or the tasks themselves
    unit: str = "task"

    @property
    def sample(self) -> str:
        """What the interval was computed over, in words: `120 tasks` or `120 tasks in 29 templates`."""
        if self.unit == "task":
            return f"{self.n_tasks} tasks"
        return f"{self.n_tasks} tasks in {self.n_units} {self.unit}s"

    @property
    def significant_improvement(self) -> bool:
        return self.low > 0.0

    @property
    def significant_regression(self) -> bool:
        return self.high < 0.0

    @property
    def verdict(self) -> str:
        if self.significant_improvement:
            return "a real improvement"
        return "a real regression" if self.significant_regression else "not distinguishable from noise"


def templates_of(tasks: Iterable[Task]) -> dict[str, str]:
    """Task id → its template, for the tasks that carry one (what an eval stores as `task_templates`)."""
    return {t.id: str(t.tags[CLUSTER_TAG]) for t in tasks if t.tags.get(CLUSTER_TAG) is not None}


def stored_templates(*metrics: Mapping[str, Any]) -> dict[str, str]:
    """The task → template map the given evals stored (empty for evals stored before they kept one)."""
    found: dict[str, str] = {}
    for m in metrics:
        found.update(m.get("task_templates") or {})
    return found


def paired_bootstrap(a: dict[str, float], b: dict[str, float], *, clusters: Mapping[str, str] | None = None,
                     iterations: int = 2000, confidence: float = 0.95, seed: int = 0) -> SuccessDelta:
    """Interval on mean(b - a) over the tasks both evals share.

    Resamples whole clusters (`clusters`: task id → template; an unlisted task is its own unit) and takes
    the mean over the tasks drawn. Without clusters every task is a unit, as before.
    """
    shared = sorted(set(a) & set(b))
    if not shared:
        return SuccessDelta(0, 0.0, 0.0, 0.0, confidence)
    clusters = clusters or {}
    units: dict[tuple[str, str], list[float]] = {}
    for task in shared:
        key = ("template", clusters[task]) if task in clusters else ("task", task)
        units.setdefault(key, []).append(b[task] - a[task])
    sums = [(sum(diffs), len(diffs)) for diffs in units.values()]
    rng = random.Random(seed)
    m = len(sums)
    means = sorted(_resampled_mean(sums, rng) for _ in range(iterations))
    tail = (1.0 - confidence) / 2.0
    low = means[int(tail * iterations)]
    high = means[min(iterations - 1, int((1.0 - tail) * iterations))]
    n = len(shared)
    unit = "template" if any(kind == "template" for kind, _ in units) else "task"
    return SuccessDelta(n, sum(total for total, _ in sums) / n, low, high, confidence, m, unit)


def _resampled_mean(sums: list[tuple[float, int]], rng: random.Random) -> float:
    """One bootstrap draw: as many units as there are, with replacement; the mean over their tasks."""
    total, count = 0.0, 0
    for _ in range(len(sums)):
        unit_total, unit_count = sums[rng.randrange(len(sums))]
        total += unit_total
        count += unit_count
    return total / count


def metric_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(name, A, B, B - A) for each metric both evals report."""
    rows = []
    for name in COMPARED_METRICS:
        if isinstance(a.get(name), (int, float)) and isinstance(b.get(name), (int, float)):
            rows.append((name, float(a[name]), float(b[name]), float(b[name]) - float(a[name])))
    return rows
