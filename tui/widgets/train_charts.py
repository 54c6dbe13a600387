"""Training charts from StepMetrics: reward by component, held-out success, length, loss and KL.

Metric names follow the engine's StepMetrics keys; a few TRL spellings are
accepted too, so the charts read either. Held-out success is sparse (every
`--eval-every` steps), so each series keeps its own steps. `add` takes a live
run's points one by one; `load` draws a stored run's whole history at once.
"""
from __future__ import annotations

from typing import Any, Iterable

from textual.app import ComposeResult
from textual.containers import Grid
from textual_plotext import PlotextPlot

CHARTS = (
    ("reward", "train reward by component"),
    ("heldout", "held-out success · own train tasks"),
    ("length", "completion length"),
    ("loss", "loss · KL"),  # SFT has a loss and no KL; GRPO both
)
# CheckpointSaved.metrics carries the held-out eval as heldout/<metric>.
HELDOUT_KEYS = ("heldout/heldout_success", "heldout/success_rate", "heldout/execution_success_rate",
                "heldout/success")
# ... and the fit, success on the run's own first training tasks, as fit/success (TrainConfig.fit_limit).
FIT_KEYS = ("fit/success",)
LENGTH_KEYS = ("completion/mean_tokens", "completions/mean_length")
# (series, keys) of the loss chart.
LOSS_SERIES = (("loss", ("loss",)), ("kl", ("kl",)))
GENERATION_TIME_KEYS = ("time/generate_s",)
UPDATE_TIME_KEYS = ("time/update_s",)


def first(metrics: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if isinstance(metrics.get(key), (int, float)):
            return float(metrics[key])
    return None


def reward_components(metrics: dict[str, Any]) -> dict[str, float]:
    """`reward/mean` (the total) and every component's `reward/<name>/mean`."""
    series: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or not key.startswith("reward/") or key.endswith("std"):
            continue
        name = key.removeprefix("reward/").removesuffix("/mean")
        series["total" if name == "mean" else name] = float(value)
    return series


def chart_points(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The values one StepMetrics adds to each chart, by series name."""
    points: dict[str, dict[str, float]] = {"reward": reward_components(metrics), "heldout": {}, "length": {},
                                           "loss": {}}
    for chart, series, keys in (("heldout", "heldout", HELDOUT_KEYS), ("heldout", "train", FIT_KEYS),
                                ("length", "length", LENGTH_KEYS),
                                *(("loss", name, keys) for name, keys in LOSS_SERIES)):
        value = first(metrics, keys)
        if value is not None:
            points[chart][series] = value
    return points


def step_time_line(step: int, metrics: dict[str, Any]) -> str:
    generation, update = first(metrics, GENERATION_TIME_KEYS), first(metrics, UPDATE_TIME_KEYS)
    if generation is None or update is None:
        return f"step {step}"
    share = generation / (generation + update) if generation + update else 0.0
    return f"step {step}: generation {generation:.1f} s · update {update:.1f} s ({share:.0%} generating)"


class TrainCharts(Grid):
    """Four PlotextPlots; `add(step, metrics)` appends a point and redraws."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.history: dict[str, dict[str, list[tuple[int, float]]]] = {name: {} for name, _ in CHARTS}

    def compose(self) -> ComposeResult:
        for name, title in CHARTS:
            plot = PlotextPlot(id=f"chart-{name}")
            plot.plt.title(title)
            yield plot

    def add(self, step: int, metrics: dict[str, Any]) -> None:
        for chart in self._record(step, metrics):
            self._draw(chart)

    def load(self, history: Iterable[tuple[int, dict[str, Any]]]) -> None:
        """Replace every series with a whole run's (step, metrics), in order."""
        self.history = {name: {} for name, _ in CHARTS}
        for step, metrics in history:
            self._record(step, metrics)
        for name, _ in CHARTS:
            self._draw(name)

    def reset(self) -> None:
        self.load([])

    def _record(self, step: int, metrics: dict[str, Any]) -> list[str]:
        """Append one step's points; return the charts that got one."""
        touched = []
        for chart, values in chart_points(metrics).items():
            for series, value in values.items():
                self.history[chart].setdefault(series, []).append((step, value))
            if values:
                touched.append(chart)
        return touched

    def _draw(self, chart: str) -> None:
        plot = self.query_one(f"#chart-{chart}", PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(dict(CHARTS)[chart])
        for series, points in self.history[chart].items():
            steps, values = zip(*points)
            label = series if chart in ("reward", "loss", "heldout") else None
            plt.plot(list(steps), list(values), label=label, marker="braille")
        plot.refresh()
