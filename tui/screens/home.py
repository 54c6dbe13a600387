"""Home: where you are (workspace, pack, model, backend, hardware) and what happened lately."""
from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Select, Static

from appliance.packs.manifest import SPLIT_ROLES
from tui.data import pick, promoted_checkpoint, recent_evals, recent_runs, split_sizes, when
from tui.widgets.hardware_panel import HardwarePanel
from tui.widgets.nav_bar import NavBar
from tui.widgets.status import adapter_name, status_text, success_text
from tui.widgets.tables import fill_table

BACKENDS = ("auto", "hf", "vllm")
# The key columns (id, status, success) come first, so a narrow terminal cuts only the details.
RUN_COLUMNS = ("run", "status", "kind", "started")
EVAL_COLUMNS = ("eval", "status", "success", "split", "adapter")


def backend_reason(report: dict[str, Any]) -> str:
    """The doctor's backend choice and why, in one line."""
    lines = [f"{title}: {report[key]}" for title, key in (("generation", "generation_backend"),
                                                          ("training", "train_backend")) if report.get(key)]
    return "\n".join(lines) or "auto picks vLLM when a GPU and vLLM are present, else Hugging Face."


def run_cells(row: dict[str, Any]) -> tuple:
    return (pick(row, "run_id", default="?"), status_text(row.get("status")), pick(row, "kind", default=""),
            when(row.get("started_at")))


def eval_cells(row: dict[str, Any]) -> tuple:
    return (pick(row, "eval_id", default="?"), status_text(row.get("status")), success_text(row),
            pick(row, "split", default=""), adapter_name(row.get("adapter")))


class HomeScreen(Screen):
    """Pick pack, model and backend; see hardware, recent runs and evals, the promoted adapter."""

    BINDINGS = [
        Binding("e", "app.switch_mode('evaluate')", "Evaluate"),
        Binding("t", "app.switch_mode('train')", "Train"),
        Binding("r", "refresh", "Refresh"),
    ]

    class Loaded(Message):
        def __init__(self, runs: list[dict], evals: list[dict], promoted: dict | None,
                     splits: dict[str, int]) -> None:
            super().__init__()
            self.runs, self.evals, self.promoted, self.splits = runs, evals, promoted, splits

    class HostRead(Message):
        def __init__(self, stats: dict[str, Any]) -> None:
            super().__init__()
            self.stats = stats

    def compose(self) -> ComposeResult:
        app = self.app
        yield NavBar("Home")
        with Horizontal(id="home-top"):
            with Vertical(id="setup", classes="panel") as setup:
                setup.border_title = "Setup"
                yield Label(f"[b]Workspace[/] {app.workspace}", id="workspace")
                yield from self._choice("Pack", "pack", app.packs, app.pack)
                yield from self._choice("Model", "model", app.models, app.model)
                yield from self._choice("Backend", "backend", BACKENDS, app.backend)
                yield Static(backend_reason({}), id="backend-reason", classes="muted")
                yield Static("[b]Promoted[/] none (base model)", id="promoted")
                yield Static("", id="splits")
            hardware = HardwarePanel(id="hardware", classes="panel")
            hardware.border_title = "Hardware"
            yield hardware
        with Vertical(id="home-tables"):
            with Vertical(classes="panel") as runs:
                runs.border_title = "Recent runs"
                yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
                yield Static("no runs yet — press [b]t[/] to train", id="runs-empty", classes="empty")
            with Vertical(classes="panel") as evals:
                evals.border_title = "Recent evals"
                yield DataTable(id="evals", cursor_type="row", zebra_stripes=True)
                yield Static("no evals yet — press [b]e[/] to evaluate the base model", id="evals-empty",
                             classes="empty")
        yield Footer(compact=True)

    @staticmethod
    def _choice(title: str, name: str, options: Any, value: str) -> ComposeResult:
        options = list(dict.fromkeys([*options, value] if value else options))
        with Horizontal(classes="field"):
            yield Label(title, classes="field-label")
            yield Select([(o, o) for o in options], value=value if value else Select.NULL, id=name,
                         compact=True, allow_blank=not value)

    def on_mount(self) -> None:
        fill_table(self.query_one("#runs", DataTable), RUN_COLUMNS, [])
        fill_table(self.query_one("#evals", DataTable), EVAL_COLUMNS, [])
        self.query_one(HardwarePanel).show({}, {})
        self.read_host()
        self.ask_doctor()

    def on_screen_resume(self) -> None:
        # Also runs when the screen is first shown, so this is the only place that loads.
        self.action_refresh()

    def action_refresh(self) -> None:
        self.load_tables()

    @work(thread=True, exclusive=True, exit_on_error=False, group="home-data")
    def load_tables(self) -> None:
        data = self.app.data
        self.post_message(self.Loaded(recent_runs(data), recent_evals(data, 8), promoted_checkpoint(data),
                                      split_sizes(self.app.tasks_root, self.app.pack) if self.app.pack else {}))

    @work(thread=True, exclusive=True, exit_on_error=False, group="home-host")
    def read_host(self) -> None:
        self.post_message(self.HostRead(self.app.host_stats()))

    @work(exclusive=True, exit_on_error=False, group="home-doctor")
    async def ask_doctor(self) -> None:
        report = await self.app.load_doctor().wait()
        self.query_one(HardwarePanel).show(report=report)
        self.query_one("#backend-reason", Static).update(f"[dim]{backend_reason(report)}[/]")

    @on(HostRead)
    def _host_read(self, message: HostRead) -> None:
        self.query_one(HardwarePanel).show(stats=message.stats)

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        runs = self.query_one("#runs", DataTable)
        fill_table(runs, RUN_COLUMNS, [run_cells(row) for row in message.runs])
        evals = self.query_one("#evals", DataTable)
        fill_table(evals, EVAL_COLUMNS, [eval_cells(row) for row in message.evals])
        self.query_one("#runs-empty").display = not message.runs
        runs.display = bool(message.runs)
        self.query_one("#evals-empty").display = not message.evals
        evals.display = bool(message.evals)
        promoted = message.promoted
        label = pick(promoted, "id", "path", default="?") if promoted else "none (base model)"
        self.query_one("#promoted", Static).update(f"[b]Promoted[/] {label}")
        self._show_splits(message.splits)

    def _show_splits(self, sizes: dict[str, int]) -> None:
        """The pack's splits and their sizes; who uses each one in the tooltip (`appliance tasks stats`)."""
        splits = self.query_one("#splits", Static)
        splits.update("[b]Splits[/]  " + " · ".join(f"{name} {n}" for name, n in sizes.items()) if sizes else "")
        splits.tooltip = "\n".join(f"{name}: {SPLIT_ROLES.get(name, '')}" for name in sizes) or None

    @on(Select.Changed)
    def _chosen(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL and event.select.id in ("pack", "model", "backend"):
            setattr(self.app, event.select.id, str(event.value))
            if event.select.id == "pack":
                self.load_tables()  # the new pack's splits
