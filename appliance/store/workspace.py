"""The workspace: one folder of append-only parquet parts, read through DuckDB views.

Layout (default folder `runs/`):
  runs/appliance.duckdb                  views over the parts + schema_version; open it read-only
  runs/data/<table>/run_id=<id>/         immutable parquet parts, one per append (eval tables: by eval id)
  runs/data/<table>/run_id=_seed/        one empty part per table, so empty tables query fine
  runs/tmp/                              compaction staging
  runs/.write.lock                       shared by appends, exclusive for compaction

Writers never open the DuckDB file (DuckDB lets one read-write process lock it
against everyone else); they add parts atomically. Readers glob the parts on
every query, so they see each append whole or not at all, and never block a
writer.
"""
from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from appliance.errors import StoreError
from appliance.store import compaction, migrations, owner, parts
from appliance.store.rows import to_arrow
from appliance.store.schema import SCHEMA_VERSION, TABLES, Table

try:
    import fcntl
except ImportError:  # not POSIX: appends and compaction are not mutually excluded
    fcntl = None

DB_NAME = "appliance.duckdb"
# A query whose globbed part vanished (compaction swapped the folder) is retried this many times.
QUERY_ATTEMPTS = 4


class Workspace:
    """A run store folder. Make one with `Workspace.open(path)`; safe to use from many processes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.tmp_dir = root / "tmp"
        self.db_path = root / DB_NAME
        self._lock_path = root / ".write.lock"
        self._reader: duckdb.DuckDBPyConnection | None = None
        self._known_folders: set[Path] = set()

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path = "runs") -> "Workspace":
        """Open (creating or upgrading if needed) the workspace at `path`."""
        root = Path(path).expanduser().resolve()
        try:
            (root / "data").mkdir(parents=True, exist_ok=True)
            (root / "tmp").mkdir(exist_ok=True)
        except OSError as err:
            raise StoreError(f"Cannot create the workspace folder {root} ({err.strerror}); "
                             "choose a writable folder.") from None
        workspace = cls(root)
        workspace._prepare()
        return workspace

    def _prepare(self) -> None:
        recorded = migrations.read_recorded_version(self.db_path)
        # No database yet: a new workspace, or one whose views file was deleted; parts are current.
        version, views_root = recorded if recorded is not None else (SCHEMA_VERSION, None)
        migrations.check_not_newer(version, self.root)
        if version < SCHEMA_VERSION:
            with self._lock(exclusive=True):
                migrations.upgrade(self.data_dir, self.tmp_dir, version)
        elif not migrations.seeds_present(self.data_dir):
            migrations.write_seeds(self.data_dir)
        if version != SCHEMA_VERSION or views_root != str(self.root):
            # New, upgraded, or moved: the views hold absolute paths, so rebuild them.
            migrations.build_database(self.root, self.data_dir, self.db_path)
        every_folder = [f for name in TABLES for f in migrations.partition_folders(self.data_dir, name)]
        parts.remove_stale_temps([self.root, self.tmp_dir, *every_folder])

    # -- writing --------------------------------------------------------------------------------

    def new_id(self, prefix: str) -> str:
        """A readable, sortable, unique id such as `grpo-20250101-120000-a1b2c3`."""
        return f"{prefix}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"

    def append(self, table: str, rows: Sequence[Mapping[str, Any]] | pa.Table) -> None:
        """Store `rows` durably: when this returns they survive a crash and every new query sees them.

        `rows` are dicts of column to value, or an Arrow table (faster for bulk imports). An append is
        atomic per run (or eval): rows for several runs become one part in each run's folder.
        """
        spec = self._table(table)
        rows = rows if isinstance(rows, (list, tuple, pa.Table)) else list(rows)
        if len(rows) == 0:
            return
        for value, group in _group_by(rows, spec.partition_by):
            data = to_arrow(spec, group)
            with self._lock():
                parts.write_part(self._partition_folder(spec, value), data)

    def fail_abandoned(self) -> list[str]:
        """Mark `failed` every run and eval left `running` by a process of this host that has ended.

        A killed process never writes its final status; without this its row would read `running`
        forever. Rows whose owner is alive, on another host, or not recorded are left alone.
        """
        now = time.time()
        failed = []
        for table, key in (("evals", "id"), ("runs", "run_id")):
            _, rows = self.query(f"SELECT {key}, owner FROM {table} WHERE status = 'running'")
            for row_id, row_owner in rows:
                if not owner.has_ended(row_owner):
                    continue
                why = f"its process ({row_owner}) ended without finishing it (killed or crashed)"
                extra = {"metrics": {"error": why}} if table == "evals" else {"error": why}
                self.append(table, [{key: row_id, "status": "failed", "finished_at": now, **extra}])
                failed.append(row_id)
        return failed

    def writer(self, run_id: str, compact_every: int = 100):
        """A RunWriter that appends one run's rollouts, events and alarms with step/event counters."""
        from appliance.store.writer import RunWriter
        return RunWriter(self, run_id, compact_every)

    def _table(self, name: str) -> Table:
        try:
            return TABLES[name]
        except KeyError:
            raise StoreError(f"Unknown table {name!r}; the store has {', '.join(TABLES)}.") from None

    def _partition_folder(self, spec: Table, value: str) -> Path:
        folder = self.data_dir / spec.name / parts.partition_folder_name(spec.partition_by, value)
        if folder not in self._known_folders:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                parts.fsync_folder(folder.parent)
            self._known_folders.add(folder)
        return folder

    # -- reading --------------------------------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A new in-memory DuckDB connection with every table as a view; holds no lock on any file."""
        con = duckdb.connect(":memory:")
        con.execute("SET parquet_metadata_cache = true")  # parts never change, so their footers can be cached
        migrations.create_views(con, self.data_dir)
        return con

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None
              ) -> tuple[list[str], list[tuple]]:
        """Run one SQL statement over the views; return (column names, rows).

        It holds the shared lock, so no compaction swaps a folder under it: DuckDB lists a folder and
        then looks up each name by path, and a listing that straddles the swap finds none of the old
        names and counts no rows, without an error (tests/test_store.py).
        """
        for attempt in range(QUERY_ATTEMPTS):
            with self._lock():
                if self._reader is None:
                    self._reader = self.connect()
                cursor = self._reader.cursor()
                try:
                    cursor.execute(sql, params)
                    return [d[0] for d in cursor.description or []], cursor.fetchall()
                except duckdb.IOException as err:  # where there is no flock (Windows) a part can vanish
                    if not _is_vanished_part(err) or attempt == QUERY_ATTEMPTS - 1:
                        raise
                finally:
                    cursor.close()
            time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- compaction -----------------------------------------------------------------------------

    def compact(self, table: str, run_id: str | None = None) -> int:
        """Merge the parts of one run (or eval; None: every one) into one file; return parts merged.

        Readers never see duplicates or gaps: see appliance/store/compaction.py. Appends wait meanwhile.
        """
        spec = self._table(table)
        folders = ([self.data_dir / spec.name / parts.partition_folder_name(spec.partition_by, run_id)]
                   if run_id is not None else migrations.partition_folders(self.data_dir, spec.name))
        with self._lock(exclusive=True):
            return sum(compaction.compact_folder(spec, folder, self.tmp_dir) for folder in folders)

    # -- locking --------------------------------------------------------------------------------

    @contextmanager
    def _lock(self, exclusive: bool = False) -> Iterator[None]:
        """Shared: appends and queries, many at once. Exclusive: a compaction's swap, or an upgrade."""
        if fcntl is None:
            yield
            return
        # An open file of its own each time: threads sharing one descriptor share one lock, and the first
        # to unlock would release it under the others (and an exclusive flock on it would convert the lock).
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r}, schema v{SCHEMA_VERSION})"


def _group_by(rows: Sequence[Mapping[str, Any]] | pa.Table, column: str) -> Iterator[tuple[Any, Any]]:
    """Rows per distinct value of `column` (usually one group: a batch belongs to one run)."""
    if isinstance(rows, pa.Table):
        yield from _group_arrow(rows, column)
        return
    try:
        values = {row.get(column) for row in rows}
    except (AttributeError, TypeError):
        raise StoreError(f"Rows must be dicts of column name to value with a hashable {column}.") from None
    if len(values) == 1:
        yield values.pop(), rows
        return
    groups: dict[Any, list[Mapping]] = {}
    for row in rows:
        groups.setdefault(row.get(column), []).append(row)
    yield from groups.items()


def _group_arrow(data: pa.Table, column: str) -> Iterator[tuple[Any, pa.Table]]:
    if column not in data.column_names:
        yield None, data  # to_arrow reports the missing required column
        return
    values = pc.unique(data[column]).to_pylist()
    if len(values) == 1:
        yield values[0], data
        return
    for value in values:
        yield value, data.filter(pc.is_null(data[column]) if value is None else pc.equal(data[column], value))


def _is_vanished_part(err: duckdb.Error) -> bool:
    text = str(err).lower()
    return "no such file" in text or "no files found" in text or "cannot open file" in text
