"""Train: start SFT or GRPO with the main knobs, watch it live, stop it cleanly, resume it.

Charts come from StepMetrics, the rollout stream from RolloutScored, the red
banner from Alarm. `s` sends SIGINT through the engine client; the engine saves
a checkpoint before it exits, and `u` resumes the last run from it.
"""
from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static

from appliance.events import (Alarm, CheckpointSaved, RolloutScored, RunFailed, RunFinished, RunStarted,
                              StepMetrics)
from tui.engine import EngineEvent, EngineExited
from tui.widgets.alarm_banner import AlarmBanner
from tui.widgets.nav_bar import NavBar
from tui.widgets.rollout_stream import RolloutStream
from tui.widgets.train_charts import TrainCharts, step_time_line

PRESETS = ("grpo", "dr_grpo", "dapo", "gspo")
# (input id, label, default, CLI flag, GRPO only)
KNOBS = (
    ("steps", "steps", "20", "--steps", False),
    ("generations", "gens", "8", "--num-generations", True),
    ("max-tokens", "max tok", "64", "--max-completion-tokens", True),
    ("lr", "LR", "2e-5", "--lr", False),
    ("lora-r", "LoRA r", "16", "--lora-r", False),
    ("eval-every", "eval every", "10", "--eval-every", False),
)


def train_args(app: Any, kind: str, preset: str, knobs: dict[str, str], resume: str) -> list[str]:
    """The `appliance train` command line; knobs left empty fall back to the engine's defaults."""
    args = ["train", kind, "--pack", app.pack, "--model", app.model]
    if kind == "grpo":
        args += ["--preset", preset]
    for knob_id, _, _, flag, grpo_only in KNOBS:
        value = knobs.get(knob_id, "").strip()
        if value and (kind == "grpo" or not grpo_only):
            args += [flag, value]
    if resume:
        args += ["--resume", resume]
    return args + ["--events"]


class TrainScreen(Screen):
    BINDINGS = [
        Binding("r", "start", "Start"),
        Binding("s", "stop", "Stop"),
        Binding("u", "resume", "Resume"),
        Binding("c", "clear_alarms", "Clear alarms"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.run_id = ""

    def compose(self) -> ComposeResult:
        yield NavBar("Train")
        yield AlarmBanner(id="alarm-banner")
        with Horizontal(id="train-body"):
            with VerticalScroll(id="train-form", classes="panel") as form:
                form.border_title = "Run"
                with Horizontal(classes="field"):
                    yield Label("kind", classes="field-label")
                    yield Select([("sft", "sft"), ("grpo", "grpo")], value="grpo", id="kind", compact=True,
                                 allow_blank=False)
                with Horizontal(classes="field"):
                    yield Label("preset", classes="field-label")
                    yield Select([(p, p) for p in PRESETS], value="grpo", id="preset", compact=True,
                                 allow_blank=False)
                for knob_id, label, default, _, _ in KNOBS:
                    with Horizontal(classes="field"):
                        yield Label(label, classes="field-label")
                        yield Input(default, id=knob_id, compact=True)
                with Horizontal(classes="field"):
                    yield Label("resume", classes="field-label")
                    yield Input("", id="resume", compact=True, placeholder="run id")
                yield Button("Start (r)", id="start", compact=True, variant="primary")
            with Vertical(id="train-main"):
                yield TrainCharts(id="charts")
                yield Static("no run yet — press r to start one", id="step-time", classes="muted")
                yield RolloutStream(id="rollouts")
        yield Footer()

    # --- actions -------------------------------------------------------------------------

    def action_start(self, resume: str | None = None) -> None:
        if not self.app.pack:
            self.notify("Pick a task pack on Home (1) first.", severity="warning")
            return
        kind = str(self.query_one("#kind", Select).value)
        preset = str(self.query_one("#preset", Select).value)
        knobs = {knob_id: self.query_one(f"#{knob_id}", Input).value for knob_id, *_ in KNOBS}
        resume = resume if resume is not None else self.query_one("#resume", Input).value.strip()
        if self.app.start_job(f"train {kind}", train_args(self.app, kind, preset, knobs, resume), self):
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
