"""A red banner for Alarm events: reward hacking, OOM advice, version drift. Hidden until one comes."""
from __future__ import annotations

from textual.widgets import Static

from appliance.events import Alarm


class AlarmBanner(Static):
    """`raise_alarm(event)` shows the latest alarm (and how many there were); `clear()` hides it."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.alarms: list[Alarm] = []

    def on_mount(self) -> None:
        self.display = False

    def raise_alarm(self, alarm: Alarm) -> None:
        self.alarms.append(alarm)
        more = f"  (+{len(self.alarms) - 1} earlier)" if len(self.alarms) > 1 else ""
        self.update(f"⚠ ALARM {alarm.kind} at step {alarm.step}: {alarm.message}{more}")
        self.display = True

    def clear(self) -> None:
        self.alarms = []
        self.display = False
