"""The top line of every screen: the screens by number, the current one lit, the running job."""
from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

SCREEN_TITLES = ("Home", "Evaluate", "Audit", "Train", "Checkpoints", "SQL")


class NavBar(Static):
    """`1 Home  2 Evaluate …` with the current screen highlighted, and `● job` on the right."""

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def on_mount(self) -> None:
        self.watch(self.app, "job", self._show, init=True)

    def _show(self, job: str = "") -> None:
        text = Text()
        for number, title in enumerate(SCREEN_TITLES, start=1):
            style = "bold reverse" if title == self.current else "dim"
            text.append(f" {number} ", style="bold")
            text.append(f"{title} ", style=style)
        if job:
            text.append(f"  ● {job}", style="bold green")
        self.update(text)
