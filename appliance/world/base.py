"""The WorkBench databases as loaded from the bundled CSVs, once per process.

Every cell is read as text, as WorkBench does with `read_csv(dtype=str)`; a blank
cell becomes None (pandas' NaN). The bundled CSVs contain no other pandas NA
tokens ("NA", "null", ...), so blank is the only missing marker we need.
Analytics `user_engaged` is converted to a bool, as WorkBench does on load.

The analytics visits table cannot be changed by any tool, so its per-day
aggregates are computed here once and the count tools only slice them.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from appliance.world.table import Table

DATA_DIR = Path(__file__).parent / "data"

# The fixed "now" of WorkBench: Thursday 2023-11-30, first moment of the day.
NOW = "2023-11-30 00:00:00"

# Attribute names of the five scored tables on a World, in WorkBench's order.
SCORED_TABLES = ("calendar_events", "emails", "plots", "project_tasks", "crm")

_CSV_FILES = {
    "emails": "emails.csv",
    "calendar_events": "calendar_events.csv",
    "project_tasks": "project_tasks.csv",
    "crm": "customer_relationship_manager_data.csv",
    "analytics": "analytics_data.csv",
}
TRAFFIC_SOURCES = ("direct", "referral", "search engine", "social media")


@dataclass(frozen=True)
class DayStats:
    """Aggregates of one day of analytics visits."""

    visits: int
    engaged: int
    by_source: Mapping[str, int]
    mean_session_seconds: float


@dataclass(frozen=True)
class Base:
    """The shared, never-changed starting state."""

    tables: Mapping[str, Table]  # the five scored tables, keyed like SCORED_TABLES
    visits: Table  # analytics visits (read-only)
    days: tuple[tuple[str, DayStats], ...]  # per-day analytics aggregates, date order
    directory: tuple[str, ...]  # company directory addresses
    assignees_lower: frozenset[str]  # project-task assignees at load time (for validation)


def _read_csv(name: str) -> tuple[list[str], list[tuple]]:
    with open(DATA_DIR / name, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = [tuple(cell if cell != "" else None for cell in row) for row in reader]
    return header, rows


def _load_visits() -> Table:
    header, rows = _read_csv(_CSV_FILES["analytics"])
    engaged = header.index("user_engaged")
    converted = [row[:engaged] + (row[engaged] == "True",) + row[engaged + 1 :] for row in rows]
    return Table.from_rows(header, converted)


def _day_stats(visits: Table) -> tuple[tuple[str, DayStats], ...]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in visits.records():
        grouped.setdefault(record["date_of_visit"], []).append(record)
    days = []
    for date in sorted(grouped):  # pandas groupby sorts its keys
        day = grouped[date]
        by_source = {s: sum(1 for r in day if r["traffic_source"] == s) for s in TRAFFIC_SOURCES}
        seconds = [float(r["session_duration_seconds"]) for r in day]
        stats = DayStats(
            visits=len(day),
            engaged=sum(1 for r in day if r["user_engaged"]),
            by_source=MappingProxyType(by_source),
            mean_session_seconds=sum(seconds) / len(seconds),
        )
        days.append((date, stats))
    return tuple(days)


@lru_cache(maxsize=1)
def load_base() -> Base:
    """Load every CSV once; later calls return the same object."""
    tables = {}
    for name in ("emails", "calendar_events", "project_tasks", "crm"):
        header, rows = _read_csv(_CSV_FILES[name])
        tables[name] = Table.from_rows(header, rows)
    tables["plots"] = Table.from_rows(["file_path"], [])
    for table in tables.values():
        table.build_index()  # every rollout starts from these tables: make ID lookups O(1)
        if table.rows:
            table.max_id()  # and new IDs free
    with open(DATA_DIR / "email_addresses.csv", encoding="utf-8") as handle:
        directory = tuple(line.strip() for line in handle if line.strip())
    visits = _load_visits()
    assignees = frozenset(a.lower() for a in tables["project_tasks"].column_values("assigned_to_email"))
    return Base(
        tables=MappingProxyType(tables),
        visits=visits,
        days=_day_stats(visits),
        directory=directory,
        assignees_lower=assignees,
    )


def directory() -> tuple[str, ...]:
    """The 20 company-directory addresses, in file order."""
    return load_base().directory


@lru_cache(maxsize=1)
def base_tables() -> Mapping[str, tuple[Mapping[str, Any], ...]]:
    """Read-only views of the starting tables, for task generators.

    Keys: emails, calendar_events, project_tasks, crm, analytics, plots. Rows are
    read-only mappings in table order; missing cells are None; analytics
    `user_engaged` is a bool; everything else is text.
    """
    base = load_base()
    named = dict(base.tables)
    named["analytics"] = base.visits
    return MappingProxyType(
        {name: tuple(MappingProxyType(r) for r in table.records()) for name, table in named.items()}
    )
