"""Compare two evals task by task: deltas and a paired bootstrap interval on success.

Pairing by task removes task difficulty from the noise, which matters when the
held-out split has only ~100 tasks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

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


def paired_bootstrap(a: dict[str, float], b: dict[str, float], *, iterations: int = 2000,
                     confidence: float = 0.95, seed: int = 0) -> SuccessDelta:
    """Interval on mean(b - a) over the tasks both evals share, resampling tasks."""
    shared = sorted(set(a) & set(b))
    diffs = [b[t] - a[t] for t in shared]
    if not diffs:
        return SuccessDelta(0, 0.0, 0.0, 0.0, confidence)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(iterations))
    tail = (1.0 - confidence) / 2.0
    low = means[int(tail * iterations)]
    high = means[min(iterations - 1, int((1.0 - tail) * iterations))]
    return SuccessDelta(n, sum(diffs) / n, low, high, confidence)


def metric_deltas(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(name, A, B, B - A) for each metric both evals report."""
    rows = []
    for name in COMPARED_METRICS:
        if isinstance(a.get(name), (int, float)) and isinstance(b.get(name), (int, float)):
            rows.append((name, float(a[name]), float(b[name]), float(b[name]) - float(a[name])))
    return rows
