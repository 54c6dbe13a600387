"""A horizontal bar chart of failure buckets (how many samples fell in each)."""
from __future__ import annotations

from typing import Any

from textual_plotext import PlotextPlot

from appliance.task import BUCKETS

SHORT_NAMES = {
    "format_error": "format",
    "unsafe_action": "unsafe",
    "called_when_none_expected": "call≠none",
    "missed_call": "missed",
    "wrong_tool": "tool",
    "wrong_arguments": "args",
    "execution_error": "exec",
    "success": "success",
}


class BucketChart(PlotextPlot):
    """Call `show({"format_error": 40, "success": 2, ...})`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counts: dict[str, int] = {}

    def on_mount(self) -> None:
        self._draw()

    def show(self, counts: dict[str, Any]) -> None:
        self.counts = {b: int(counts.get(b, 0) or 0) for b in BUCKETS}
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("failure buckets")
        if any(self.counts.values()):
            labels = [SHORT_NAMES[b] for b in BUCKETS]
            plt.bar(labels, [self.counts[b] for b in BUCKETS], orientation="horizontal", width=0.6)
        self.refresh()
