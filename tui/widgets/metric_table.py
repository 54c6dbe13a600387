"""The seed's eval metric table: one row per metric, one value column per eval (one or two)."""
from __future__ import annotations

from typing import Any, Sequence

from textual.widgets import DataTable

from tui.widgets.tables import fill_table

# (label, how to show it, the metric keys the engine may use, first found wins)
METRICS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("valid JSON rate", "pct", ("valid_json_rate", "parse_rate")),
    ("correct tool rate", "pct", ("correct_tool_rate", "tool_rate")),
    ("correct argument rate", "pct", ("correct_argument_rate", "correct_arguments_rate", "arguments_rate")),
    ("execution success rate", "pct", ("execution_success_rate", "execution_rate")),
    ("unsafe action rate", "pct", ("unsafe_action_rate", "unsafe_rate")),
    ("pass@1", "pct", ("pass@1", "pass_at_1")),
    ("pass@k", "pct", ("pass@k", "pass_at_k")),
    ("mean reward", "num", ("mean_reward", "reward_mean")),
    ("batch latency p50", "sec", ("latency_p50_s", "latency_p50")),
    ("batch latency p95", "sec", ("latency_p95_s", "latency_p95")),
    ("tokens a request p95", "num", ("completion_tokens_p95",)),
    ("tokens/s", "num", ("tokens_per_s", "tokens_per_second")),
)


def metric_value(metrics: dict[str, Any], keys: Sequence[str]) -> float | None:
    if "pass@k" in keys and "pass@k" not in metrics:
        keys = [*keys, f"pass@{metrics.get('k', '')}"]  # the engine names it after k: pass@4
    for key in keys:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def format_metric(value: float | None, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "sec":
        return f"{value:.2f} s"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


class MetricTable(DataTable):
    """Call `show(("base", metrics), ("ckpt-3", metrics))`; with two evals a Δ column is added."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)

    def show(self, *evals: tuple[str, dict[str, Any]]) -> None:
        columns = ["metric", *(name for name, _ in evals), *(["Δ"] if len(evals) == 2 else [])]
        rows = []
        for label, kind, keys in METRICS:
            values = [metric_value(metrics, keys) for _, metrics in evals]
            cells = [format_metric(v, kind) for v in values]
            if len(values) == 2:
                cells.append(_delta(values[0], values[1], kind))
            rows.append([label, *cells])
        fill_table(self, columns, rows)  # sized from the cells: no frame cut to the headers


def _delta(before: float | None, after: float | None, kind: str) -> str:
    if before is None or after is None:
        return "—"
    change = after - before
    return f"{change:+.1%}" if kind == "pct" else f"{change:+.3g}"
