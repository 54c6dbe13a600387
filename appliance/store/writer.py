"""RunWriter: append one run's rows (run versions, rollouts per step, events, alarms) with counters.

Counters resume from what the store already holds, so a resumed run keeps
numbering its steps and events where it stopped. Every `compact_every` steps the
run's parts are compacted, so a live run's queries stay fast however long it runs
(a query costs roughly a quarter of a millisecond per part file).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from appliance.store import owner

if TYPE_CHECKING:
    from appliance.store.workspace import Workspace


class RunWriter:
    """Writes for one run id. Each call is one durable append (see Workspace.append)."""

    def __init__(self, workspace: "Workspace", run_id: str, compact_every: int = 100) -> None:
        self.workspace = workspace
        self.run_id = run_id
        self.compact_every = compact_every  # 0: never compact automatically
        self.last_step = self._stored_max("rollouts", "step")
        self.last_seq = self._stored_max("events", "seq")

    def _stored_max(self, table: str, column: str) -> int:
        _, rows = self.workspace.query(f"SELECT max({column}) FROM {table} WHERE run_id = ?", [self.run_id])
        return -1 if rows[0][0] is None else int(rows[0][0])

    def update_run(self, **columns: Any) -> None:
        """Record a new version of this run's row (e.g. status="finished", finished_at=time.time()).

        A `running` version names this process as its owner, so a later start can fail it if this dies.
        """
        if columns.get("status") == "running":
            columns.setdefault("owner", owner.this_process())
        self.workspace.append("runs", [{**columns, "run_id": self.run_id}])

    def write_step(self, rollouts: Sequence[Mapping[str, Any]], step: int | None = None) -> int:
        """Append one step's rollouts (run_id and step filled in); return the step number."""
        step = self.last_step + 1 if step is None else step
        self.workspace.append("rollouts", [{**row, "run_id": self.run_id, "step": step} for row in rollouts])
        self.last_step = step
        if self.compact_every and (step + 1) % self.compact_every == 0:
            self.compact()
        return step

    def compact(self) -> None:
        """Merge this run's parts in every table partitioned by run."""
        for table in ("rollouts", "events", "alarms", "runs", "checkpoints"):
            self.workspace.compact(table, self.run_id)

    def finish(self, status: str = "finished", **columns: Any) -> None:
        """Record the final status and compact the run."""
        self.update_run(status=status, finished_at=columns.pop("finished_at", time.time()), **columns)
        self.compact()

    def event(self, type: str, payload: Mapping[str, Any] | None = None, ts: float | None = None) -> int:
        """Append one event; return its sequence number."""
        seq = self.last_seq + 1
        self.workspace.append("events", [{"run_id": self.run_id, "seq": seq, "type": type,
                                          "payload": dict(payload or {}), "ts": ts}])
        self.last_seq = seq
        return seq

    def record(self, event: Any) -> int:
        """Append an appliance.events Event (anything with to_dict() holding type and ts)."""
        fields = dict(event.to_dict())
        event_type, ts = fields.pop("type"), fields.pop("ts", None)
        fields.pop("run_id", None)
        return self.event(event_type, fields, ts)

    def alarm(self, kind: str, message: str, severity: str = "warning", step: int | None = None) -> None:
        self.workspace.append("alarms", [{"run_id": self.run_id, "kind": kind, "message": message,
                                          "severity": severity, "step": step}])
