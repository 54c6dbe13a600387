"""Train: start SFT or GRPO with the main knobs, watch it live, stop it cleanly, resume it.

Every knob shows the engine's own default and help text (`TrainConfig`), and a
knob left at its default is not passed, so the cockpit trains what a bare
`appliance train` trains. GRPO starts from the newest SFT checkpoint (else the
promoted adapter) when the store has one; an empty field is the base model.

Charts come from StepMetrics, the rollout stream from RolloutScored, the red
banner from Alarm. `s` sends SIGINT through the engine client; the engine saves
a checkpoint before it exits, and `u` resumes the last run from it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static

from appliance.events import (Alarm, CheckpointSaved, RolloutScored, RunFailed, RunFinished, RunStarted,
                              StepMetrics)
from appliance.cli import train_flag
from appliance.train.config import STAGES, TrainConfig, field_help
from appliance.train.presets import PRESETS
from tui.data import init_adapter_default
from tui.engine import EngineEvent, EngineExited
from tui.widgets.alarm_banner import AlarmBanner
from tui.widgets.nav_bar import NavBar
from tui.widgets.rollout_stream import RolloutStream
from tui.widgets.train_charts import TrainCharts, step_time_line


class Knob(NamedTuple):
    id: str  # the Input's id
    label: str
    field: str  # the TrainConfig field it sets: its default, help text and CLI flag come from there
    grpo_only: bool = False


KNOBS = (
    Knob("steps", "steps", "steps"),
    Knob("generations", "gens", "num_generations", grpo_only=True),
    Knob("max-tokens", "max tok", "max_completion_tokens", grpo_only=True),
    Knob("lr", "LR", "learning_rate"),
    Knob("lora-r", "LoRA r", "lora_r"),
    Knob("eval-every", "eval every", "eval_every"),
)
HELP = field_help()
DEFAULT_KIND = TrainConfig().stage


def shown(value: Any) -> str:
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
               init_adapter: str = "") -> list[str]:
    """The `appliance train` command line. Knobs empty or at their default are left out, so the engine's
    defaults apply; a resumed run keeps its own saved config, so it gets no starting adapter."""
    defaults = knob_defaults(kind)
    args = ["train", kind, "--pack", app.pack, "--model", app.model]
    if kind == "grpo" and preset != TrainConfig(stage=kind).preset:
        args += ["--preset", preset]
    for knob in KNOBS:
        value = knobs.get(knob.id, "").strip()
        if value and (kind == "grpo" or not knob.grpo_only) and not is_default(value, defaults[knob.id]):
            args += [train_flag(knob.field), value]
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
    ]

    class StartFound(Message):
        """Where a GRPO run would start by default, read from the store ('' = the base model)."""

        def __init__(self, adapter: str) -> None:
            super().__init__()
            self.adapter = adapter

    def __init__(self) -> None:
        super().__init__()
        self.run_id = ""
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
                                           Input(self.shown_defaults[knob.id], id=knob.id, compact=True))
                yield from self._field("init from", "init_adapter",
                                       Input("", id="init-adapter", compact=True, placeholder="base model"))
                yield from self._field("resume", "resume_from",
                                       Input("", id="resume", compact=True, placeholder="run id"))
                yield Button("Start (r)", id="start", compact=True, variant="primary")
            with Vertical(id="train-main"):
                yield TrainCharts(id="charts")
                yield Static("no run yet — press r to start one", id="step-time", classes="muted")
                yield RolloutStream(id="rollouts")
        yield Footer()

    @staticmethod
    def _field(label: str, config_field: str, widget: Input | Select) -> ComposeResult:
        """One labelled row; the label and the widget both carry the engine's help text as a tooltip."""
        widget.tooltip = HELP[config_field]
        with Horizontal(classes="field"):
            yield Label(label, classes="field-label").with_tooltip(HELP[config_field])
            yield widget

    def on_screen_resume(self) -> None:
        self.find_grpo_start()  # each visit: a run may have saved an SFT checkpoint since the last

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
            self.query_one(f"#{knob.id}", Input).disabled = knob.grpo_only and kind != "grpo"
        self.query_one("#preset", Select).disabled = kind != "grpo"

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
        if self.app.start_job(f"train {kind}", train_args(self.app, kind, preset, knobs, resume, init_adapter),
                              self):
            self.query_one(TrainCharts).reset()
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
        status = self.query_one("#step-time", Static)
        if isinstance(event, StepMetrics):
            self.query_one(TrainCharts).add(event.step, event.metrics)
            status.update(step_time_line(event.step, event.metrics))
        elif isinstance(event, RolloutScored):
            self.query_one(RolloutStream).add(event)
        elif isinstance(event, Alarm):
            self.query_one(AlarmBanner).raise_alarm(event)
        elif isinstance(event, RunStarted):
            self.run_id = event.run_id
            status.update(f"run {event.run_id} started")
        elif isinstance(event, CheckpointSaved):
            self.query_one(TrainCharts).add(event.step, event.metrics)  # held-out success arrives here
            self.notify(f"Checkpoint saved at step {event.step}: {event.path}")
        elif isinstance(event, RunFinished):
            status.update(f"run {event.run_id} finished")
        elif isinstance(event, RunFailed):
            status.update(f"[red]run failed: {event.error}[/]")

    @on(EngineExited)
    def _engine_exited(self, message: EngineExited) -> None:
        if message.code != 0:
            hint = f" — press u to resume {self.run_id}" if self.run_id else ""
            self.query_one("#step-time", Static).update(f"[red]engine exited with {message.code}[/]{hint}")
