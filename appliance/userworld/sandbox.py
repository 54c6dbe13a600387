"""Run a pack's Python functions in a child process with a wall-time and a memory limit, no network.

    sandbox = FunctionSandbox(Path("tasks/tracker/tracker.py"), ["create_issue", ...], state_factory="make_state")
    episode = sandbox.run([ToolCall("create_issue", {"title": "Login fails"})])
    episode.state      # canonical JSON of make_state()'s object after the call
    sandbox.close()

One worker process (appliance.userworld.worker) serves many episodes, each on a
fresh state from the state factory; it is replaced after a hang, a crash, or
`MAX_EPISODES_PER_WORKER` episodes (so module-level globals cannot drift for
long; keep state in the factory's object). `run` never raises: every failure
comes back as an Episode whose `error` says what happened in one line.
"""
from __future__ import annotations

import json
import logging
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Sequence

import appliance
from appliance.task import ToolCall
from appliance.userworld.episode import CallResult, Episode, failed

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 30.0  # importing the user's module (and its imports) may take a while once
MAX_EPISODES_PER_WORKER = 1000
MAX_REPLY_BYTES = 16 * 1024 * 1024
STDERR_TAIL_CHARS = 300


class FunctionSandbox:
    """A pack's functions behind a child process; thread-safe, one episode at a time."""

    def __init__(self, module: Path, tools: Sequence[str], *, state_factory: str | None = None,
                 timeout_s: float = 5.0, memory_mb: int = 1024) -> None:
        self.module = Path(module).resolve()
        self.tools = tuple(tools)
        self.state_factory = state_factory
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._start_error = ""
        self._finalizer = weakref.finalize(self, _stop_holder, self.__dict__)

    def run(self, calls: Sequence[ToolCall], fixture: dict[str, Any] | None = None) -> Episode:
        """Run `calls` on a fresh state (after the fixture's setup calls). Never raises."""
        request = {"setup": _setup_calls(fixture), "calls": [_wire(c) for c in calls]}
        with self._lock:
            try:
                return self._run(request, calls)
            except Exception as err:  # noqa: BLE001 - a sandbox bug must not take a training run down
                log.exception("function sandbox failed")
                self._stop()
                return failed(f"the function sandbox failed: {type(err).__name__}: {err}")

    def close(self) -> None:
        with self._lock:
            self._stop()

    # --- internals -------------------------------------------------------------------------

    def _run(self, request: dict[str, Any], calls: Sequence[ToolCall]) -> Episode:
        worker = self._ready_worker()
        if worker is None:
            return failed(self._start_error)
        worker.send(request)
        worker.episodes += 1
        deadline = time.monotonic() + self.timeout_s
        started = -1
        while True:
            message, problem = worker.receive(deadline)
            if message is None:
                return failed(self._lost_worker(problem, calls, started))
            if "started" in message:
                started = int(message["started"])
                continue
            if worker.episodes >= MAX_EPISODES_PER_WORKER:
                self._stop()
            return _episode(message, len(calls))

    def _ready_worker(self) -> "_Worker | None":
        if self._worker is not None and self._worker.alive():
            return self._worker
        self._stop()
        worker = _Worker.start(self.module)
        worker.send({"module": str(self.module), "state": self.state_factory, "tools": list(self.tools),
                     "memory_mb": self.memory_mb})
        message, problem = worker.receive(time.monotonic() + STARTUP_TIMEOUT_S)
        if message is None or not message.get("ready"):
            reason = message.get("error") if message else f"the functions' process did not start ({problem})"
            self._start_error = f"{reason}{worker.stderr_tail(prefix='; stderr: ') if not message else ''}"
            worker.stop()
            return None
        self._worker = worker
        return worker

    def _lost_worker(self, problem: str, calls: Sequence[ToolCall], started: int) -> str:
        worker = self._worker
        code = worker.stop() if worker is not None else None
        self._worker = None
        during = f"{calls[started].name}" if 0 <= started < len(calls) else "the calls"
        if problem == "timeout":
            return f"{during} did not return within {self.timeout_s:g} s (hung?); the functions' process was restarted"
        if problem == "too large":
            return f"{during} returned more than {MAX_REPLY_BYTES // 2**20} MiB; the functions' process was restarted"
        how = _exit_words(code)
        tail = worker.stderr_tail(prefix="; stderr: ") if worker is not None else ""
        return f"the functions' process died ({how}) during {during}; it was restarted{tail}"

    def _stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None


class _Worker:
    """One child process and its line protocol."""

    def __init__(self, process: subprocess.Popen, stderr: Any) -> None:
        self.process = process
        self.stderr = stderr
        self.episodes = 0
        self._tail: str | None = None  # the stderr's last line, kept when the file is closed
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(process.stdout, selectors.EVENT_READ)

    @classmethod
    def start(cls, module: Path) -> "_Worker":
        stderr = tempfile.TemporaryFile(mode="w+b")
        env = dict(os.environ)
        package_root = str(Path(appliance.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        process = subprocess.Popen(
            [sys.executable, "-m", "appliance.userworld.worker"], cwd=module.parent, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
        return cls(process, stderr)

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode("utf-8"))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the receive that follows reports the dead process

    def receive(self, deadline: float) -> tuple[dict[str, Any] | None, str]:
        """The next message, or (None, "timeout" | "died" | "too large")."""
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, "timeout"
            if not self._selector.select(remaining):
                continue
            chunk = os.read(self.process.stdout.fileno(), 1 << 20)
            if not chunk:
                return None, "died"
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                return None, "too large"
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line), ""
        except json.JSONDecodeError:
            return None, "died"

    def stop(self) -> int | None:
        """Kill the process group (the worker and anything it started); the exit code."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._selector.close()
        if self._tail is None:
            self._tail = self._last_stderr_line()
            self.stderr.close()
        return code

    def stderr_tail(self, prefix: str = "") -> str:
        tail = self._tail if self._tail is not None else self._last_stderr_line()
        return f"{prefix}{tail}" if tail else ""

    def _last_stderr_line(self) -> str:
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - STDERR_TAIL_CHARS))
            tail = self.stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line for line in tail.splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""


def _stop_holder(state: dict[str, Any]) -> None:
    worker = state.get("_worker")
    if worker is not None:
        worker.stop()


def _episode(message: dict[str, Any], n_calls: int) -> Episode:
    if "error" in message:
        return failed(str(message["error"]))
    results = tuple(CallResult(value=r.get("value"), error=str(r.get("error", ""))) for r in message["results"])
    if len(results) != n_calls:
        return failed(f"the functions' process answered {len(results)} calls of {n_calls}")
    return Episode(results=results, start=message.get("start"), state=message.get("state"))


def _wire(call: ToolCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}


def _setup_calls(fixture: dict[str, Any] | None) -> list[Any]:
    if not fixture:
        return []
    return list(fixture.get("setup_calls", ())) if isinstance(fixture, dict) else []


def _exit_words(code: int | None) -> str:
    if code is None:
        return "it did not exit when killed"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return f"killed by {name}"
    return f"exit code {code}"
