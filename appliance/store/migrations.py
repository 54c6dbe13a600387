"""Schema versions: read the recorded one, upgrade an old workspace, rebuild appliance.duckdb.

appliance.duckdb holds nothing but views over the parquet parts and a
`schema_version` table (version, root). It is never edited in place: a new one
is built under a temp name and renamed over the old one, so no process ever has
to hold it read-write while others read it, and a reader that has the old file
open keeps a consistent catalog until it reconnects.

Upgrading runs the steps in MIGRATIONS, then rewrites (via compaction) every
part whose columns differ from the current schema: the views read parts without
union_by_name, which would cost a footer read per file on every query.

Version history:
  0  a workspace made before versioning: views but no schema_version table and no seed parts.
  1  seed parts (one empty file per table) so every view works before the first append.
  2  runs and evals name their `owner` process, so a killed one's `running` row can be failed.
  3  the flywheel's `trajectories` and `trajectory_triage` tables, and the derived VIEWS over them.
  4  `rollouts.guided`: a sample that is the task's reference answer (GRPO's guide_failed_groups).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import duckdb

from appliance.errors import StoreError
from appliance.store import compaction, parts
from appliance.store.schema import SCHEMA_VERSION, TABLES, VIEWS, comment_sql, derived_view_sql, view_sql


def seed_folder(data_dir: Path, table: str) -> Path:
    """`data/<table>/<partition column>=_seed/`; no real id encodes to `_seed` (parts.partition_folder_name)."""
    return data_dir / table / f"{TABLES[table].partition_by}=_seed"


def parts_glob(data_dir: Path, table: str) -> str:
    return str(data_dir / table / "*" / "*.parquet")


def read_recorded_version(db_path: Path) -> tuple[int, str] | None:
    """(schema version, workspace root the views point at), or None when there is no database yet."""
    if not db_path.exists():
        return None
    try:
        con = duckdb.connect(str(db_path), read_only=True)
    except duckdb.Error as err:
        # Another process holding it read-write ("lock"), or this one ("different configuration").
        if "lock" in str(err).lower() or "different configuration" in str(err).lower():
            raise StoreError(f"{db_path} is open read-write in another program; close it there (or open it "
                             "read-only, e.g. `duckdb -readonly`) and try again.") from None
        raise StoreError(f"{db_path} cannot be read ({str(err).splitlines()[0]}); it holds only views, "
                         "so delete it and open the workspace again to rebuild it.") from None
    try:
        return con.execute("SELECT version, root FROM schema_version").fetchone()
    except duckdb.CatalogException:
        return 0, ""
    finally:
        con.close()


def check_not_newer(version: int, root: Path) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(f"The workspace {root} uses store schema v{version} but this appliance reads up to "
                         f"v{SCHEMA_VERSION}; upgrade the appliance or open a different workspace folder.")


def _v0_to_v1(data_dir: Path) -> None:
    # v1 adds seed parts, which upgrade() writes for every version; v0 parts are conformed by upgrade() too.
    data_dir.mkdir(parents=True, exist_ok=True)


def _nothing_to_move(data_dir: Path) -> None:
    """New columns or tables only: upgrade() rewrites the parts that lack a column and seeds new tables."""


# MIGRATIONS[v] upgrades the parquet data of a v workspace to v + 1, in place and idempotently. Steps only
# need to move or rename things: upgrade() then rewrites every part whose columns differ from the schema.
MIGRATIONS: dict[int, Callable[[Path], None]] = {
    0: _v0_to_v1, 1: _nothing_to_move, 2: _nothing_to_move, 3: _nothing_to_move}


def upgrade(data_dir: Path, staging_parent: Path, from_version: int) -> None:
    """Run the steps from `from_version` to SCHEMA_VERSION; the caller holds the exclusive write lock."""
    for version in range(from_version, SCHEMA_VERSION):
        MIGRATIONS[version](data_dir)
    write_seeds(data_dir)
    for name, table in TABLES.items():
        for folder in partition_folders(data_dir, name):
            if not all(compaction.is_current(p, table) for p in parts.list_parts(folder)):
                compaction.compact_folder(table, folder, staging_parent, force=True)


def partition_folders(data_dir: Path, table: str) -> list[Path]:
    """Every run/eval folder of a table (not the seed)."""
    seed = seed_folder(data_dir, table).name
    try:
        return [Path(e.path) for e in os.scandir(data_dir / table)
                if e.is_dir() and "=" in e.name and e.name != seed]
    except FileNotFoundError:
        return []


def _seed_name() -> str:
    return f"seed-v{SCHEMA_VERSION}.parquet"


def seeds_present(data_dir: Path) -> bool:
    return all((seed_folder(data_dir, name) / _seed_name()).exists() for name in TABLES)


def write_seeds(data_dir: Path) -> None:
    """One empty part per table carrying the full schema, so queries work before the first append."""
    for name, table in TABLES.items():
        folder = seed_folder(data_dir, name)
        folder.mkdir(parents=True, exist_ok=True)
        current = folder / _seed_name()
        if not current.exists():
            parts.write_part(folder, table.arrow_schema().empty_table(), name=current.name)
        for old in folder.glob("seed-v*.parquet"):
            if old != current:
                old.unlink(missing_ok=True)


def build_database(root: Path, data_dir: Path, db_path: Path) -> None:
    """Write a fresh appliance.duckdb (views + schema_version) and rename it over the old one."""
    temp = root / f".{os.getpid()}-{os.urandom(6).hex()}-db{parts.TEMP_SUFFIX}"
    try:
        con = duckdb.connect(str(temp))
        try:
            con.execute("BEGIN")  # one transaction: hundreds of COMMENT statements, one WAL flush
            create_views(con, data_dir, with_comments=True)
            con.execute("CREATE TABLE schema_version (version INTEGER, root VARCHAR, "
                        "built_at TIMESTAMP WITH TIME ZONE DEFAULT now())")
            con.execute("INSERT INTO schema_version (version, root) VALUES (?, ?)", [SCHEMA_VERSION, str(root)])
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        with open(temp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, db_path)
        parts.fsync_folder(root)
    finally:
        temp.unlink(missing_ok=True)
        Path(f"{temp}.wal").unlink(missing_ok=True)


def create_views(con: duckdb.DuckDBPyConnection, data_dir: Path, with_comments: bool = False) -> None:
    for name, table in TABLES.items():
        con.execute(view_sql(table, parts_glob(data_dir, name)))
        if with_comments:
            for statement in comment_sql(table):
                con.execute(statement)
    for view in VIEWS.values():
        con.execute(derived_view_sql(view))
        if with_comments:
            for statement in comment_sql(view):
                con.execute(statement)


