"""Reward audit: a person judges the verifier on a fixed sample, one key per sample.

`a` agrees with the verdict, `d` disagrees, `n` adds a note. Each label is
written to the store's `audits` table as it is made, so an audit can stop and
resume. The agreement rate per bucket shows where the reward is wrong; `x`
exports the disagreements as JSONL to fix the verifier from.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, Select, Static

from tui.data import audit_labels, eval_samples, pick, recent_evals
from tui.widgets.nav_bar import NavBar
from tui.widgets.sample_view import SampleView

DEFAULT_AUDIT_SIZE = 64


def audit_sample(samples: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """A fixed pseudo-random subset: the same eval always gives the same audit sample."""
    def key(sample: dict[str, Any]) -> str:
        ident = f"{sample.get('task_id')}:{sample.get('sample_index')}"
        return hashlib.sha1(ident.encode()).hexdigest()

    return sorted(samples, key=key)[:n]


def sample_key(sample: dict[str, Any]) -> tuple[str, int]:
    return str(sample.get("task_id")), int(sample.get("sample_index") or 0)


def agreement_by_bucket(samples: list[dict[str, Any]], labels: dict[tuple[str, int], dict]) -> list[tuple]:
    """(bucket, labelled, agreed, rate) per bucket, and a total row last."""
    per_bucket: dict[str, list[int]] = {}
    for sample in samples:
        label = labels.get(sample_key(sample), {}).get("label")
        if label not in ("agree", "disagree"):
            continue
        counts = per_bucket.setdefault(str(sample.get("bucket")), [0, 0])
        counts[0] += 1
        counts[1] += label == "agree"
    rows = [(b, n, a, a / n) for b, (n, a) in sorted(per_bucket.items())]
    total_n, total_a = sum(r[1] for r in rows), sum(r[2] for r in rows)
    rows.append(("all", total_n, total_a, total_a / total_n if total_n else 0.0))
    return rows


class AuditScreen(Screen):
    BINDINGS = [
        Binding("a", "label('agree')", "Agree"),
        Binding("d", "label('disagree')", "Disagree"),
        Binding("n", "note", "Note"),
        Binding("j,right", "move(1)", "Next", key_display="j"),
        Binding("k,left", "move(-1)", "Prev", key_display="k"),
        Binding("x", "export", "Export"),
    ]

    class Loaded(Message):
        def __init__(self, eval_id: str, samples: list[dict], labels: list[dict]) -> None:
            super().__init__()
            self.eval_id, self.samples, self.labels = eval_id, samples, labels

    class EvalsLoaded(Message):
        def __init__(self, eval_ids: list[str]) -> None:
            super().__init__()
            self.eval_ids = eval_ids

    def __init__(self) -> None:
        super().__init__()
        self.eval_id = ""
        self.samples: list[dict[str, Any]] = []
        self.labels: dict[tuple[str, int], dict[str, Any]] = {}
        self.position = 0

    def compose(self) -> ComposeResult:
        yield NavBar("Audit")
        with Horizontal(classes="form-row"):
            yield Label("eval")
            yield Select([], prompt="choose an eval", id="audit-eval", compact=True)
            yield Label("n")
            yield Input(str(DEFAULT_AUDIT_SIZE), id="audit-n", compact=True, type="integer")
        with Horizontal(id="audit-body"):
            with Vertical(id="audit-left"):
                yield Static("", id="audit-position", classes="muted")
                yield SampleView(id="audit-sample")
                yield Input(placeholder="note, then enter", id="audit-note")
            with Vertical(id="audit-right", classes="panel") as right:
                right.border_title = "Agreement"
                yield DataTable(id="agreement", cursor_type="none")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#agreement", DataTable).add_columns("bucket", "n", "agree", "rate")
        self.query_one("#audit-note").display = False
        self.query_one("#audit-position", Static).update("no eval chosen — run one on Evaluate (2)")
        self.load_evals()

    def on_screen_resume(self) -> None:
        self.load_evals()

    @work(thread=True, exclusive=True, exit_on_error=False, group="audit-evals")
    def load_evals(self) -> None:
        evals = recent_evals(self.app.data)
        self.post_message(self.EvalsLoaded([str(pick(r, "eval_id", default="?")) for r in evals]))

    @on(EvalsLoaded)
    def _evals_loaded(self, message: EvalsLoaded) -> None:
        select = self.query_one("#audit-eval", Select)
        current = select.value
        select.set_options([(e, e) for e in message.eval_ids])
        if current in message.eval_ids:
            select.value = current
        elif message.eval_ids and not self.eval_id:
            select.value = message.eval_ids[0]

    @on(Select.Changed, "#audit-eval")
    @on(Input.Submitted, "#audit-n")
    def _choose(self) -> None:
        chosen = self.query_one("#audit-eval", Select).value
        if chosen is not Select.NULL:
            size = self.query_one("#audit-n", Input).value or str(DEFAULT_AUDIT_SIZE)
            self.load_audit(str(chosen), int(size))

    @work(thread=True, exclusive=True, exit_on_error=False, group="audit-load")
    def load_audit(self, eval_id: str, n: int) -> None:
        data = self.app.data
        self.post_message(self.Loaded(eval_id, audit_sample(eval_samples(data, eval_id), n),
                                      audit_labels(data, eval_id)))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self.eval_id, self.samples, self.position = message.eval_id, message.samples, 0
        # Later labels win: an audit can be redone without deleting rows.
        self.labels = {sample_key(row): row for row in message.labels}
        self._show()

    # --- labelling ---------------------------------------------------------------------

    def action_label(self, label: str, note: str = "") -> None:
        if not self.samples:
            self.notify("No audit sample: choose an eval first.", severity="warning")
            return
        sample = self.samples[self.position]
        previous = self.labels.get(sample_key(sample), {})
        row = {
            "eval_id": self.eval_id,
            "task_id": str(sample.get("task_id")),
            "sample_index": int(sample.get("sample_index") or 0),
            "bucket": str(sample.get("bucket")),
            "reward": float(sample.get("reward") or 0.0),
            "label": label if label != "note" else previous.get("label", "note"),
            "note": note or previous.get("note", ""),
            "labelled_at": time.time(),
        }
        self.labels[sample_key(sample)] = row
        self.save_label(row)
        if label != "note":
            self.action_move(1)
        else:
            self._show()

    @work(thread=True, exit_on_error=False, group="audit-save")
    def save_label(self, row: dict[str, Any]) -> None:
        self.app.data.append("audits", [row])

    def action_move(self, step: int) -> None:
        if self.samples:
            self.position = max(0, min(len(self.samples) - 1, self.position + step))
            self._show()

    def action_note(self) -> None:
        if self.samples:
            note = self.query_one("#audit-note", Input)
            note.display = True
            note.value = ""
            note.focus()

    @on(Input.Submitted, "#audit-note")
    def _note_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        if event.value.strip():
            self.action_label("note", event.value.strip())
        self.query_one("#audit-sample").focus()

    def action_export(self) -> None:
        rows = [{**s, **self.labels[sample_key(s)]} for s in self.samples
                if self.labels.get(sample_key(s), {}).get("label") == "disagree"]
        if not rows:
            self.notify("No disagreements to export yet.")
            return
        self.export_disagreements(self.eval_id, rows)

    @work(thread=True, exit_on_error=False, group="audit-export")
    def export_disagreements(self, eval_id: str, rows: list[dict[str, Any]]) -> None:
        path = Path(self.app.workspace) / "audits" / f"{eval_id}-disagreements.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        self.app.call_from_thread(self.notify, f"Wrote {len(rows)} disagreements to {path}")

    # --- drawing ----------------------------------------------------------------------

    def _show(self) -> None:
        position = self.query_one("#audit-position", Static)
        if not self.samples:
            position.update("this eval has no samples in the store")
            self.query_one(SampleView).show(None)
        else:
            sample = self.samples[self.position]
            label = self.labels.get(sample_key(sample), {})
            done = sum(1 for s in self.samples if sample_key(s) in self.labels)
            mark = {"agree": "[green]agree[/]", "disagree": "[red]disagree[/]"}.get(label.get("label"), "unlabelled")
            note = f" · note: {label['note']}" if label.get("note") else ""
            position.update(f"sample {self.position + 1}/{len(self.samples)} · labelled {done} · {mark}{note}")
            self.query_one(SampleView).show(sample)
        table = self.query_one("#agreement", DataTable)
        table.clear()
        for bucket, n, agreed, rate in agreement_by_bucket(self.samples, self.labels):
            table.add_row(bucket, n, agreed, f"{rate:.0%}" if n else "—")
