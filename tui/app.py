"""The appliance cockpit: a Textual app with one mode per step of the workflow.

The App owns the shared state (workspace, pack, model, backend, the running
job) and the single engine job: one child process at a time, because there is
one GPU. Screens ask `start_job`/`stop_job`; the engine worker posts
`EngineEvent`/`EngineExited` to the screen that started the job, and those
messages bubble up here for the app-wide reactions (alarms and failures as
notifications, the job indicator). No engine logic lives in the UI: every
action is an `appliance ...` subcommand run by the `EngineClient`.

`make_app` builds the app with injectable engine and data (tests pass a
`FakeEngineClient` and a `MemoryData`); `main()` is the console entry point.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from appliance.events import Alarm, RunFailed
from tui.data import DataSource, StoreData, list_packs, read_host_stats
from tui.engine import EngineClient, EngineEvent, EngineExited, SubprocessEngineClient
from tui.screens.audit import AuditScreen
from tui.screens.checkpoints import CheckpointsScreen
from tui.screens.evaluate import EvaluateScreen
from tui.screens.flywheel import FlywheelScreen
from tui.screens.help import HelpScreen
from tui.screens.home import HomeScreen
from tui.screens.sql import SqlScreen
from tui.screens.train import TrainScreen
from tui.widgets.nav_bar import SCREENS

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_PACK = "workplace-single"


class ApplianceApp(App[None]):
    """The cockpit. Use `make_app` to build one."""

    CSS_PATH = "app.tcss"
    TITLE = "RL appliance"
    MODES = {
        "home": HomeScreen,
        "evaluate": EvaluateScreen,
        "audit": AuditScreen,
        "train": TrainScreen,
        "checkpoints": CheckpointsScreen,
        "sql": SqlScreen,
        "flywheel": FlywheelScreen,
    }
    DEFAULT_MODE = "home"
    BINDINGS = [
        *(Binding(str(i), f"switch_mode('{mode}')", title, show=False)
          for i, (mode, title) in enumerate(SCREENS, start=1)),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
    ]

    # The running engine job ("eval", "train", ...) or "" when idle; the nav bar shows it.
    job: reactive[str] = reactive("")

    def __init__(self, engine: EngineClient, data: DataSource, workspace: str, pack: str, model: str,
                 backend: str = "auto", packs: Sequence[str] = (), tasks_root: str = "tasks",
                 host_stats: Callable[[], dict[str, Any]] = read_host_stats) -> None:
        super().__init__()
        self.engine = engine
        self.data = data
        self.workspace = workspace
        self.pack = pack
        self.model = model
        self.backend = backend
        self.packs = list(packs) or ([pack] if pack else [])
        self.tasks_root = tasks_root
        self.models = [model] if model else [DEFAULT_MODEL]
        self.host_stats = host_stats
        self.doctor_report: dict[str, Any] = {}
        self._job_target: Screen | None = None
        self._stopping = False

    # --- the single engine job ---------------------------------------------------

    def start_job(self, job: str, args: Sequence[str], target: Screen) -> bool:
        """Run `appliance <args>` for `target`; refuse (with a notification) if a job is running."""
        if self.job:
            self.notify(f"A {self.job} job is running; stop it on its screen (s) before starting another.",
                        severity="warning")
            return False
        self.job = job
        self._job_target = target
        self._stopping = False
        self.run_engine(job, list(args), target)
        return True

    @work(exclusive=True, group="engine", exit_on_error=False)
    async def run_engine(self, job: str, args: list[str], target: Screen) -> None:
        tail: list[str] = []
        try:
            async for event in self.engine.stream(args):
                target.post_message(EngineEvent(job, event))
            code = self.engine.exit_code or 0
            tail = list(self.engine.stderr_tail)
        except Exception as error:  # noqa: BLE001 - an engine problem must never crash the cockpit
            code, tail = -1, [f"{type(error).__name__}: {error}"]
        target.post_message(EngineExited(job, code, tail))

    async def stop_job(self) -> None:
        """Ask the running job to stop; the engine saves a checkpoint on SIGINT."""
        if not self.job:
            self.notify("Nothing is running.")
            return
        self._stopping = True
        self.notify(f"Stopping the {self.job} job (saving a checkpoint)…")
        await self.engine.stop()

    @on(EngineEvent)
    def _engine_event(self, message: EngineEvent) -> None:
        event = message.event
        if isinstance(event, Alarm):
            self.notify(event.message, title=f"Alarm: {event.kind}", severity="error", timeout=10)
        elif isinstance(event, RunFailed):
            self.notify(event.error, title=f"{message.job} failed", severity="error", timeout=10)

    @on(EngineExited)
    def _engine_exited(self, message: EngineExited) -> None:
        self.job = ""
        self._job_target = None
        if self._stopping:
            self.notify(f"The {message.job} job stopped.")
        elif message.code != 0 and not message.explained:
            last = message.stderr_tail[-1] if message.stderr_tail else "no error output"
            self.notify(f"exit code {message.code}: {last}", title=f"{message.job} failed",
                        severity="error", timeout=10)
        self._stopping = False

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Workers run with exit_on_error=False: their errors become notifications, not crashes.
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title=f"{event.worker.name} failed",
                        severity="error", timeout=8)

    # --- doctor report (hardware, backend choice) ---------------------------------

    @work(exclusive=True, group="doctor", exit_on_error=False)
    async def load_doctor(self) -> dict[str, Any]:
        report = await self.engine.doctor()
        self.doctor_report = report
        return report

    # --- actions, palette ------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for i, (mode, title) in enumerate(SCREENS, start=1):
            yield SystemCommand(f"Go to {title}", f"Switch to the {title} screen (key {i})",
                                lambda mode=mode: self.switch_mode(mode))
        yield SystemCommand("Help", "Keys and what each screen does (key ?)", self.action_help)


def make_app(engine: EngineClient | None = None, workspace: str = "runs", pack: str | None = None,
             model: str | None = None, data: DataSource | None = None, backend: str = "auto",
             tasks_root: str = "tasks",
             host_stats: Callable[[], dict[str, Any]] | None = None) -> ApplianceApp:
    """Build the cockpit; tests inject a FakeEngineClient and a DataSource over a temporary workspace."""
    packs = list_packs(tasks_root)
    chosen_pack = pack or (DEFAULT_PACK if DEFAULT_PACK in packs else packs[0] if packs else "")
    # The child reads APPLIANCE_WORKSPACE, so every subcommand writes where the cockpit reads.
    engine = engine or SubprocessEngineClient(env={"APPLIANCE_WORKSPACE": workspace})
    return ApplianceApp(
        engine=engine, data=data or StoreData(workspace), workspace=workspace, pack=chosen_pack,
        model=model or DEFAULT_MODEL, backend=backend, packs=packs, tasks_root=tasks_root,
        host_stats=host_stats or read_host_stats,
    )


def main(argv: Sequence[str] | None = None, *, workspace: str | None = None, pack: str | None = None,
         model: str | None = None) -> int:
    """Open the cockpit: `python -m tui [--workspace W] [--pack P] [--model M]` (what `appliance ui` runs)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tui", description="The appliance's terminal cockpit.")
    parser.add_argument("workspace_pos", nargs="?", default=None, metavar="WORKSPACE")
    parser.add_argument("--workspace", default=None)
    parser.add_argument("--pack", default=None)
    parser.add_argument("--model", default=None)
    args = parser.parse_args(list(argv) if argv is not None else None)
    workspace = (workspace or args.workspace or args.workspace_pos
                 or os.environ.get("APPLIANCE_WORKSPACE", "runs"))
    make_app(workspace=workspace, pack=pack or args.pack, model=model or args.model).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
