"""Evaluate: run an eval, read its metrics, failure buckets and recommendation, browse samples, compare.

The picker chooses which stored eval the Metrics and Samples tabs show; it opens on the newest finished
one, so a failed or running eval is shown only when asked for, and then reads as failed or running."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (Button, Checkbox, DataTable, Footer, Input, Label, ProgressBar, Select, Static,
                             TabbedContent, TabPane)

from appliance.evaluate.runner import EvalSettings
from appliance.events import EvalFinished, Progress, RunFailed, RunStarted
from appliance.task import BUCKETS
from tui.data import (as_mapping, bucket_counts, eval_samples, is_finished, newest_finished, pack_splits, pick,
                      recent_evals)
from tui.engine import EngineEvent, EngineExited
from tui.widgets.bucket_chart import BucketChart
from tui.widgets.metric_table import MetricTable, format_metric, metric_value
from tui.widgets.nav_bar import NavBar
from tui.widgets.sample_view import SampleView
from tui.widgets.status import eval_options
from tui.widgets.tables import fill_table

# What `appliance eval` does when a flag is absent, and each setting's help text: the engine's, not ours.
EVAL_DEFAULTS = EvalSettings()
EVAL_HELP = {f.name: f.metadata.get("help", "") for f in fields(EvalSettings)}
# (key, tab id, title): every tab has a key, shown in the footer.
TABS = (("m", "tab-metrics", "Metrics"), ("v", "tab-samples", "Samples"), ("c", "tab-compare", "Compare"))
SAMPLE_COLUMNS = ("task", "#", "bucket", "reward")
SAMPLE_KEY_COLUMNS = 3  # the reward goes first in a narrow pane: the sample view beside it shows it too


def sample_cells(sample: dict[str, Any]) -> tuple[Any, ...]:
    """One stored eval sample as a row of the samples table (SAMPLE_COLUMNS)."""
    return (pick(sample, "task_id", default="?"), pick(sample, "sample_index", default=0), sample.get("bucket", ""),
            f"{pick(sample, 'reward', default=0.0):.2f}")


def metrics_of(row: dict[str, Any]) -> dict[str, Any]:
    """An eval row's metrics: flat columns overlaid with its metrics JSON column."""
    return {**row, **as_mapping(row.get("metrics"))}


def stored_recommendation(metrics: dict[str, Any]) -> str:
    """`action: reason`, as EvalFinished.recommendation spells it, from a stored eval's metrics."""
    stored = as_mapping(metrics.get("recommendation"))
    return f"{stored['action']}: {stored.get('reason', '')}" if stored.get("action") else ""


def recommendation_text(recommendation: str, metrics: dict[str, Any]) -> str:
    """The engine's recommendation (`action: reason`) with the numbers it rests on."""
    if not recommendation:
        return "[dim]no recommendation yet — run an eval (r)[/]"
    action, _, reason = recommendation.partition(": ")
    numbers = " · ".join(
        f"{label} {format_metric(metric_value(metrics, keys), 'pct')}"
        for label, keys in (("valid JSON", ("valid_json_rate",)), ("pass@1", ("pass@1",)),
                            ("pass@k", ("pass@k",)))
    )
    return f"[b]Recommendation:[/] [b $accent]{action.upper()}[/]  {numbers}\n{escape(reason)}"


def status_note(row: dict[str, Any]) -> str:
    """For an eval that did not finish: its status and why, in place of a recommendation; '' when finished."""
    if not row or is_finished(row):
        return ""
    status = str(row.get("status") or "unknown")
    error = as_mapping(row.get("metrics")).get("error")
    why = f": {escape(str(error))}" if error else (" — its numbers are not final" if status != "failed" else "")
    return f"[b red]{status.upper()}[/] — this eval did not finish{why}"


def default_split(splits: list[str]) -> str:
    """The engine's default split when the pack has it, else the pack's first held-out split."""
    return EVAL_DEFAULTS.split if EVAL_DEFAULTS.split in splits else splits[0]


def success_line(success: Any) -> str:
    """One line for a paired-bootstrap SuccessDelta (B minus A, paired by task)."""
    verdict = ("[green]B is better[/]" if success.significant_improvement else
               "[red]B is worse[/]" if success.significant_regression else "no significant difference")
    return (f"per-task success B−A {success.delta:+.3f} (95% interval {success.low:+.3f} … {success.high:+.3f}, "
            f"{success.sample}): {verdict}")


def eval_args(app: Any, split: str, k: str, limit: str, adapter: str,
              strict: bool = EVAL_DEFAULTS.strict) -> list[str]:
    """The `appliance eval` command line for the current choices; k and strict at their defaults are left to
    the engine."""
    args = ["eval", "--model", app.model, "--pack", app.pack, "--split", split, "--backend", app.backend]
    if k and k != str(EVAL_DEFAULTS.k):
        args += ["-k", k]
    if strict != EVAL_DEFAULTS.strict:
        args += ["--strict" if strict else "--no-strict"]
    if adapter:
        args += ["--adapter", adapter]
    if limit:
        args += ["--limit", limit]
    return args + ["--events"]


class EvaluateScreen(Screen):
    BINDINGS = [
        Binding("r", "run_eval", "Run"),
        Binding("s", "stop", "Stop"),
        Binding("e", "pick_eval", "Eval"),
        *(Binding(key, f"show_tab('{tab}')", title) for key, tab, title in TABS),
        Binding("ctrl+r", "refresh", "Refresh", show=False),
    ]

    class EvalsLoaded(Message):
        def __init__(self, evals: list[dict]) -> None:
            super().__init__()
            self.evals = evals

    class Compared(Message):
        def __init__(self, a: str, b: str, line: str) -> None:
            super().__init__()
            self.a, self.b, self.line = a, b, line

    class SamplesLoaded(Message):
        def __init__(self, eval_id: str, samples: list[dict], buckets: dict[str, int]) -> None:
            super().__init__()
            self.eval_id, self.samples, self.buckets = eval_id, samples, buckets

    def __init__(self) -> None:
        super().__init__()
        self.eval_id = ""
        self.evals: dict[str, dict[str, Any]] = {}
        self.samples: list[dict[str, Any]] = []
        self.splits: list[str] = []

    def compose(self) -> ComposeResult:
        yield NavBar("Evaluate")
        with Horizontal(id="eval-form", classes="form-row"):
            yield Label("split")
            self.splits = pack_splits(self.app.tasks_root, self.app.pack)
            yield Select([(s, s) for s in self.splits], value=default_split(self.splits), id="split", compact=True,
                         allow_blank=False, tooltip=EVAL_HELP["split"])
            yield Label("k")
            yield Input(str(EVAL_DEFAULTS.k), id="k", compact=True, type="integer", tooltip=EVAL_HELP["k"])
            yield Label("limit")
            yield Input("", id="limit", compact=True, type="integer", placeholder="all")
            yield Label("adapter")
            yield Input("", id="adapter", compact=True, placeholder="base model")
            yield Checkbox("strict", EVAL_DEFAULTS.strict, id="strict", compact=True, tooltip=EVAL_HELP["strict"])
            yield Button("Run", id="run", compact=True, variant="primary")
        with Horizontal(id="eval-pick-row", classes="form-row"):
            yield Label("eval")
            yield Select([], prompt="choose a stored eval", id="eval-pick", compact=True)
        with Horizontal(id="eval-progress-row"):
            yield ProgressBar(total=1, id="eval-progress", show_eta=False)  # a still bar until a run starts
            yield Static("idle", id="eval-status", classes="muted")
        with TabbedContent(id="eval-tabs"):
            with TabPane(TABS[0][2], id=TABS[0][1]):
                with Horizontal():
                    yield MetricTable(id="metrics")
                    yield BucketChart(id="buckets")
                yield Static(recommendation_text("", {}), id="recommendation")
            with TabPane(TABS[1][2], id=TABS[1][1]):
                with Horizontal():
                    with Vertical(id="sample-list"):
                        yield Select([(b, b) for b in BUCKETS], prompt="all buckets", id="bucket-filter",
                                     compact=True)
                        yield DataTable(id="samples", cursor_type="row", zebra_stripes=True)
                    yield SampleView(id="sample-view")
            with TabPane(TABS[2][2], id=TABS[2][1]):
                for side in ("a", "b"):
                    with Horizontal(classes="form-row"):
                        yield Label(side.upper())
                        yield Select([], prompt=f"eval {side.upper()}", id=f"compare-{side}", compact=True)
                yield Static("choose two evals", id="compare-success", classes="muted")
                yield MetricTable(id="compare")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        fill_table(self.query_one("#samples", DataTable), SAMPLE_COLUMNS, [])
        self.query_one("#metrics", MetricTable).show(("—", {}))
        self.query_one("#compare", MetricTable).show(("A", {}), ("B", {}))
        self.action_refresh()

    # --- running an eval -------------------------------------------------------------

    def action_run_eval(self) -> None:
        value = lambda selector: self.query_one(selector, Input).value.strip()  # noqa: E731
        if not self.app.pack:
            self.notify("Pick a task pack on Home (1) first.", severity="warning")
            return
        args = eval_args(self.app, str(self.query_one("#split", Select).value), value("#k"), value("#limit"),
                         value("#adapter"), self.query_one("#strict", Checkbox).value)
        if self.app.start_job("eval", args, self):
            self.query_one("#eval-progress", ProgressBar).update(total=None, progress=0)
            self.query_one("#eval-status", Static).update("starting the engine…")

    async def action_stop(self) -> None:
        await self.app.stop_job()

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#eval-tabs", TabbedContent).active = tab

    def action_pick_eval(self) -> None:
        picker = self.query_one("#eval-pick", Select)
        picker.focus()
        picker.expanded = True

    @on(Button.Pressed, "#run")
    def _run_pressed(self) -> None:
        self.action_run_eval()

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        event = message.event
        if isinstance(event, Progress):
            self.query_one("#eval-progress", ProgressBar).update(total=event.total or None, progress=event.done)
            self.query_one("#eval-status", Static).update(
                f"{event.stage} {event.done}/{event.total} {event.message}".strip())
        elif isinstance(event, RunStarted):
            self.query_one("#eval-status", Static).update(f"eval {event.run_id} started")
        elif isinstance(event, EvalFinished):
            self.show_eval(event.eval_id, event.metrics, event.recommendation)
            self.query_one("#eval-status", Static).update(f"eval {event.eval_id} finished")
            self.action_refresh()
        elif isinstance(event, RunFailed):
            self.query_one("#eval-status", Static).update(f"[red]failed: {event.error}[/]")

    @on(EngineExited)
    def _engine_exited(self, message: EngineExited) -> None:
        if message.code != 0:
            self.query_one("#eval-status", Static).update(f"[red]engine exited with {message.code}[/]")

    def show_eval(self, eval_id: str, metrics: dict[str, Any], recommendation: str, note: str = "") -> None:
        """Show one eval; `note` (its status, when it did not finish) replaces the recommendation."""
        self.eval_id = eval_id
        self.query_one("#metrics", MetricTable).show((eval_id or "eval", metrics))
        self.query_one("#recommendation", Static).update(note or recommendation_text(recommendation, metrics))
        buckets = metrics.get("buckets") or metrics.get("bucket_counts")
        self.query_one("#buckets", BucketChart).show(buckets if isinstance(buckets, dict) else {})
        if eval_id:
            self.load_samples(eval_id)

    def show_stored(self, eval_id: str) -> None:
        row = self.evals[eval_id]
        metrics = metrics_of(row)
        self.show_eval(eval_id, metrics, stored_recommendation(metrics), status_note(row))

    # --- store reads ---------------------------------------------------------------

    def on_screen_resume(self) -> None:
        self._refresh_splits()

    def _refresh_splits(self) -> None:
        # The pack may have changed on Home; its manifest names the held-out splits.
        splits = pack_splits(self.app.tasks_root, self.app.pack)
        if splits != self.splits:
            self.splits = splits
            select = self.query_one("#split", Select)
            select.set_options([(s, s) for s in splits])
            select.value = default_split(splits)

    def action_refresh(self) -> None:
        self.load_evals()

    @work(thread=True, exclusive=True, exit_on_error=False, group="eval-list")
    def load_evals(self) -> None:
        self.post_message(self.EvalsLoaded(recent_evals(self.app.data)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="eval-samples")
    def load_samples(self, eval_id: str) -> None:
        data = self.app.data
        self.post_message(self.SamplesLoaded(eval_id, eval_samples(data, eval_id), bucket_counts(data, eval_id)))

    @on(EvalsLoaded)
    def _evals_loaded(self, message: EvalsLoaded) -> None:
        self.evals = {str(pick(r, "eval_id", default="?")): r for r in message.evals}
        options = eval_options(message.evals)
        for selector in ("#compare-a", "#compare-b"):
            select = self.query_one(selector, Select)
            current = select.value
            select.set_options(options)
            if current in self.evals:
                select.value = current
        picker = self.query_one("#eval-pick", Select)
        picker.set_options(options)
        chosen = self.eval_id or str(pick(newest_finished(message.evals) or {}, "eval_id", default=""))
        if chosen in self.evals:
            picker.value = chosen  # the Changed handler shows it

    @on(Select.Changed, "#eval-pick")
    def _eval_picked(self, event: Select.Changed) -> None:
        if event.value in self.evals:
            self.show_stored(str(event.value))

    @on(SamplesLoaded)
    def _samples_loaded(self, message: SamplesLoaded) -> None:
        if message.eval_id != self.eval_id:
            return
        chart = self.query_one("#buckets", BucketChart)
        if not any(chart.counts.values()) and message.buckets:
            chart.show(message.buckets)
        self.samples = message.samples
        self._fill_samples()

    def _fill_samples(self) -> None:
        bucket = self.query_one("#bucket-filter", Select).value
        shown = [(index, sample) for index, sample in enumerate(self.samples)
                 if bucket is Select.NULL or sample.get("bucket") == bucket]
        fill_table(self.query_one("#samples", DataTable), SAMPLE_COLUMNS,
                   [sample_cells(sample) for _, sample in shown], keys=[str(index) for index, _ in shown],
                   required=SAMPLE_KEY_COLUMNS)
        if not shown:
            self.query_one(SampleView).show(None)

    @on(Select.Changed, "#bucket-filter")
    def _bucket_changed(self) -> None:
        self._fill_samples()

    @on(DataTable.RowHighlighted, "#samples")
    def _sample_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.query_one(SampleView).show(self.samples[int(event.row_key.value)])

    @on(Select.Changed, "#compare-a")
    @on(Select.Changed, "#compare-b")
    def _compare_changed(self) -> None:
        chosen = [self.query_one(s, Select).value for s in ("#compare-a", "#compare-b")]
        evals = [(str(c), metrics_of(self.evals[c])) if c in self.evals else ("—", {}) for c in chosen]
        self.query_one("#compare", MetricTable).show(*evals)
        if all(c in self.evals for c in chosen):
            self.compare_success(str(chosen[0]), str(chosen[1]))

    @work(thread=True, exclusive=True, exit_on_error=False, group="eval-compare")
    def compare_success(self, a: str, b: str) -> None:
        # The engine's own comparison (paired bootstrap over templates), the same as `appliance eval compare`.
        from appliance.evaluate.stored import compare_stored, moved_summary, moved_templates_summary

        compared = compare_stored(self.app.data, a, b, tasks_root=self.app.tasks_root)
        lines = [success_line(compared["success"]), moved_summary(compared["moved"])]
        if compared["templates"]:  # evals of tasks without templates have none to name
            lines.append(moved_templates_summary(compared["templates"]))
        self.post_message(self.Compared(a, b, "\n".join(lines)))

    @on(Compared)
    def _compared(self, message: Compared) -> None:
        self.query_one("#compare-success", Static).update(message.line)
