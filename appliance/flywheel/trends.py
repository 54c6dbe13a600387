"""Failure modes per adapter version over time, and the lightest fix they point to.

What `appliance trajectories triage` prints after judging and what the
cockpit's Flywheel screen shows come from here, so both say the same thing:

  failure_modes_over_time(store)   one AdapterModes per (model, adapter version, pack), oldest first: the
                                   trajectories judged, how many show each failure mode (the view
                                   `failure_modes_by_adapter`) and each primary mode (`trajectory_failures`)
  latest_fixes(store)              the fix for each pack's newest known adapter version (what triage prints)
  flywheel_fix(store, adapter)     the lightest fix (appliance.evaluate.decision.lightest_fix) from one
                                   adapter version's triaged primary modes plus the buckets of the newest
                                   finished eval of that adapter on that pack, when there is one

"Over time" orders adapter versions by their first trajectory, then by name
(checkpoint ids start with the run's timestamp), `base` before the trained
ones and `unknown` last. `store` is anything with `query(sql, params)`: a
Workspace, or the cockpit's StoreData.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.evaluate.decision import DecisionThresholds, LightestFix, lightest_fix
from appliance.flywheel.triage import FAILURE_MODES

NOT_FAILURES = ("success", "unverified")

_OVER_TIME_SQL = """
WITH seen AS (
    SELECT coalesce(t.model, 'unknown') AS model, coalesce(t.adapter_version, 'unknown') AS adapter_version,
           coalesce(f.pack, '') AS pack, min(t.created_at) AS first_seen, max(t.created_at) AS last_seen
    FROM trajectory_failures f JOIN trajectories t ON t.id = f.trajectory_id
    GROUP BY ALL
), primaries AS (
    SELECT model, adapter_version, pack, failure_mode, count(DISTINCT trajectory_id) AS n
    FROM trajectory_failures WHERE is_primary GROUP BY ALL
)
SELECT m.model, m.adapter_version, m.pack, m.failure_mode, m.trajectories, m.judged,
       coalesce(p.n, 0) AS primary_n, s.first_seen, s.last_seen
FROM failure_modes_by_adapter m
JOIN seen s USING (model, adapter_version, pack)
LEFT JOIN primaries p USING (model, adapter_version, pack, failure_mode)
WHERE $pack IS NULL OR m.pack = $pack
"""

# The newest finished eval of one adapter version on one pack: the adapter folder the trajectories name, the
# registry's folder for that checkpoint id, or the id itself (what `appliance eval --adapter` was given).
_EVAL_SQL = """
WITH folders AS (
    SELECT DISTINCT adapter AS folder FROM trajectories WHERE adapter_version = $version AND adapter IS NOT NULL
    UNION SELECT path FROM checkpoints WHERE id = $version AND path IS NOT NULL
)
SELECT id, metrics FROM evals
WHERE status = 'finished' AND pack = $pack AND ($model IS NULL OR model IS NULL OR model = $model)
  AND CASE WHEN $version = 'base' THEN coalesce(adapter, '') = ''
           ELSE rtrim(adapter, '/') IN (SELECT rtrim(folder, '/') FROM folders)
                OR rtrim(adapter, '/') = $version OR rtrim(adapter, '/') LIKE '%/' || $version END
ORDER BY started_at DESC NULLS LAST, id DESC
LIMIT 1
"""


@dataclass
class AdapterModes:
    """The judged trajectories of one model, adapter version and pack."""

    model: str
    adapter_version: str
    pack: str
    judged: int
    # failure mode -> trajectories showing it, most first (ties in triage's priority order, FAILURE_MODES)
    modes: dict[str, int] = field(default_factory=dict)
    primary: dict[str, int] = field(default_factory=dict)  # primary mode -> trajectories (success, unverified too)
    first_seen: datetime | None = None
    last_seen: datetime | None = None

    @property
    def failed(self) -> int:
        """Trajectories with at least one failure mode."""
        return sum(n for mode, n in self.primary.items() if mode not in NOT_FAILURES)

    @property
    def top_mode(self) -> str | None:
        """The failure mode most trajectories show (never success or unverified); None when none failed."""
        return next((mode for mode in self.modes if mode not in NOT_FAILURES), None)


@dataclass(frozen=True)
class FlywheelFix:
    """The lightest fix for one adapter version, and what it was computed from."""

    adapter: AdapterModes
    fix: LightestFix | None  # None: nothing failed
    eval_id: str | None  # the eval whose buckets were added, if any

    def __str__(self) -> str:
        where = f"{self.adapter.model} {self.adapter.adapter_version} on {self.adapter.pack or 'no pack'}"
        source = f"{self.adapter.judged} triaged trajectories" + (f" and eval {self.eval_id}" if self.eval_id else "")
        if self.fix is None:
            return f"{where}: nothing failed in {source}."
        return f"{where}: lightest fix {self.fix.kind} — {self.fix.reason} (from {source})"


def failure_modes_over_time(store: Any, pack: str | None = None) -> list[AdapterModes]:
    """Every judged (model, adapter version, pack), oldest first; `pack` keeps one pack's."""
    columns, rows = store.query(_OVER_TIME_SQL, {"pack": pack})
    groups: dict[tuple[str, str, str], AdapterModes] = {}
    for row in (dict(zip(columns, values)) for values in rows):
        key = (row["model"], row["adapter_version"], row["pack"])
        group = groups.setdefault(key, AdapterModes(*key, judged=int(row["judged"]), first_seen=row["first_seen"],
                                                    last_seen=row["last_seen"]))
        group.modes[row["failure_mode"]] = int(row["trajectories"])
        if row["primary_n"]:
            group.primary[row["failure_mode"]] = int(row["primary_n"])
    for group in groups.values():
        group.modes = dict(sorted(group.modes.items(), key=lambda item: (-item[1], _priority(item[0]), item[0])))
    return sorted(groups.values(), key=_chronological)


def flywheel_fix(store: Any, adapter: AdapterModes, thresholds: DecisionThresholds = DecisionThresholds()
                 ) -> FlywheelFix:
    """The lightest fix from `adapter`'s triaged primary modes and its newest finished eval on its pack."""
    eval_id, metrics = None, {}
    if adapter.adapter_version != "unknown" and adapter.pack:
        model = None if adapter.model == "unknown" else adapter.model
        columns, rows = store.query(_EVAL_SQL, {"version": adapter.adapter_version, "pack": adapter.pack,
                                                "model": model})
        if rows:
            found = dict(zip(columns, rows[0]))
            eval_id, metrics = found["id"], _as_dict(found["metrics"])
    return FlywheelFix(adapter, lightest_fix(metrics, thresholds, triage_modes=adapter.primary), eval_id)


def latest_fixes(store: Any, pack: str | None = None) -> list[FlywheelFix]:
    """For each pack, the fix for its newest known adapter version (`unknown` only when it is the pack's only)."""
    return [flywheel_fix(store, adapter) for adapter in newest_per_pack(failure_modes_over_time(store, pack))]


def newest_per_pack(adapters: list[AdapterModes]) -> list[AdapterModes]:
    """Of an oldest-first list, each pack's newest known adapter version (`unknown` only when it is the only)."""
    newest: dict[str, AdapterModes] = {}
    for adapter in adapters:  # oldest first: the last one wins
        if adapter.adapter_version != "unknown" or adapter.pack not in newest:
            newest[adapter.pack] = adapter
    return list(newest.values())


def _chronological(group: AdapterModes) -> tuple:
    rank = {"base": 0, "unknown": 2}.get(group.adapter_version, 1)
    # Whole seconds: the rows of one import differ by microseconds, which says nothing about their order.
    first = int(group.first_seen.timestamp()) if group.first_seen is not None else float("inf")
    return (first, rank, group.adapter_version, group.model, group.pack)


def _priority(mode: str) -> int:
    return FAILURE_MODES.index(mode) if mode in FAILURE_MODES else len(FAILURE_MODES)


def _as_dict(value: Any) -> dict[str, Any]:
    from appliance.flywheel.chat import json_column

    parsed = json_column(value)
    return parsed if isinstance(parsed, dict) else {}
