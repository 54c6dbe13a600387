"""Reward audit: a person judges the verifier on a fixed sample, one key per sample.

`a` agrees with the verdict, `d` disagrees, `n` attaches a note. Sampling,
recording, agreement and export are the engine's own (appliance.audit, the
same functions `appliance audit` uses); this screen only steps through the
sample. Each label is stored as it is made, so an audit can stop and resume,
and the newest label for a sample wins. The eval list shows each eval's status
and success; it opens on the newest finished eval, never on a failed one.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, Select, Static
from textual.worker import WorkerState

from appliance import audit
from tui.data import audit_labels, is_finished, newest_finished, pick, recent_evals
from tui.widgets.nav_bar import NavBar
from tui.widgets.sample_view import SampleView
from tui.widgets.status import eval_options
from tui.widgets.tables import fill_table

DEFAULT_AUDIT_SIZE = 64
AUDITOR = "tui"
AGREEMENT_COLUMNS = ("bucket", "n", "agree", "rate")


def sample_key(row: dict[str, Any]) -> tuple[str, int]:
    return str(row.get("task_id")), int(row.get("sample_index") or 0)


class AuditScreen(Screen):
    BINDINGS = [
        Binding("a", "label('agree')", "Agree"),
        Binding("d", "label('disagree')", "Disagree"),
        Binding("n", "note", "Note"),
        Binding("j,right", "move(1)", "Next", key_display="j"),
        Binding("k,left", "move(-1)", "Prev", key_display="k"),
        Binding("x", "export", "Export"),
    ]

    class EvalsLoaded(Message):
        def __init__(self, evals: list[dict]) -> None:
            super().__init__()
            self.evals = evals

    class Loaded(Message):
        def __init__(self, eval_id: str, samples: list[dict], labels: list[dict]) -> None:
            super().__init__()
            self.eval_id, self.samples, self.labels = eval_id, samples, labels

    class Agreement(Message):
        def __init__(self, eval_id: str, agreement: dict[str, Any]) -> None:
            super().__init__()
            self.eval_id, self.agreement = eval_id, agreement

    def __init__(self) -> None:
        super().__init__()
        self.eval_id = ""
        self.evals: dict[str, dict[str, Any]] = {}
        self.samples: list[dict[str, Any]] = []
        self.labels: dict[tuple[str, int], dict[str, Any]] = {}
        self.position = 0
        # Saves run in worker threads: one at a time, so each posts an agreement that counts every label stored
        # before it, in order, and a slow earlier save can never overwrite a newer agreement with an older one.
        self._save_lock = threading.Lock()

    def compose(self) -> ComposeResult:
        yield NavBar("Audit")
        with Horizontal(classes="form-row"):
            yield Label("eval")
            yield Select([], prompt="choose an eval", id="audit-eval", compact=True)
            yield Label("n")
            yield Input(str(DEFAULT_AUDIT_SIZE), id="audit-n", compact=True, type="integer")
        with Horizontal(id="audit-body"):
            with Vertical(id="audit-left"):
                yield Static("no eval chosen — run one on Evaluate (2)", id="audit-position", classes="muted")
                yield SampleView(id="audit-sample")
                yield Input(placeholder="note for this sample, then enter", id="audit-note")
            with Vertical(id="audit-right", classes="panel") as right:
                right.border_title = "Agreement"
                yield DataTable(id="agreement", cursor_type="none")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        fill_table(self.query_one("#agreement", DataTable), AGREEMENT_COLUMNS, [])
        self.query_one("#audit-note").display = False

    def on_screen_resume(self) -> None:
        self.load_evals()

    # --- loading -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="audit-evals")
    def load_evals(self) -> None:
        self.post_message(self.EvalsLoaded(recent_evals(self.app.data)))

    @on(EvalsLoaded)
    def _evals_loaded(self, message: EvalsLoaded) -> None:
        self.evals = {str(pick(r, "eval_id", default="?")): r for r in message.evals}
        select = self.query_one("#audit-eval", Select)
        current = select.value
        select.set_options(eval_options(message.evals))
        newest = newest_finished(message.evals)
        if current in self.evals:
            select.value = current
        elif newest is not None:
            select.value = str(newest["eval_id"])

    @on(Select.Changed, "#audit-eval")
    @on(Input.Submitted, "#audit-n")
    def _choose(self) -> None:
        chosen = self.query_one("#audit-eval", Select).value
        if chosen is not Select.NULL and (chosen != self.eval_id or not self.samples):
            self.load_audit(str(chosen), int(self.query_one("#audit-n", Input).value or DEFAULT_AUDIT_SIZE))

    @work(thread=True, exclusive=True, exit_on_error=False, group="audit-load")
    def load_audit(self, eval_id: str, n: int) -> None:
        data = self.app.data
        self.post_message(self.Loaded(eval_id, audit.draw_sample(data, eval_id, n=n),
                                      audit_labels(data, eval_id)))
        self.post_message(self.Agreement(eval_id, audit.agreement(data, eval_id)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.eval_id, self.samples, self.position = message.eval_id, message.samples, 0
        self.labels = {sample_key(row): row for row in message.labels}  # ordered by time: newest wins
        self._show()

    # --- labelling -------------------------------------------------------------------------

    def action_label(self, label: str) -> None:
        if not self.samples:
            self.notify("No audit sample: choose an eval first.", severity="warning")
            return
        sample = self.samples[self.position]
        note = self.labels.get(sample_key(sample), {}).get("note") or ""
        self._record(sample, label, note)
        self.action_move(1)

    def _record(self, sample: dict[str, Any], label: str, note: str) -> None:
        row = {"task_id": str(sample["task_id"]), "sample_index": int(sample["sample_index"]),
               "label": label, "note": note}
        self.labels[sample_key(sample)] = row
        self.save_label(self.eval_id, sample, row)

    @work(thread=True, exit_on_error=False, group="audit-save")
    def save_label(self, eval_id: str, sample: dict[str, Any], row: dict[str, Any]) -> None:
        data = self.app.data
        with self._save_lock:
            audit.record_labels(data, eval_id, [sample], [row], auditor=AUDITOR)
            self.post_message(self.Agreement(eval_id, audit.agreement(data, eval_id)))

    def action_move(self, step: int) -> None:
        if self.samples:
            self.position = max(0, min(len(self.samples) - 1, self.position + step))
            self._show()

    def action_note(self) -> None:
        if self.samples:
            note = self.query_one("#audit-note", Input)
            note.display = True
            note.value = self.labels.get(sample_key(self.samples[self.position]), {}).get("note") or ""
            note.focus()

    @on(Input.Submitted, "#audit-note")
    def _note_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        sample = self.samples[self.position]
        label = self.labels.get(sample_key(sample), {}).get("label")
        if label:  # already judged: store the note with the same label now
            self._record(sample, label, event.value.strip())
        else:  # not judged yet: the note waits for a or d
            self.labels[sample_key(sample)] = {"note": event.value.strip()}
        self._show()
        self.query_one("#audit-sample").focus()

    def action_export(self) -> None:
        if self.eval_id:
            self.export_disagreements(self.eval_id)

    @work(thread=True, exit_on_error=False, group="audit-export")
    def export_disagreements(self, eval_id: str) -> None:
        self._wait_for_saves()  # a label pressed just before `x` belongs in the file
        path = Path(self.app.workspace) / "audits" / f"{eval_id}-disagreements.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        count = audit.export_disagreements(self.app.data, eval_id, str(path))
        self.app.call_from_thread(self.notify, f"Wrote {count} disagreements to {path}")

    def _wait_for_saves(self, timeout_s: float = 30.0) -> None:
        """Block this worker thread until the label saves started before it have stored their rows."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(
                w.group == "audit-save" and w.state in (WorkerState.PENDING, WorkerState.RUNNING)
                for w in list(self.workers)):
            time.sleep(0.02)

    # --- drawing ----------------------------------------------------------------------------

    @on(Agreement)
    def _agreement(self, message: Agreement) -> None:
        if message.eval_id != self.eval_id:
            return
        agreement = message.agreement
        rows = [(bucket, row["n"], row["agree"], f"{row['rate']:.0%}")
                for bucket, row in agreement["by_bucket"].items()]
        if agreement["n"]:
            rows.append(("all", agreement["n"], "", f"{agreement['rate']:.0%}"))
        fill_table(self.query_one("#agreement", DataTable), AGREEMENT_COLUMNS, rows)

    def _show(self) -> None:
        position = self.query_one("#audit-position", Static)
        row = self.evals.get(self.eval_id, {})
        unfinished = "" if not row or is_finished(row) else f"[b red]{row.get('status')}[/] eval · "
        if not self.samples:
            position.update(f"{unfinished}this eval has no samples in the store")
            self.query_one(SampleView).show(None)
            return
        sample = self.samples[self.position]
        label = self.labels.get(sample_key(sample), {})
        done = sum(1 for s in self.samples if self.labels.get(sample_key(s), {}).get("label"))
        mark = {"agree": "[green]agree[/]", "disagree": "[red]disagree[/]"}.get(label.get("label"), "unlabelled")
        note = f" · note: {escape(label['note'])}" if label.get("note") else ""
        position.update(f"{unfinished}sample {self.position + 1}/{len(self.samples)} · labelled {done} · "
                        f"{mark}{note}")
        self.query_one(SampleView).show(sample)
