"""The cockpit's only door to the engine: a child process that streams typed events.

GPU work never runs in the UI process (an OOM or CUDA crash must not take the
cockpit down, and the GPU memory is freed when the child exits). An
`EngineClient` starts `python -m appliance <args>` and yields the events the
child prints on stdout (`@event {...}` lines, see appliance.events); any other
line becomes a `Log` event. `stop()` sends SIGINT first, because the engine
saves a checkpoint on SIGINT, and SIGTERM only if the child does not exit.

`FakeEngineClient` replays recorded events so tests (and demos) drive the real
app without a model. The Textual messages the app routes (`EngineEvent`,
`EngineExited`) are defined here, next to the client that produces them.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, Sequence, Union

from textual.message import Message

from appliance.events import EVENT_PREFIX, Event, Log, Progress, parse_event

# Seconds the engine gets to save a checkpoint after SIGINT before SIGTERM.
STOP_GRACE_S = 30.0
STDERR_TAIL_LINES = 20


class EngineClient(Protocol):
    """What the cockpit needs from an engine: stream a command's events, stop it, ask the doctor."""

    exit_code: int | None
    stderr_tail: list[str]

    def stream(self, args: Sequence[str]) -> AsyncIterator[Event]:
        """Run `appliance <args>`; yield its events; set `exit_code` when it ends."""

    async def stop(self) -> None:
        """Ask the running command to stop cleanly (SIGINT), then firmly (SIGTERM)."""

    async def doctor(self) -> dict[str, Any]:
        """`appliance doctor --json`: hardware, versions, backend choice with reason."""


def line_to_event(line: str, run_id: str = "") -> Event:
    """An `@event` line becomes its event; anything else is passed through as a log line."""
    if line.startswith(EVENT_PREFIX.strip()):
        event = parse_event(line)
        if event is not None:
            return event
    return Log(run_id=run_id, level="stdout", message=line.rstrip("\n"))


class SubprocessEngineClient:
    """The real engine: `sys.executable -m appliance ...` as an asyncio child process."""

    def __init__(self, python: str = sys.executable, grace_s: float = STOP_GRACE_S,
                 cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.python = python
        self.grace_s = grace_s
        self.cwd = cwd
        # Unbuffered, so events arrive as they happen rather than in 8 KiB lumps.
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.exit_code: int | None = None
        self.stderr_tail: list[str] = []
        self._process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def stream(self, args: Sequence[str]) -> AsyncIterator[Event]:
        self.exit_code = None
        tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        try:
            self._process = await asyncio.create_subprocess_exec(
                self.python, "-m", "appliance", *args, cwd=self.cwd, env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=16 * 1024 * 1024,  # one rollout event can be a long line
            )
        except OSError as error:
            self.exit_code = 127
            self.stderr_tail = [f"could not start the engine: {error}"]
            return
        process = self._process
        stderr_task = asyncio.create_task(self._drain_stderr(process, tail))
        assert process.stdout is not None
        while True:
            raw = await process.stdout.readline()
            if not raw:
                break
            yield line_to_event(raw.decode("utf-8", errors="replace"))
        await stderr_task
        self.exit_code = await process.wait()
        self.stderr_tail = list(tail)

    @staticmethod
    async def _drain_stderr(process: asyncio.subprocess.Process, tail: deque[str]) -> None:
        # Logs go to stderr; keep the last lines to explain a non-zero exit.
        assert process.stderr is not None
        while raw := await process.stderr.readline():
            tail.append(raw.decode("utf-8", errors="replace").rstrip("\n"))

    async def stop(self) -> None:
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(process.wait(), timeout=self.grace_s)
        except asyncio.TimeoutError:
            process.terminate()

    async def doctor(self) -> dict[str, Any]:
        try:
            process = await asyncio.create_subprocess_exec(
                self.python, "-m", "appliance", "doctor", "--json", cwd=self.cwd, env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await process.communicate()
        except OSError as error:
            return {"error": f"could not start the engine: {error}"}
        if process.returncode != 0:
            last = err.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
            return {"error": f"appliance doctor exited with {process.returncode}: {last[0]}"}
        try:
            return json.loads(out.decode("utf-8", errors="replace"))
        except ValueError:
            return {"error": "appliance doctor --json printed something that is not JSON."}


# A scripted step: an event, or (delay seconds, event) to pace a replay.
ScriptStep = Union[Event, tuple[float, Event]]


@dataclass
class FakeEngineClient:
    """Replays recorded events per subcommand (the first argument) instead of running a child.

    `scripts["train"]` is replayed for `stream(["train", "grpo", ...])`; `exit_codes`
    sets the exit code per subcommand (0 by default). Every call is recorded in `calls`.
    `hold_open` keeps a stream alive after its script until `stop()` is called, like a
    run still training.
    """

    scripts: dict[str, list[ScriptStep]] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    doctor_report: dict[str, Any] = field(default_factory=dict)
    hold_open: bool = False
    calls: list[list[str]] = field(default_factory=list)
    stopped: bool = False
    exit_code: int | None = None
    stderr_tail: list[str] = field(default_factory=list)

    async def stream(self, args: Sequence[str]) -> AsyncIterator[Event]:
        self.calls.append(list(args))
        self.stopped = False
        self.exit_code = None
        command = args[0] if args else ""
        for step in self.scripts.get(command, []):
            delay, event = step if isinstance(step, tuple) else (0.0, step)
            if self.stopped:
                break
            await asyncio.sleep(delay)
            yield event
        while self.hold_open and not self.stopped:
            await asyncio.sleep(0.01)
        self.exit_code = 130 if self.stopped else self.exit_codes.get(command, 0)
        if self.exit_code:
            self.stderr_tail = [f"{command} exited with {self.exit_code}"]

    async def stop(self) -> None:
        self.stopped = True

    async def doctor(self) -> dict[str, Any]:
        return dict(self.doctor_report)


# --- messages the app routes ---------------------------------------------------


class EngineEvent(Message):
    """One event from the running job, delivered to the screen that started it."""

    def __init__(self, job: str, event: Event) -> None:
        super().__init__()
        self.job = job
        self.event = event

    def can_replace(self, message: Message) -> bool:
        # Progress arrives at a high rate; a slow UI only needs the latest one.
        return (isinstance(message, EngineEvent) and message.job == self.job
                and isinstance(message.event, Progress) and isinstance(self.event, Progress)
                and message.event.stage == self.event.stage)


class EngineExited(Message):
    """The job's child process ended; `code` is its exit status (0 = success)."""

    def __init__(self, job: str, code: int, stderr_tail: list[str]) -> None:
        super().__init__()
        self.job = job
        self.code = code
        self.stderr_tail = stderr_tail
        # A screen that has shown the outcome itself (e.g. a refused promotion) sets this,
        # so the app does not also report the exit code as a failure.
        self.explained = False
