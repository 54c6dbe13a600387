"""Checkpoints: every adapter with its held-out numbers next to the baseline; promote, roll back, export.

Promotion is the engine's decision (`appliance promote CKPT --events`): the
gate answers with its evidence and, when it refuses, its reasons, and this
screen shows both, for whichever row is selected, from what the store (and
the registry's PROMOTED.json) kept. Nothing here decides anything. The base
row is the newest finished base-model eval on the checkpoints' held-out split.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, RichLog, Static

from appliance.events import Log, Progress, RunFailed
from tui.data import HELDOUT_SPLIT, as_mapping, baseline_evals, checkpoints, gate_record, pick, when
from tui.engine import EngineEvent, EngineExited
from tui.widgets.nav_bar import NavBar
from tui.widgets.status import status_text
from tui.widgets.tables import fill_table

SUCCESS_KEYS = ("heldout_success", "execution_success_rate", "success_rate")
# (label, metric key, format) of the gate's evidence, baseline → candidate.
EVIDENCE = (
    ("held-out success", "execution_success_rate", "{:.1%}"),
    ("valid JSON", "valid_json_rate", "{:.1%}"),
    ("unsafe actions", "unsafe_action_rate", "{:.1%}"),
    ("latency p95", "latency_p95_s", "{:.2f} s"),
    ("tokens a request p95", "completion_tokens_p95", "{:.0f}"),
)
# The first KEY_COLUMNS always show; the rest only when the terminal is wide enough.
LINEAGE_COLUMNS = ("run", "step", "held-out", "Δ base", "status", "JSON", "unsafe")
KEY_COLUMNS = 5
BASE_KEY = "base:"  # row key prefix of a baseline row, followed by its split
PROMOTE_REFUSED_EXIT = 3  # `appliance promote` exits 3 when the gate says no
REFUSAL_WORDS = ("refused", "no improvement", "regresses")
# What the gate's stored decision means now, by the checkpoint's status.
VERDICTS = {"promoted": ("promoted", "bold green"), "refused": ("refused", "bold red"),
            "superseded": ("promoted, since superseded", "green"),
            "rolled_back": ("promoted, then rolled back", "yellow")}


def heldout_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's held-out metrics: from its save-time eval, or the gate's candidate eval."""
    metrics = as_mapping(row.get("metrics"))
    return as_mapping(metrics.get("heldout")) or as_mapping(metrics.get("candidate"))


def percent(metrics: dict[str, Any], *keys: str) -> float | None:
    value = pick(metrics, *keys)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def baseline_success(baseline: dict[str, Any] | None) -> float | None:
    """Held-out success of a stored base-model eval (a finished one: see baseline_evals)."""
    return percent({**baseline.get("metrics", {}), **baseline}, *SUCCESS_KEYS) if baseline else None


def shown(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "—"


def checkpoint_cells(row: dict[str, Any], baseline: float | None, first_of_run: bool) -> tuple:
    """One lineage row: the full run id (on a run's first checkpoint), step, numbers, status."""
    metrics = heldout_metrics(row)
    success = percent(metrics, *SUCCESS_KEYS)
    delta = f"{success - baseline:+.0%}" if success is not None and baseline is not None else "—"
    status = Text("★ promoted", style="bold green") if row.get("promoted") else status_text(row.get("status"))
    return (str(row.get("run_id", "")) if first_of_run else "  └", row.get("step", ""), shown(success), delta,
            status, shown(percent(metrics, "valid_json_rate")), shown(percent(metrics, "unsafe_action_rate")))


def base_cells(split: str, baseline: dict[str, Any] | None) -> tuple:
    status = Text("baseline", style="dim") if baseline else Text("no eval", style="dim")
    metrics = baseline.get("metrics", {}) if baseline else {}
    return (f"base model · {split}", "", shown(baseline_success(baseline)), "", status,
            shown(percent(metrics, "valid_json_rate")), shown(percent(metrics, "unsafe_action_rate")))


def render_gate(verdict: tuple[str, str], record: dict[str, Any], reasons: list[str]) -> Table:
    """The gate's verdict, its evidence (baseline → candidate) and one line per rule."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    table.add_row("verdict", Text(*verdict))
    baseline, candidate = as_mapping(record.get("baseline")), as_mapping(record.get("candidate"))
    for label, key, fmt in EVIDENCE:
        if key in baseline and key in candidate:
            table.add_row(label, f"{fmt.format(baseline[key])} → {fmt.format(candidate[key])}")
    for reason in reasons:
        refused = any(word in reason for word in REFUSAL_WORDS)
        table.add_row("✗" if refused else "✓", Text(reason, style="red" if refused else "green"))
    return table


def checkpoint_detail(row: dict[str, Any]) -> Group:
    """The selected checkpoint in full: id and path (whole, to copy), its held-out eval, the gate's record."""
    heldout = heldout_metrics(row)
    lines = [Text.assemble(("checkpoint ", "bold"), str(row.get("id", "?"))),
             Text.assemble(("path ", "bold"), str(row.get("path") or "—")),
             Text.assemble(("held-out ", "bold"), f"{shown(percent(heldout, *SUCCESS_KEYS))} on "
                           f"{row.get('heldout_split')}", f" (eval {heldout['eval_id']})" if heldout.get("eval_id")
                           else "")]
    record = gate_record(row)
    if not record:
        lines.append(Text("the gate has not been asked — press p", style="dim"))
        return Group(*lines)
    verdict = VERDICTS.get(str(row.get("status")), ("promoted", "bold green") if row.get("promoted")
                           else (str(row.get("status") or "?"), ""))
    return Group(*lines, render_gate(verdict, record, list(record.get("reasons") or [])))


def baseline_detail(split: str, baseline: dict[str, Any] | None) -> Text:
    if baseline is None:
        return Text(f"no finished base-model eval on {split} yet — run one on Evaluate (2) to fill this row",
                    style="dim")
    return Text.assemble(("baseline ", "bold"), f"eval {baseline.get('eval_id')} of the base model "
                         f"{baseline.get('model')} on {baseline.get('pack')}/{split}, k={baseline.get('k')}, "
                         f"{when(baseline.get('started_at'))}: held-out success {shown(baseline_success(baseline))}")


class CheckpointsScreen(Screen):
    BINDINGS = [
        Binding("p", "promote", "Promote"),
        Binding("b", "rollback", "Roll back"),
        Binding("x", "export", "Export"),
        Binding("y", "copy_id", "Copy path"),
        Binding("r", "refresh", "Refresh"),
    ]

    class Loaded(Message):
        def __init__(self, checkpoints: list[dict], baselines: dict[str, dict]) -> None:
            super().__init__()
            self.checkpoints, self.baselines = checkpoints, baselines

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.baselines: dict[str, dict[str, Any]] = {}
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
                gate_box.border_title = "Selected · promotion gate"
                yield Static("select a checkpoint and press p to ask the promotion gate", id="gate")
            log = RichLog(id="ckpt-log", classes="panel", wrap=True, markup=True)
            log.border_title = "Engine"
            yield log
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#export-path").display = False

    def on_screen_resume(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="ckpt-load")
    def load(self) -> None:
        data = self.app.data
        self.post_message(self.Loaded(checkpoints(data), baseline_evals(data, self.app.model, self.app.pack)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.rows = sorted(message.checkpoints, key=lambda r: (str(r.get("run_id")), r.get("step") or 0))
        self.baselines = message.baselines
        self._fill()
        self.query_one("#lineage-empty").display = not self.rows
        if self.asked_gate:
            self._answer(self.asked_gate)
        else:
            self._show_selected()

    def on_resize(self, event: events.Resize) -> None:
        self._fill()  # the width decides how many of the detail columns fit

    def splits(self) -> list[str]:
        """The held-out splits the checkpoints were measured on (the default one when there are none)."""
        return list(dict.fromkeys(str(r["heldout_split"]) for r in self.rows)) or [HELDOUT_SPLIT]

    def _fill(self) -> None:
        table = self.query_one("#lineage", DataTable)
        cursor = table.cursor_row
        cells = [base_cells(split, self.baselines.get(split)) for split in self.splits()]
        keys = [BASE_KEY + split for split in self.splits()]
        for index, row in enumerate(self.rows):
            first = index == 0 or self.rows[index - 1].get("run_id") != row.get("run_id")
            cells.append(checkpoint_cells(row, baseline_success(self.baselines.get(str(row["heldout_split"]))),
                                          first))
            keys.append(str(index))
        fill_table(table, LINEAGE_COLUMNS, cells, keys=keys, required=KEY_COLUMNS)
        table.move_cursor(row=min(cursor, table.row_count - 1), animate=False)

    def _answer(self, ref: str) -> None:
        """The gate's stored decision for `ref` (the promote command records it in checkpoints)."""
        index = next((i for i, r in enumerate(self.rows) if ref in (r.get("path"), r.get("id"))), None)
        if index is None or self.rows[index].get("status") not in ("promoted", "refused"):
            return
        self.asked_gate = ""
        table = self.query_one("#lineage", DataTable)
        table.move_cursor(row=table.get_row_index(str(index)), animate=False)
        self._show_selected()

    @on(DataTable.RowHighlighted, "#lineage")
    def _highlighted(self) -> None:
        if not self.asked_gate:
            self._show_selected()

    def _show_selected(self) -> None:
        gate = self.query_one("#gate", Static)
        row = self.selected()
        if row is not None:
            gate.update(checkpoint_detail(row))
            return
        key = self._cursor_key()
        if key.startswith(BASE_KEY):
            split = key.removeprefix(BASE_KEY)
            gate.update(baseline_detail(split, self.baselines.get(split)))

    def _cursor_key(self) -> str:
        table = self.query_one("#lineage", DataTable)
        if not table.row_count:
            return ""
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def selected(self) -> dict[str, Any] | None:
        key = self._cursor_key()
        return self.rows[int(key)] if key.isdigit() and int(key) < len(self.rows) else None

    def action_copy_id(self) -> None:
        row = self.selected()
        if row is not None:
            ref = str(pick(row, "path", "id"))
            self.app.copy_to_clipboard(ref)
            self.notify(f"Copied {ref}")

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
