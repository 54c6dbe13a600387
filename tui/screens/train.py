"""Train: start SFT or GRPO with the main knobs, watch it live, stop it cleanly, resume it.

Every knob shows the engine's own default and help text (`TrainConfig`), and a
knob left at its default is not passed, so the cockpit trains what a bare
`appliance train` trains. GRPO starts from the newest SFT checkpoint (else the
promoted adapter) when the store has one; an empty field is the base model.

Charts come from StepMetrics, the rollout stream from RolloutScored, the red
banner from Alarm. `s` sends SIGINT through the engine client; the engine saves
a checkpoint before it exits, and `u` resumes the last run from it.

The run picker above the charts shows the live run (blank) or any stored SFT
or GRPO run: its curves load from the step metrics the store recorded, its
rollouts from the rollouts table. With no live run it opens on the newest one.
"""
from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Input, Label, Select, Static

from appliance.events import (Alarm, CheckpointSaved, RolloutScored, RunFailed, RunFinished, RunStarted,
                              StepMetrics)
from appliance.cli import train_flag, train_flag_stages
from appliance.train.config import STAGES, TrainConfig, field_help
from appliance.train.presets import PRESETS
from tui.data import init_adapter_default, run_history, run_rollouts, training_runs
from tui.engine import EngineEvent, EngineExited
from tui.widgets.alarm_banner import AlarmBanner
from tui.widgets.nav_bar import NavBar
from tui.widgets.rollout_stream import MAX_ROWS, RolloutStream, rollout_from_row
from tui.widgets.status import status_text
from tui.widgets.train_charts import TrainCharts, step_time_line


class Knob(NamedTuple):
    id: str  # the Input's id
    label: str
    field: str  # the TrainConfig field it sets: its default, help text and CLI flag come from there
    unset: str = ""  # what an empty field means, where the field's default is None

    @property
    def stages(self) -> tuple[str, ...]:
        """The kinds of run that take it, as the CLI's flag table says."""
        return train_flag_stages(self.field)


KNOBS = (
    Knob("steps", "steps", "steps"),
    Knob("generations", "gens", "num_generations"),
    Knob("max-tokens", "max tok", "max_completion_tokens", unset="start's"),
    Knob("lr", "LR", "learning_rate"),
    Knob("lora-r", "LoRA r", "lora_r"),
    Knob("eval-every", "eval every", "eval_every"),
    Knob("eval-limit", "eval limit", "eval_limit"),
    Knob("screen-limit", "screen lim", "screen_limit", unset="all tasks"),
    Knob("train-split", "train on", "train_split", unset="kind's own"),
    # Training on stored samples: expert iteration (SFT on verified successes) and DPO's pairs.
    Knob("successes-from", "successes", "successes_from", unset="pack answers"),
    Knob("pairs-from", "pairs from", "pairs_from", unset="all stored"),
    Knob("rpo-alpha", "RPO alpha", "rpo_alpha"),
)
HELP = field_help()
DEFAULT_KIND = TrainConfig().stage


def shown(value: Any) -> str:
    if value is None:
        return ""  # unset: the field's placeholder says what that means
    return f"{value:g}" if isinstance(value, float) else str(value)


def knob_defaults(kind: str) -> dict[str, str]:
    """Each knob's value when its flag is absent, as the form shows it (the LR is the stage's own)."""
    config = TrainConfig(stage=kind)
    values = {knob.field: getattr(config, knob.field) for knob in KNOBS}
    values["learning_rate"] = config.effective_learning_rate
    return {knob.id: shown(values[knob.field]) for knob in KNOBS}


def is_default(value: str, default: str) -> bool:
    try:
        return float(value) == float(default)
    except ValueError:
        return value == default


def train_args(app: Any, kind: str, preset: str, knobs: dict[str, str], resume: str = "",
               init_adapter: str = "", strict: bool = TrainConfig().strict) -> list[str]:
    """The `appliance train` command line. Knobs empty or at their default are left out, so the engine's
    defaults apply; a resumed run keeps its own saved config, so it gets no starting adapter."""
    defaults = knob_defaults(kind)
    args = ["train", kind, "--pack", app.pack, "--model", app.model]
    if kind in train_flag_stages("preset") and preset != TrainConfig(stage=kind).preset:
        args += ["--preset", preset]
    for knob in KNOBS:
        value = knobs.get(knob.id, "").strip()
        if value and kind in knob.stages and not is_default(value, defaults[knob.id]):
            args += [train_flag(knob.field), value]
    if strict != TrainConfig().strict:
        flag = train_flag("strict")
        args += [flag if strict else flag.replace("--", "--no-", 1)]
    if resume:
        args += ["--resume", resume]
    elif init_adapter:
        args += ["--init-adapter", init_adapter]
    return args + ["--events"]


class TrainScreen(Screen):
    BINDINGS = [
        Binding("r", "start", "Start"),
        Binding("s", "stop", "Stop"),
        Binding("u", "resume", "Resume"),
        Binding("c", "clear_alarms", "Clear alarms"),
        Binding("v", "pick_run", "View run"),
    ]

    class StartFound(Message):
        """Where a GRPO run would start by default, read from the store ('' = the base model)."""

        def __init__(self, adapter: str) -> None:
            super().__init__()
            self.adapter = adapter

    class RunsLoaded(Message):
        def __init__(self, runs: list[dict]) -> None:
            super().__init__()
            self.runs = runs

    class HistoryLoaded(Message):
        """A stored run's step metrics and latest rollouts."""

        def __init__(self, run_id: str, history: list[tuple[int, dict]], rollouts: list[RolloutScored]) -> None:
            super().__init__()
            self.run_id, self.history, self.rollouts = run_id, history, rollouts

    def __init__(self) -> None:
        super().__init__()
        self.run_id = ""
        self.runs: dict[str, dict[str, Any]] = {}
        # The live run's points and rollouts, kept while a stored run is on view.
        self.live: list[tuple[int, dict[str, Any]]] = []
        self.live_rollouts: deque[RolloutScored] = deque(maxlen=MAX_ROWS)
        self.grpo_start = ""
        # The default each field shows now: a field still holding it follows the kind; an edited one stays.
        self.shown_defaults = {**knob_defaults(DEFAULT_KIND), "init-adapter": ""}

    def compose(self) -> ComposeResult:
        preset = TrainConfig(stage=DEFAULT_KIND).preset
        yield NavBar("Train")
        yield AlarmBanner(id="alarm-banner")
        with Horizontal(id="train-body"):
            with VerticalScroll(id="train-form", classes="panel") as form:
                form.border_title = "Run"
                yield from self._field("kind", "stage", Select([(s, s) for s in STAGES], value=DEFAULT_KIND,
                                                               id="kind", compact=True, allow_blank=False))
                yield from self._field("preset", "preset", Select([(p, p) for p in PRESETS], value=preset,
                                                                  id="preset", compact=True, allow_blank=False))
                for knob in KNOBS:
                    yield from self._field(knob.label, knob.field,
                                           Input(self.shown_defaults[knob.id], id=knob.id, compact=True,
                                                 placeholder=knob.unset))
                yield from self._field("init from", "init_adapter",
                                       Input("", id="init-adapter", compact=True, placeholder="base model"))
                yield from self._field("resume", "resume_from",
                                       Input("", id="resume", compact=True, placeholder="run id"))
                yield Checkbox("strict", TrainConfig().strict, id="strict", compact=True, tooltip=HELP["strict"])
                yield Button("Start (r)", id="start", compact=True, variant="primary")
            with Vertical(id="train-main"):
                with Horizontal(id="train-run-row", classes="form-row"):
                    yield Label("run")
                    yield Select([], prompt="live run", id="train-run", compact=True)
                yield TrainCharts(id="charts")
                yield Static("no run yet — press r to start one", id="step-time", classes="muted")
                yield RolloutStream(id="rollouts")
        yield Footer(compact=True)

    @staticmethod
    def _field(label: str, config_field: str, widget: Input | Select) -> ComposeResult:
        """One labelled row; the label and the widget both carry the engine's help text as a tooltip."""
        widget.tooltip = HELP[config_field]
        with Horizontal(classes="field"):
            yield Label(label, classes="field-label").with_tooltip(HELP[config_field])
            yield widget

    def on_screen_resume(self) -> None:
        self.find_grpo_start()  # each visit: a run may have saved an SFT checkpoint since the last
        self.load_runs()

    # --- stored runs -----------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="train-runs")
    def load_runs(self) -> None:
        self.post_message(self.RunsLoaded(training_runs(self.app.data)))

    @on(RunsLoaded)
    def _runs_loaded(self, message: RunsLoaded) -> None:
        self.runs = {str(row["run_id"]): row for row in message.runs}
        picker = self.query_one("#train-run", Select)
        current = picker.value
        picker.set_options([(Text.assemble(run_id, "  ", status_text(row.get("status")),
                                           f"  {row.get('kind') or ''}"), run_id)
                            for run_id, row in self.runs.items()])
        if current in self.runs:
            picker.value = current
        elif not self.app.job and not self.live and self.runs:
            picker.value = next(iter(self.runs))  # idle: the newest stored run, not empty charts

    def action_pick_run(self) -> None:
        picker = self.query_one("#train-run", Select)
        picker.focus()
        picker.expanded = True

    def showing_live(self) -> bool:
        return self.query_one("#train-run", Select).value is Select.NULL

    @on(Select.Changed, "#train-run")
    def _run_picked(self, event: Select.Changed) -> None:
        if event.value is Select.NULL:
            self.query_one(TrainCharts).load(self.live)
            self.query_one(RolloutStream).replace(self.live_rollouts)
        elif event.value in self.runs:
            self.query_one("#step-time", Static).update(f"loading {event.value} from the store…")
            self.load_history(str(event.value))

    @work(thread=True, exclusive=True, exit_on_error=False, group="train-history")
    def load_history(self, run_id: str) -> None:
        data = self.app.data
        rollouts = [rollout_from_row(run_id, row) for row in run_rollouts(data, run_id)]
        self.post_message(self.HistoryLoaded(run_id, run_history(data, run_id), rollouts))

    @on(HistoryLoaded)
    def _history_loaded(self, message: HistoryLoaded) -> None:
        if self.query_one("#train-run", Select).value != message.run_id:
            return  # another run was chosen meanwhile
        self.query_one(TrainCharts).load(message.history)
        self.query_one(RolloutStream).replace(message.rollouts)
        row = self.runs.get(message.run_id, {})
        steps = len({step for step, _ in message.history})
        self.query_one("#step-time", Static).update(
            f"stored {row.get('kind', '')} run, {row.get('status', '?')}: "
            + (f"{steps} steps" if steps else "no step metrics stored"))

    # --- defaults --------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="train-start")
    def find_grpo_start(self) -> None:
        self.post_message(self.StartFound(init_adapter_default(self.app.data, self.app.model, self.app.pack)))

    @on(StartFound)
    def _start_found(self, message: StartFound) -> None:
        self.grpo_start = message.adapter
        self._show_defaults()

    @on(Select.Changed, "#kind")
    def _kind_changed(self) -> None:
        self._show_defaults()

    def _show_defaults(self) -> None:
        """Show the current kind's defaults in every field the person has not edited."""
        kind = str(self.query_one("#kind", Select).value)
        defaults = {**knob_defaults(kind), "init-adapter": self.grpo_start if kind == "grpo" else ""}
        for field_id, default in defaults.items():
            field = self.query_one(f"#{field_id}", Input)
            if field.value.strip() == self.shown_defaults.get(field_id, ""):
                field.value = default
            self.shown_defaults[field_id] = default
        for knob in KNOBS:
            self.query_one(f"#{knob.id}", Input).disabled = kind not in knob.stages
        self.query_one("#preset", Select).disabled = kind not in train_flag_stages("preset")

    # --- actions -------------------------------------------------------------------------

    def action_start(self, resume: str | None = None) -> None:
        if not self.app.pack:
            self.notify("Pick a task pack on Home (1) first.", severity="warning")
            return
        kind = str(self.query_one("#kind", Select).value)
        preset = str(self.query_one("#preset", Select).value)
        knobs = {knob.id: self.query_one(f"#{knob.id}", Input).value for knob in KNOBS}
        resume = resume if resume is not None else self.query_one("#resume", Input).value.strip()
        init_adapter = self.query_one("#init-adapter", Input).value.strip()
        strict = self.query_one("#strict", Checkbox).value
        if self.app.start_job(f"train {kind}",
                              train_args(self.app, kind, preset, knobs, resume, init_adapter, strict), self):
            self.live, self.live_rollouts = [], deque(maxlen=MAX_ROWS)
            self.query_one("#train-run", Select).clear()  # back to the live run (the Changed handler redraws)
            self.query_one(TrainCharts).reset()
            self.query_one(RolloutStream).replace([])
            self.query_one("#step-time", Static).update("starting the engine…")

    async def action_stop(self) -> None:
        await self.app.stop_job()

    def action_resume(self) -> None:
        if not self.run_id:
            self.notify("No run to resume yet; type a run id into 'resume' and press r.", severity="warning")
            return
        self.query_one("#resume", Input).value = self.run_id
        self.action_start(resume=self.run_id)

    def action_clear_alarms(self) -> None:
        self.query_one(AlarmBanner).clear()

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    # --- events ------------------------------------------------------------------------------

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        event = message.event
        live = self.showing_live()
        status = self.query_one("#step-time", Static)
        if isinstance(event, (StepMetrics, CheckpointSaved)):
            self.live.append((event.step, event.metrics))  # a checkpoint brings the held-out success
            if live:
                self.query_one(TrainCharts).add(event.step, event.metrics)
        if isinstance(event, StepMetrics):
            if live:
                status.update(step_time_line(event.step, event.metrics))
        elif isinstance(event, RolloutScored):
            self.live_rollouts.append(event)
            if live:
                self.query_one(RolloutStream).add(event)
        elif isinstance(event, Alarm):
            self.query_one(AlarmBanner).raise_alarm(event)
        elif isinstance(event, RunStarted):
            self.run_id = event.run_id
            status.update(f"run {event.run_id} started")
        elif isinstance(event, CheckpointSaved):
            self.notify(f"Checkpoint saved at step {event.step}: {event.path}")
        elif isinstance(event, RunFinished):
            status.update(f"run {event.run_id} finished")
        elif isinstance(event, RunFailed):
            status.update(f"[red]run failed: {event.error}[/]")

    @on(EngineExited)
    def _engine_exited(self, message: EngineExited) -> None:
        self.find_grpo_start()  # the run just ended may have saved the SFT checkpoint GRPO should start from
        if message.code != 0:
            hint = f" — press u to resume {self.run_id}" if self.run_id else ""
            self.query_one("#step-time", Static).update(f"[red]engine exited with {message.code}[/]{hint}")
