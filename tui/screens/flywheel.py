"""Flywheel: how served and imported trajectories fail, per adapter version over time, and the lightest fix.

The rows are the engine's (appliance.flywheel.trends, read from the store's
`failure_modes_by_adapter` and `trajectory_failures` views): one per model,
adapter version and pack, oldest first, so a fix that worked shows as a
falling failure share further down. The selected row's failure modes and its
lightest fix are what `appliance trajectories triage` prints for it. The
cursor opens on the newest known adapter version, the one the CLI recommends
for. Judging is the engine's job: run `appliance trajectories triage`.
"""
from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.data import flywheel_trends, when
from tui.widgets.nav_bar import NavBar
from tui.widgets.tables import fill_table

# The first KEY_COLUMNS always show; the rest only when the terminal is wide enough.
ADAPTER_COLUMNS = ("adapter version", "failed", "top failure mode", "pack", "first seen", "model")
KEY_COLUMNS = 3
MODE_COLUMNS = ("failure mode", "n", "share", "primary")
EMPTY = ("no judged trajectories yet — `appliance trajectories import FILE` or `appliance serve`, then "
         "`appliance trajectories triage`")


def adapter_cells(adapter: Any) -> tuple:
    failed = Text(f"{adapter.failed}/{adapter.judged}", style="bold" if adapter.failed else "green")
    return (adapter.adapter_version, failed, adapter.top_mode or Text("none", style="dim"), adapter.pack,
            when(adapter.first_seen), adapter.model)


def mode_cells(adapter: Any) -> list[tuple]:
    return [(Text(mode, style="green" if mode == "success" else "dim" if mode == "unverified" else ""), n,
             f"{n / adapter.judged:.0%}" if adapter.judged else "—", adapter.primary.get(mode, ""))
            for mode, n in adapter.modes.items()]


def fix_detail(fix: Any) -> Group:
    """The lightest fix first, then what it is for and the counts it rests on."""
    adapter = fix.adapter
    source = f"{adapter.judged} triaged trajectories" + (f" + eval {fix.eval_id}" if fix.eval_id else " (no eval)")
    about = [Text.assemble(("for ", "bold"), f"{adapter.adapter_version} on {adapter.pack or 'no pack'}"),
             Text.assemble(("from ", "bold"), source)]
    if fix.fix is None:
        return Group(Text("nothing failed: no fix to make", style="green"), *about)
    lines = [Text.assemble(("fix ", "bold"), (fix.fix.kind, "bold yellow")), Text(fix.fix.reason), *about]
    for label, key in (("triage", "triage"), ("eval", "buckets")):
        counts = fix.fix.evidence.get(key) or {}
        if counts:
            lines.append(Text(f"{label}: " + ", ".join(f"{name} {n}" for name, n in counts.items()), style="dim"))
    return Group(*lines)


class FlywheelScreen(Screen):
    BINDINGS = [Binding("r", "refresh", "Refresh")]

    class Loaded(Message):
        def __init__(self, adapters: list, fixes: list, newest: int | None) -> None:
            super().__init__()
            self.adapters, self.fixes, self.newest = adapters, fixes, newest

    def __init__(self) -> None:
        super().__init__()
        self.adapters: list[Any] = []
        self.fixes: list[Any] = []

    def compose(self) -> ComposeResult:
        yield NavBar("Flywheel")
        with Vertical(id="fw-top", classes="panel") as top:
            top.border_title = "Failure modes per adapter version, oldest first"
            yield DataTable(id="fw-adapters", cursor_type="row", zebra_stripes=True)
            yield Static(EMPTY, id="fw-empty", classes="empty")
        with Horizontal(id="fw-bottom"):
            with Vertical(id="fw-modes-box", classes="panel") as modes:
                modes.border_title = "Selected · failure modes"
                yield DataTable(id="fw-modes", cursor_type="none")
            with VerticalScroll(id="fw-fix-box", classes="panel") as fix:
                fix.border_title = "Lightest fix"
                yield Static("", id="fw-fix")
        yield Footer(compact=True)

    def on_screen_resume(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="flywheel-load")
    def load(self) -> None:
        adapters, fixes, newest = flywheel_trends(self.app.data)
        self.post_message(self.Loaded(adapters, fixes, newest))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        first = not self.adapters
        self.adapters, self.fixes = message.adapters, message.fixes
        self._fill()
        self.query_one("#fw-empty").display = not self.adapters
        self.query_one("#fw-adapters").display = bool(self.adapters)
        self.query_one("#fw-bottom").display = bool(self.adapters)
        if first and message.newest is not None:
            self.query_one("#fw-adapters", DataTable).move_cursor(row=message.newest, animate=False)
        self._show_selected()

    def on_resize(self, event: events.Resize) -> None:
        self._fill()  # the width decides how many of the detail columns fit

    def _fill(self) -> None:
        table = self.query_one("#fw-adapters", DataTable)
        cursor = table.cursor_row
        fill_table(table, ADAPTER_COLUMNS, [adapter_cells(a) for a in self.adapters], required=KEY_COLUMNS)
        if table.row_count:
            table.move_cursor(row=min(max(cursor, 0), table.row_count - 1), animate=False)

    @on(DataTable.RowHighlighted, "#fw-adapters")
    def _highlighted(self) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        row = self.query_one("#fw-adapters", DataTable).cursor_row
        if not self.adapters or not 0 <= row < len(self.adapters):
            return
        fill_table(self.query_one("#fw-modes", DataTable), MODE_COLUMNS, mode_cells(self.adapters[row]))
        self.query_one("#fw-fix", Static).update(fix_detail(self.fixes[row]))
