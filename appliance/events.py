"""Typed engine events, one JSON line each.

The engine (eval, training, pipeline) reports progress only through these
events. The CLI prints them, the TUI renders them, the store records them, and a
child process streams them on stdout so a front end can follow a run that lives
in another process (GPU work runs in a child so a CUDA crash cannot take the UI
down). `parse_event` is the inverse of `Event.to_json`.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar

# A line on a child's stdout that starts with this prefix is an event; anything
# else (library chatter that escaped to stdout) is passed through as a log line.
EVENT_PREFIX = "@event "


@dataclass
class Event:
    """Base class: every event has a type tag, a run/eval id and a timestamp."""

    type: ClassVar[str] = "event"
    run_id: str = ""
    ts: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

    def to_line(self) -> str:
        return EVENT_PREFIX + self.to_json()


@dataclass
class RunStarted(Event):
    type: ClassVar[str] = "run_started"
    kind: str = ""  # eval | sft | grpo | pipeline
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Progress(Event):
    """High-rate progress; a UI may keep only the latest one."""

    type: ClassVar[str] = "progress"
    stage: str = ""
    done: int = 0
    total: int = 0
    message: str = ""


@dataclass
class StepMetrics(Event):
    type: ClassVar[str] = "step_metrics"
    step: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RolloutScored(Event):
    type: ClassVar[str] = "rollout_scored"
    step: int = 0
    task_id: str = ""
    sample_index: int = 0
    completion: str = ""
    reward: float = 0.0
    bucket: str = ""
    reason: str = ""


@dataclass
class EvalFinished(Event):
    type: ClassVar[str] = "eval_finished"
    eval_id: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""


@dataclass
class CheckpointSaved(Event):
    type: ClassVar[str] = "checkpoint_saved"
    step: int = 0
    path: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Alarm(Event):
    """Something a person must look at: reward hacking, OOM advice, version drift."""

    type: ClassVar[str] = "alarm"
    kind: str = ""
    message: str = ""
    step: int = 0


@dataclass
class RunFinished(Event):
    type: ClassVar[str] = "run_finished"
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunFailed(Event):
    type: ClassVar[str] = "run_failed"
    error: str = ""


@dataclass
class Log(Event):
    type: ClassVar[str] = "log"
    level: str = "info"
    message: str = ""


@dataclass
class TasksScreened(Event):
    """GRPO's screening of train tasks before training (appliance.train.screen), one dict per task."""

    type: ClassVar[str] = "tasks_screened"
    temperature: float = 1.0
    tasks: list[dict[str, Any]] = field(default_factory=list)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (RunStarted, Progress, StepMetrics, RolloutScored, EvalFinished,
                CheckpointSaved, Alarm, RunFinished, RunFailed, Log, TasksScreened)
}

EventSink = Callable[[Event], None]


def parse_event(line: str) -> Event | None:
    """Parse one line (with or without EVENT_PREFIX); None for a line that is not an event."""
    text = line.strip()
    if text.startswith(EVENT_PREFIX.strip()):
        text = text[len(EVENT_PREFIX.strip()):].strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("type") not in EVENT_TYPES:
        return None
    cls = EVENT_TYPES[obj["type"]]
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in obj.items() if k in known})


def null_sink(event: Event) -> None:
    """An event sink that drops everything (for library use and tests)."""
