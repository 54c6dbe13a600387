"""Checkpoints: every adapter with its held-out numbers next to the baseline; promote, roll back, export.

Promotion is the engine's decision (`appliance promote CKPT --events`): the
gate answers with its evidence and, when it refuses, its reasons, and this
screen shows both. Nothing here decides anything.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, RichLog, Static

from appliance.events import Log, Progress, RunFailed
from tui.data import as_mapping, checkpoints, pick, recent_evals
from tui.engine import EngineEvent, EngineExited
from tui.widgets.nav_bar import NavBar

SUCCESS_KEYS = ("heldout_success", "execution_success_rate", "success_rate")
# (label, metric key, format) of the gate's evidence, baseline → candidate.
EVIDENCE = (
    ("held-out success", "execution_success_rate", "{:.1%}"),
    ("valid JSON", "valid_json_rate", "{:.1%}"),
    ("unsafe actions", "unsafe_action_rate", "{:.1%}"),
    ("latency p95", "latency_p95_s", "{:.2f} s"),
)
LINEAGE_COLUMNS = (("run", 18), ("checkpoint", 12), ("step", 5), ("held-out", 8), ("Δ base", 6),
                   ("valid JSON", 10), ("unsafe", 6), ("status", 9))
PROMOTE_REFUSED_EXIT = 3  # `appliance promote` exits 3 when the gate says no
REFUSAL_WORDS = ("refused", "no improvement", "regresses")


def heldout_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's held-out metrics: from its save-time eval, or the gate's candidate eval."""
    metrics = as_mapping(row.get("metrics"))
    return as_mapping(metrics.get("heldout")) or as_mapping(metrics.get("candidate"))


def percent(metrics: dict[str, Any], *keys: str) -> float | None:
    value = pick(metrics, *keys)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def baseline_success(evals: list[dict[str, Any]]) -> float | None:
    """Held-out success of the newest eval of the base model (no adapter)."""
    for row in evals:
        if not row.get("adapter"):
            return percent({**as_mapping(row.get("metrics")), **row}, *SUCCESS_KEYS)
    return None


def shown(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "—"


def render_gate(promoted: bool, record: dict[str, Any], reasons: list[str]) -> Table:
    """The gate's verdict, its evidence (baseline → candidate) and one line per rule."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row("verdict", Text("promoted", style="bold green") if promoted else Text("refused", style="bold red"))
    baseline, candidate = as_mapping(record.get("baseline")), as_mapping(record.get("candidate"))
    for label, key, fmt in EVIDENCE:
        if key in baseline and key in candidate:
            table.add_row(label, f"{fmt.format(baseline[key])} → {fmt.format(candidate[key])}")
    for reason in reasons:
        refused = any(word in reason for word in REFUSAL_WORDS)
        table.add_row("✗" if refused else "✓", Text(reason, style="red" if refused else "green"))
    return table


class CheckpointsScreen(Screen):
    BINDINGS = [
        Binding("p", "promote", "Promote"),
        Binding("b", "rollback", "Roll back"),
        Binding("x", "export", "Export merged"),
        Binding("r", "refresh", "Refresh"),
    ]

    class Loaded(Message):
        def __init__(self, checkpoints: list[dict], evals: list[dict]) -> None:
            super().__init__()
            self.checkpoints, self.evals = checkpoints, evals

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.pending_export = ""
        self.asked_gate = ""  # the checkpoint whose promotion decision we are waiting for

    def compose(self) -> ComposeResult:
        yield NavBar("Checkpoints")
        with Vertical(id="ckpt-top", classes="panel") as top:
            top.border_title = "Lineage"
            yield DataTable(id="lineage", cursor_type="row", zebra_stripes=True)
            yield Static("no checkpoints yet — train one on Train (4)", id="lineage-empty", classes="empty")
        yield Input(placeholder="merged export folder, then enter", id="export-path")
        with Horizontal(id="ckpt-bottom"):
            with VerticalScroll(id="gate-box", classes="panel") as gate_box:
                gate_box.border_title = "Promotion gate"
                yield Static("select a checkpoint and press p to ask the promotion gate", id="gate")
            log = RichLog(id="ckpt-log", classes="panel", wrap=True, markup=True)
            log.border_title = "Engine"
            yield log
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#lineage", DataTable)
        # Fixed widths: the table keeps its shape as rows arrive (and at 80 columns it scrolls sideways).
        for label, width in LINEAGE_COLUMNS:
            table.add_column(label, width=width)
        self.query_one("#export-path").display = False

    def on_screen_resume(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="ckpt-load")
    def load(self) -> None:
        data = self.app.data
        self.post_message(self.Loaded(checkpoints(data), recent_evals(data, 50)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.rows = sorted(message.checkpoints, key=lambda r: (str(r.get("run_id")), r.get("step") or 0))
        baseline = baseline_success(message.evals)
        table = self.query_one("#lineage", DataTable)
        table.clear()
        table.add_row("base", "(base model)", "", shown(baseline), "", "", "", "")
        previous_run = None
        for row in self.rows:
            run = str(row.get("run_id", ""))
            metrics = heldout_metrics(row)
            success = percent(metrics, *SUCCESS_KEYS)
            delta = f"{success - baseline:+.0%}" if success is not None and baseline is not None else "—"
            table.add_row(run if run != previous_run else "  └", str(row.get("id", "?")).split("/")[-1],
                          row.get("step", ""), shown(success), delta, shown(percent(metrics, "valid_json_rate")),
                          shown(percent(metrics, "unsafe_action_rate")),
                          "★" if row.get("promoted") else row.get("status") or "")
            previous_run = run
        self.query_one("#lineage-empty").display = not self.rows
        if self.asked_gate:
            self._show_decision(self.asked_gate)

    def _show_decision(self, ref: str) -> None:
        """The gate's stored decision for `ref` (the promote command records it in checkpoints)."""
        row = next((r for r in self.rows if ref in (r.get("path"), r.get("id"))), None)
        if row is None or row.get("status") not in ("promoted", "refused"):
            return
        self.asked_gate = ""
        record = as_mapping(row.get("metrics"))
        reasons = list(record.get("reasons") or str(row.get("note") or "").split("; "))
        self.query_one("#gate", Static).update(render_gate(bool(row.get("promoted")), record, reasons))

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#lineage", DataTable)
        index = table.cursor_row - 1  # row 0 is the baseline
        return self.rows[index] if 0 <= index < len(self.rows) else None

    # --- engine actions -------------------------------------------------------------

    def _checkpoint_ref(self) -> str | None:
        row = self.selected()
        if row is None:
            self.notify("Select a checkpoint row first (not the baseline).", severity="warning")
            return None
        return str(pick(row, "path", "id"))

    def action_promote(self) -> None:
        ref = self._checkpoint_ref()
        if ref and self.app.start_job("promote", ["promote", ref, "--events"], self):
            self.asked_gate = ref
            self.query_one("#gate", Static).update(f"asking the gate about {ref} (two held-out evals)…")

    def action_rollback(self) -> None:
        self.app.start_job("rollback", ["rollback"], self)

    def action_export(self) -> None:
        ref = self._checkpoint_ref()
        if ref:
            self.pending_export = ref
            field = self.query_one("#export-path", Input)
            field.value = str(Path(self.app.workspace) / "exports" / f"{Path(ref).name}-merged")
            field.display = True
            field.focus()

    @on(Input.Submitted, "#export-path")
    def _export_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        if event.value.strip() and self.pending_export:
            self.app.start_job("export", ["export", self.pending_export, "--merged", event.value.strip()], self)
        self.query_one("#lineage").focus()

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        event, log = message.event, self.query_one("#ckpt-log", RichLog)
        if isinstance(event, Log):
            log.write(Text(event.message))
        elif isinstance(event, Progress):
            log.write(Text(f"{event.stage} {event.done}/{event.total}", style="dim"))
        elif isinstance(event, RunFailed):
            log.write(Text(event.error, style="red"))

    @on(EngineExited)
    def _engine_exited(self, message: EngineExited) -> None:
        log = self.query_one("#ckpt-log", RichLog)
        if message.job == "promote" and message.code == PROMOTE_REFUSED_EXIT:
            message.explained = True  # a refusal is an answer, not a failure; the gate panel shows why
            log.write(Text("promote: refused by the gate", style="red"))
        else:
            log.write(Text(f"{message.job}: " + ("done" if message.code == 0 else f"exit code {message.code}"),
                           style="" if message.code == 0 else "red"))
        self.action_refresh()
