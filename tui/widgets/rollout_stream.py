"""The latest scored rollouts, newest first: what the model is actually producing right now."""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable

from rich.text import Text
from textual.widgets import DataTable

from appliance.events import RolloutScored
from tui.widgets.tables import fill_table

MAX_ROWS = 100
COMPLETION_WIDTH = 60  # one_line's cut; no column is wider
COLUMNS = ("step", "task", "reward", "bucket", "completion")


def one_line(text: str, width: int = COMPLETION_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def rollout_from_row(run_id: str, row: dict[str, Any]) -> RolloutScored:
    """A stored rollouts row as the event the live stream would have received."""
    return RolloutScored(run_id=run_id, step=int(row.get("step") or 0), task_id=str(row.get("task_id") or ""),
                         sample_index=int(row.get("sample_index") or 0), completion=str(row.get("completion") or ""),
                         reward=float(row.get("reward") or 0.0), bucket=str(row.get("bucket") or ""),
                         reason=str(row.get("reason") or ""))


class RolloutStream(DataTable):
    """`add(event)` puts a RolloutScored on top, keeping the latest MAX_ROWS."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.rollouts: deque[RolloutScored] = deque(maxlen=MAX_ROWS)

    def on_mount(self) -> None:
        self._draw()  # the headers, before any rollout

    def add(self, event: RolloutScored) -> None:
        self.rollouts.append(event)
        self._draw()

    def replace(self, events: Iterable[RolloutScored]) -> None:
        """Show these rollouts (oldest first) instead: a stored run's, or the live run's again."""
        self.rollouts = deque(events, maxlen=MAX_ROWS)
        self._draw()

    def _draw(self) -> None:
        # Rebuilt rather than inserted: DataTable only appends, and 100 rows redraw quickly. fill_table sizes the
        # columns from the rows (no frame with cells cut to the headers). Cells are Text, not markup: a
        # completion is whatever the model wrote, brackets included.
        rows = [(Text(str(rollout.step)), Text(rollout.task_id), Text(f"{rollout.reward:.2f}"),
                 Text(rollout.bucket, style="green" if rollout.bucket == "success" else "red"),
                 Text(one_line(rollout.completion))) for rollout in reversed(self.rollouts)]
        fill_table(self, COLUMNS, rows, max_width=COMPLETION_WIDTH)
