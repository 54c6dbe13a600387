"""The run store: every run, rollout, eval, checkpoint, audit, event and alarm, queryable with DuckDB SQL.

    ws = Workspace.open("runs")
    ws.append("rollouts", [{"run_id": run, "step": 0, "reward": 1.0, "components": {"right_tool": 1.0}}])
    ws.query("SELECT step, avg(reward) FROM rollouts GROUP BY step")
    duckdb -readonly runs/appliance.duckdb   # the same views, from a shell

Tables, views and columns: appliance/store/schema.py. Reward components are a
MAP(VARCHAR, DOUBLE) column: `components['right_tool']`.

Concurrency: writers append immutable parquet parts (temp file, fsync, atomic
rename) and never open the DuckDB file; appliance.duckdb holds only views and is
replaced, never edited, so any number of processes can read it read-only (or use
`Workspace.connect()`, an in-memory connection) while others write. Compaction
swaps a run's folder atomically under the workspace's exclusive lock, and
`Workspace.query` holds the shared one, so it never overlaps a swap. Other
readers can: DuckDB lists a folder, then looks its names up by path, so a query
straddling the swap fails with a missing-file IO error or, rarely, sees none of
that run's rows; repeat a query whose count looks wrong.
"""
from appliance.errors import StoreError
from appliance.store.schema import SCHEMA_VERSION, TABLES, VIEWS
from appliance.store.workspace import Workspace
from appliance.store.writer import RunWriter

__all__ = ["RunWriter", "SCHEMA_VERSION", "StoreError", "TABLES", "VIEWS", "Workspace"]
