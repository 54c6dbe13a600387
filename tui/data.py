"""Read-only data for the cockpit: the run store behind a tiny adapter, packs, host stats.

Every SQL statement the screens need lives here, so a schema change touches one
file. `StoreData` wraps `appliance.store.Workspace` (DuckDB views: runs,
rollouts, evals, eval_samples, checkpoints, audits, events, alarms);
`MemoryData` is an in-memory DuckDB with the same table names, used by tests
and when no workspace exists yet. Both answer `query(sql, params)` with
`(columns, rows)` and take new rows with `append(table, rows)` (the audit
screen writes its labels that way).

Column names differ a little between store versions, so readers go through
`pick(row, *names)` rather than indexing one spelling.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Protocol, Sequence

Rows = list[dict[str, Any]]


class DataSource(Protocol):
    def query(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple]]: ...

    def append(self, table: str, rows: Rows) -> None: ...


def as_dicts(result: tuple[list[str], list[tuple]]) -> Rows:
    columns, rows = result
    return [dict(zip(columns, row)) for row in rows]


def pick(row: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of `names` present (and not None) in `row`."""
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return default


def as_mapping(value: Any) -> dict[str, Any]:
    """A JSON column (dict, or JSON text) as a dict; anything else as empty."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


class StoreData:
    """The real workspace; opened lazily so the cockpit starts before the store exists."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._workspace: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        with self._lock:
            if self._workspace is None:
                from appliance.store import Workspace  # no heavy imports: DuckDB only

                self._workspace = Workspace.open(self.path)
            return self._workspace

    def query(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple]]:
        return self._open().query(sql, params)

    def append(self, table: str, rows: Rows) -> None:
        self._open().append(table, rows)


class MemoryData:
    """An in-memory DuckDB holding plain tables; `append` creates a table from its first row."""

    def __init__(self, tables: dict[str, Rows] | None = None) -> None:
        import duckdb

        self._connection = duckdb.connect(":memory:")
        self._lock = threading.Lock()
        for table, rows in (tables or {}).items():
            self.append(table, rows)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> tuple[list[str], list[tuple]]:
        with self._lock:
            cursor = self._connection.cursor()
            cursor.execute(sql, list(params) if params else None)
            columns = [d[0] for d in cursor.description or []]
            return columns, cursor.fetchall() if columns else []

    def append(self, table: str, rows: Rows) -> None:
        if not rows:
            return
        with self._lock:
            columns = list(rows[0])
            types = ", ".join(f'"{c}" {_duck_type(rows[0][c])}' for c in columns)
            self._connection.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({types})')
            names = ", ".join(f'"{c}"' for c in columns)
            marks = ", ".join("?" for _ in columns)
            self._connection.executemany(
                f'INSERT INTO "{table}" ({names}) VALUES ({marks})',
                [[_duck_value(row.get(c)) for c in columns] for row in rows],
            )


def _duck_type(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "BIGINT"
    if isinstance(value, float):
        return "DOUBLE"
    return "VARCHAR"


def _duck_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (dict, list)) else value


# --- the readers the screens use -------------------------------------------------


def safe_rows(data: DataSource, sql: str, params: Sequence[Any] | None = None) -> Rows:
    """Rows, or none when the table does not exist yet (a fresh workspace is not an error)."""
    try:
        return as_dicts(data.query(sql, params))
    except Exception as error:  # noqa: BLE001 - DuckDB raises several kinds for a missing view
        if "does not exist" in str(error) or "not found" in str(error).lower():
            return []
        raise


def recent_runs(data: DataSource, limit: int = 8) -> Rows:
    return safe_rows(data, f"SELECT * FROM runs ORDER BY started_at DESC LIMIT {int(limit)}")


def recent_evals(data: DataSource, limit: int = 20) -> Rows:
    return safe_rows(data, f"SELECT * FROM evals ORDER BY created_at DESC LIMIT {int(limit)}")


def eval_samples(data: DataSource, eval_id: str, bucket: str | None = None) -> Rows:
    if bucket:
        return safe_rows(data, "SELECT * FROM eval_samples WHERE eval_id = ? AND bucket = ? "
                               "ORDER BY task_id, sample_index", [eval_id, bucket])
    return safe_rows(data, "SELECT * FROM eval_samples WHERE eval_id = ? ORDER BY task_id, sample_index",
                     [eval_id])


def checkpoints(data: DataSource) -> Rows:
    return safe_rows(data, "SELECT * FROM checkpoints ORDER BY created_at")


def promoted_checkpoint(data: DataSource) -> dict[str, Any] | None:
    rows = [row for row in checkpoints(data) if pick(row, "promoted", default=False)]
    return rows[-1] if rows else None


def audit_labels(data: DataSource, eval_id: str) -> Rows:
    return safe_rows(data, "SELECT * FROM audits WHERE eval_id = ?", [eval_id])


# --- packs and the host -----------------------------------------------------------


def list_packs(root: str | os.PathLike[str] = "tasks") -> list[str]:
    """Pack folders (those holding a pack.toml) under `root`, by name."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p.parent.name for p in base.glob("*/pack.toml"))


def read_host_stats(proc: str | os.PathLike[str] = "/proc") -> dict[str, Any]:
    """CPU model and count, RAM used/total in GiB, from /proc (no psutil needed)."""
    stats: dict[str, Any] = {"cpu": "unknown CPU", "cpus": os.cpu_count() or 0}
    root = Path(proc)
    try:
        for line in (root / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                stats["cpu"] = line.split(":", 1)[1].strip()
                break
        meminfo = {}
        for line in (root / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            meminfo[key] = int(rest.split()[0]) if rest.split() else 0
        total = meminfo.get("MemTotal", 0)
        available = meminfo.get("MemAvailable", total)
        stats["ram_total_gib"] = round(total / 2**20, 1)
        stats["ram_used_gib"] = round((total - available) / 2**20, 1)
    except OSError:
        pass
    return stats
