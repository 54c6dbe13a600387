"""The top line of every screen: the screens by number, the current one lit, the running job."""
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.widgets import Static

# (mode name, title in the nav bar and palette); the key is its position, 1..7. The app binds the keys from it.
SCREENS = (
    ("home", "Home"),
    ("evaluate", "Evaluate"),
    ("audit", "Audit"),
    ("train", "Train"),
    ("checkpoints", "Checkpoints"),
    ("sql", "SQL"),
    ("flywheel", "Flywheel"),
)


class NavBar(Static):
    """`1 Home  2 Evaluate …` with the current screen highlighted, and `● job` on the right.

    When the line does not fit (80 columns and a job's name), only the current screen keeps its title;
    the others show their number."""

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def on_mount(self) -> None:
        self.watch(self.app, "job", self._show, init=True)

    def on_resize(self, event: events.Resize) -> None:
        self._show(self.app.job)

    def _show(self, job: str = "") -> None:
        text = self._line(job, titles=True)
        if self.size.width and text.cell_len > self.size.width:
            text = self._line(job, titles=False)
        self.update(text)

    def _line(self, job: str, titles: bool) -> Text:
        text = Text()
        for number, (_, title) in enumerate(SCREENS, start=1):
            current = title == self.current
            text.append(f" {number} ", style="bold")
            if titles or current:
                text.append(f"{title} ", style="bold reverse" if current else "dim")
        if job:
            text.append(f"  ● {job}", style="bold green")
        return text
