"""SQL: ask the run store anything. A query editor, built-in and saved queries, history, CSV export.

Queries run in a thread worker against the workspace (designed for concurrent
reads, so this works while a run is training). Saved queries and history are
kept in `<workspace>/queries.json`, a file a person can edit.
"""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from tui.widgets.nav_bar import NavBar
from tui.widgets.tables import fill_table

BUILT_IN_QUERIES: dict[str, str] = {
    "reward by bucket by step": (
        "SELECT step, bucket, count(*) AS n, round(avg(reward), 3) AS mean_reward\n"
        "FROM rollouts\nGROUP BY step, bucket\nORDER BY step, bucket"
    ),
    "worst tasks": (
        "SELECT task_id, count(*) AS n, round(avg(reward), 3) AS mean_reward,\n"
        "       round(avg(CASE WHEN bucket = 'success' THEN 1.0 ELSE 0.0 END), 3) AS success_rate\n"
        "FROM eval_samples\nGROUP BY task_id\nORDER BY success_rate, mean_reward\nLIMIT 20"
    ),
    "unsafe actions": (
        "SELECT run_id, step, task_id, v_unsafe_rule AS rule, v_reason AS reason, completion\n"
        "FROM rollouts\nWHERE v_unsafe OR bucket = 'unsafe_action'\nORDER BY run_id, step DESC\nLIMIT 50"
    ),
    "reward vs strict success": (
        "-- where a shaped reward pays for outputs that do not succeed\n"
        "SELECT round(reward, 1) AS reward, count(*) AS n,\n"
        "       round(avg(CASE WHEN bucket = 'success' THEN 1.0 ELSE 0.0 END), 3) AS strict_success\n"
        "FROM rollouts\nGROUP BY 1\nORDER BY 1"
    ),
    "eval summary": (
        "SELECT id, status, adapter, split, k, n_samples, round(success_rate, 3) AS success,\n"
        "       metrics->>'$.recommendation.action' AS next\nFROM evals\nORDER BY started_at DESC"
    ),
}
HISTORY_LIMIT = 50
MAX_ROWS_SHOWN = 1000
SHOW_TIME_AFTER_S = 0.5  # fast queries need no stopwatch


class SqlScreen(Screen):
    BINDINGS = [
        Binding("ctrl+r,f5", "run_query", "Run", key_display="^r"),
        Binding("ctrl+s", "save_query", "Save"),
        Binding("ctrl+o", "export_csv", "Export CSV", key_display="^o"),
    ]

    class QueryDone(Message):
        def __init__(self, sql: str, columns: list[str], rows: list[tuple], seconds: float) -> None:
            super().__init__()
            self.sql, self.columns, self.rows, self.seconds = sql, columns, rows, seconds

    class QueryFailed(Message):
        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[str, str] = {}
        self.history: list[str] = []
        self.result: tuple[list[str], list[tuple]] = ([], [])

    @property
    def queries_file(self) -> Path:
        return Path(self.app.workspace) / "queries.json"

    def compose(self) -> ComposeResult:
        yield NavBar("SQL")
        with Horizontal(id="sql-top"):
            queries = OptionList(id="queries", classes="panel")
            queries.border_title = "Queries"
            yield queries
            editor = TextArea(BUILT_IN_QUERIES["eval summary"], id="editor", classes="panel",
                              show_line_numbers=False, tab_behavior="indent")
            editor.border_title = "SQL (ctrl+r runs)"
            yield editor
        yield Input(placeholder="name for this query, then enter", id="save-name")
        yield Static("ctrl+r runs the query · the store can be read while a run trains", id="sql-status",
                     classes="muted")
        yield DataTable(id="results", zebra_stripes=True)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#save-name").display = False
        self._load_saved()
        self._fill_queries()
        self.run_sql(self.query_one("#editor", TextArea).text, remember=False)

    # --- saved queries and history ----------------------------------------------------------

    def _load_saved(self) -> None:
        try:
            stored = json.loads(self.queries_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.saved = dict(stored.get("saved", {}))
        self.history = list(stored.get("history", []))[-HISTORY_LIMIT:]

    def _store_saved(self) -> None:
        self.queries_file.parent.mkdir(parents=True, exist_ok=True)
        self.queries_file.write_text(json.dumps({"saved": self.saved, "history": self.history}, indent=1),
                                     encoding="utf-8")

    def _fill_queries(self) -> None:
        options = self.query_one("#queries", OptionList)
        options.clear_options()
        options.add_options([Option(name, id=f"builtin:{name}") for name in BUILT_IN_QUERIES])
        if self.saved:
            options.add_options([None, *(Option(f"★ {name}", id=f"saved:{name}") for name in self.saved)])
        if self.history:
            options.add_options([None, *(Option(" ".join(sql.split())[:26], id=f"history:{i}")
                                         for i, sql in reversed(list(enumerate(self.history))))])

    @on(OptionList.OptionSelected, "#queries")
    def _query_chosen(self, event: OptionList.OptionSelected) -> None:
        kind, _, name = str(event.option.id).partition(":")
        sql = {"builtin": BUILT_IN_QUERIES.get(name), "saved": self.saved.get(name),
               "history": self.history[int(name)] if kind == "history" else None}[kind]
        if sql:
            self.query_one("#editor", TextArea).text = sql
            self.action_run_query()

    def action_save_query(self) -> None:
        field = self.query_one("#save-name", Input)
        field.display = True
        field.focus()

    @on(Input.Submitted, "#save-name")
    def _save_submitted(self, event: Input.Submitted) -> None:
        event.input.display = False
        name = event.value.strip()
        if name:
            self.saved[name] = self.query_one("#editor", TextArea).text
            self._store_saved()
            self._fill_queries()
            self.notify(f"Saved query '{name}'.")
        self.query_one("#editor").focus()

    # --- running ---------------------------------------------------------------------------

    def action_run_query(self) -> None:
        sql = self.query_one("#editor", TextArea).text.strip()
        if sql:
            self.query_one("#sql-status", Static).update("running…")
            self.run_sql(sql)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sql")
    def run_sql(self, sql: str, remember: bool = True) -> None:
        started = time.perf_counter()
        try:
            columns, rows = self.app.data.query(sql)
        except Exception as error:  # noqa: BLE001 - any SQL error is the user's to read, not a crash
            self.post_message(self.QueryFailed(str(error).splitlines()[0]))
            return
        self.post_message(self.QueryDone(sql if remember else "", columns, rows, time.perf_counter() - started))

    @on(QueryDone)
    def _query_done(self, message: QueryDone) -> None:
        self.result = (message.columns, message.rows)
        table = self.query_one("#results", DataTable)
        cells = [tuple(_cell(v) for v in row) for row in message.rows[:MAX_ROWS_SHOWN]]
        fill_table(table, message.columns, cells)
        shown = "" if len(message.rows) <= MAX_ROWS_SHOWN else f" (first {MAX_ROWS_SHOWN} shown; export for all)"
        took = f" in {message.seconds:.1f} s" if message.seconds >= SHOW_TIME_AFTER_S else ""
        self.query_one("#sql-status", Static).update(f"{len(message.rows)} rows{took}{shown}")
        if message.sql and message.sql not in self.history[-1:]:
            self.history = [*self.history, message.sql][-HISTORY_LIMIT:]
            self._store_saved()
            self._fill_queries()

    @on(QueryFailed)
    def _query_failed(self, message: QueryFailed) -> None:
        self.query_one("#sql-status", Static).update(f"[red]{message.error}[/]")

    def action_export_csv(self) -> None:
        columns, rows = self.result
        if not columns:
            self.notify("Run a query first; its result is what gets exported.", severity="warning")
            return
        self.export_csv(columns, rows)

    @work(thread=True, exit_on_error=False, group="sql-export")
    def export_csv(self, columns: list[str], rows: list[tuple]) -> None:
        path = Path(self.app.workspace) / "exports" / f"query-{time.strftime('%Y%m%d-%H%M%S')}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(columns)
            writer.writerows(rows)
        self.app.call_from_thread(self.notify, f"Exported {len(rows)} rows to {path}")


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= 80 else text[:79] + "…"
