"""Compaction: replace a run's many small parts by one file, atomically.

The merged part is written into a staging folder outside data/, then the
staging folder and the run's folder are exchanged in one rename (renameat2
RENAME_EXCHANGE on Linux). A query lists the run's folder either before the
exchange (all old parts) or after it (the merged part): never both, never
neither. But DuckDB lists a folder and then looks each name up by path, so a
listing that straddles the exchange finds none of the old names and counts no
rows. The caller holds the workspace's exclusive lock, so no append lands in
the old folder meanwhile and no Workspace.query (which holds the shared lock)
overlaps the exchange.

The same rewrite brings parts written under an older schema to the current
columns, which is how migrations upgrade data (views read parts by name and
need every part to carry every column).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from appliance.store import parts
from appliance.store.schema import Table


def conform(data: pa.Table, spec: Table) -> pa.Table:
    """Cast to the current columns of `spec`: missing ones become NULL, unknown ones are dropped."""
    schema = spec.arrow_schema()
    arrays = [data[f.name].cast(f.type) if f.name in data.column_names else pa.nulls(len(data), f.type)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def is_current(path: Path, spec: Table) -> bool:
    """Whether a part already has exactly the current columns and types."""
    return pq.read_schema(path).remove_metadata().equals(spec.arrow_schema().remove_metadata())


def compact_folder(spec: Table, folder: Path, staging_parent: Path, force: bool = False) -> int:
    """Merge the parts in `folder` into one; return how many parts were merged (0: nothing to do).

    With force, a single part is rewritten too (used to upgrade its columns).
    """
    old_parts = parts.list_parts(folder)
    if len(old_parts) < (1 if force else 2):
        return 0
    tables = [pq.read_table(p, partitioning=None) for p in old_parts]
    merged = conform(pa.concat_tables(tables, promote_options="permissive"), spec)
    staging = parts.new_temp_folder(staging_parent)
    parts.write_part(staging, merged, compression="zstd")
    parts.swap_folders(staging, folder)
    parts.fsync_folder(folder.parent)
    shutil.rmtree(staging)  # it now holds the old parts
    return len(old_parts)
