"""Read-only data for the cockpit: the run store behind a tiny adapter, packs, host stats.

Every SQL statement the screens need lives here, so a schema change touches one
file. `StoreData` wraps `appliance.store.Workspace` (DuckDB views: runs,
rollouts, evals, eval_samples, checkpoints, audits, events, alarms; the flywheel's views through
appliance.flywheel.trends);
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
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, Sequence

from appliance.events import CheckpointSaved, StepMetrics  # dataclasses: no heavy imports
from appliance.packs.manifest import TRAIN_SPLITS  # a constant: no heavy imports
from appliance.train.config import STAGES, TrainConfig  # the typed config only

# An eval's status once it ran to the end (appliance/evaluate/storage.py); any other is not finished.
FINISHED = "finished"
# The split checkpoint evals use unless a run chose another: the engine's default, not ours.
HELDOUT_SPLIT = TrainConfig().eval_split
PROMOTED_FILE = "PROMOTED.json"  # appliance.checkpoints.PROMOTED, next to the run folders

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


# --- the readers the screens use -------------------------------------------------


def safe_rows(data: DataSource, sql: str, params: Sequence[Any] | None = None) -> Rows:
    """Rows, or none when a view does not exist yet (a fresh workspace is not an error)."""
    try:
        return as_dicts(data.query(sql, params))
    except Exception as error:  # noqa: BLE001 - DuckDB raises several kinds for a missing view
        if "does not exist" in str(error) or "not found" in str(error).lower():
            return []
        raise


def recent_runs(data: DataSource, limit: int = 8) -> Rows:
    return safe_rows(data, "SELECT run_id, kind, status, model, pack, started_at FROM runs "
                           f"ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT {int(limit)}")


def recent_evals(data: DataSource, limit: int = 20) -> Rows:
    """Newest first; `eval_id` is the evals table's `id`; `metrics` is a dict."""
    rows = safe_rows(data, "SELECT id AS eval_id, model, adapter, pack, split, k, status, success_rate, metrics, "
                           "started_at FROM evals "
                           f"ORDER BY started_at DESC NULLS LAST, id DESC LIMIT {int(limit)}")
    for row in rows:
        row["metrics"] = as_mapping(row.get("metrics"))
    return rows


def is_finished(row: dict[str, Any]) -> bool:
    return row.get("status") == FINISHED


def newest_finished(evals: Rows) -> dict[str, Any] | None:
    """The first finished eval of a newest-first list, so a failed or running one is never the default."""
    return next((row for row in evals if is_finished(row)), None)


def eval_success(row: dict[str, Any]) -> float | None:
    """A finished eval's success rate (the column, else its metrics); None for any other eval."""
    if not is_finished(row):
        return None
    value = pick(row, "success_rate", default=as_mapping(row.get("metrics")).get("execution_success_rate"))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def baseline_evals(data: DataSource, model: str, pack: str) -> dict[str, dict[str, Any]]:
    """The newest finished eval of the base model (no adapter) on each split of `pack`, by split."""
    rows = safe_rows(data, "SELECT id AS eval_id, model, pack, split, k, status, success_rate, metrics, started_at "
                           "FROM evals WHERE coalesce(adapter, '') = '' AND status = ? "
                           "AND coalesce(model, ?) = ? AND coalesce(pack, ?) = ? "
                           "ORDER BY started_at DESC NULLS LAST, id DESC", [FINISHED, model, model, pack, pack])
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        row["metrics"] = as_mapping(row.get("metrics"))
        found.setdefault(str(row.get("split") or HELDOUT_SPLIT), row)
    return found


def eval_samples(data: DataSource, eval_id: str, bucket: str | None = None) -> Rows:
    """The samples of one eval with `prompt` (from the trajectory), `reason` and `components` filled."""
    sql = ("SELECT eval_id, task_id, sample_index, trajectory, completion, reward, components, bucket, "
           "v_reason AS reason FROM eval_samples WHERE eval_id = ?")
    params: list[Any] = [eval_id]
    if bucket:
        sql += " AND bucket = ?"
        params.append(bucket)
    rows = safe_rows(data, sql + " ORDER BY task_id, sample_index", params)
    for row in rows:
        trajectory = as_mapping(row.pop("trajectory", None))
        row["prompt"] = trajectory.get("prompt", "")
        row["turns"] = trajectory.get("turns")
        row["components"] = dict(row.get("components") or {})
    return rows


def bucket_counts(data: DataSource, eval_id: str) -> dict[str, int]:
    rows = safe_rows(data, "SELECT bucket, count(*) AS n FROM eval_samples WHERE eval_id = ? GROUP BY bucket",
                     [eval_id])
    return {str(r["bucket"]): int(r["n"]) for r in rows}


def checkpoints(data: DataSource) -> Rows:
    """Every checkpoint (newest version of each), `metrics` as a dict, in run and step order.

    `heldout_split` is the split of its held-out eval (from that eval's row), else the default one."""
    rows = safe_rows(data, "SELECT c.id, c.run_id, c.step, c.path, c.status, c.promoted, c.metrics, c.note, "
                           "c.created_at, e.split AS heldout_split FROM checkpoints c LEFT JOIN evals e "
                           "ON e.id = c.metrics->>'$.heldout.eval_id' ORDER BY c.run_id, c.step, c.id")
    for row in rows:
        row["metrics"] = as_mapping(row.get("metrics"))
        row["heldout_split"] = row.get("heldout_split") or HELDOUT_SPLIT
    return rows


def gate_record(row: dict[str, Any]) -> dict[str, Any]:
    """The promotion gate's stored decision for a checkpoint row: its reasons and evidence, or {} if never asked.

    A promotion stores the whole record (reasons, baseline and candidate metrics) as the row's note; a refusal
    stores its reasons joined by '; '. A later version (superseded, rolled back) may replace the note, so the
    registry's PROMOTED.json history is the fallback for a checkpoint that was once promoted."""
    for source in (row.get("note"), row.get("metrics")):
        record = as_mapping(source)
        if record.get("reasons"):
            return record
    record = promoted_history(row)
    if record:
        return record
    if row.get("status") == "refused" and row.get("note"):
        return {"reasons": str(row["note"]).split("; ")}
    return {}


def promoted_history(row: dict[str, Any]) -> dict[str, Any]:
    """The evidence of this checkpoint's newest promotion in its registry's PROMOTED.json, or {}."""
    if not row.get("path"):
        return {}
    try:
        state = json.loads((Path(str(row["path"])).parent.parent / PROMOTED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    promotions = [entry for entry in state.get("history") or []
                  if entry.get("action") == "promote" and entry.get("id") == row.get("id")]
    return as_mapping(promotions[-1].get("evidence")) if promotions else {}


def promoted_checkpoint(data: DataSource) -> dict[str, Any] | None:
    rows = [row for row in checkpoints(data) if row.get("promoted")]
    return rows[-1] if rows else None


def init_adapter_default(data: DataSource, model: str, pack: str) -> str:
    """Where a GRPO run starts unless told otherwise: the newest SFT checkpoint of this model and pack, else the
    promoted adapter (if it was trained on them); '' (the base model) when there is neither."""
    rows = safe_rows(data, "SELECT c.path, c.promoted, r.kind FROM checkpoints c LEFT JOIN runs r USING (run_id) "
                           "WHERE c.path IS NOT NULL AND coalesce(c.status, '') <> 'deleted' "
                           "AND coalesce(r.model, ?) = ? AND coalesce(r.pack, ?) = ? "
                           "ORDER BY c.created_at NULLS FIRST, c.step NULLS FIRST, c.id",
                     [model, model, pack, pack])
    chosen = [r for r in rows if r.get("kind") == "sft"] or [r for r in rows if r.get("promoted")]
    return str(chosen[-1]["path"]) if chosen else ""


def audit_labels(data: DataSource, eval_id: str) -> Rows:
    """Labels in the order they were made, so a later label for the same sample wins."""
    return safe_rows(data, "SELECT task_id, sample_index, label, note FROM audits WHERE eval_id = ? "
                           "ORDER BY created_at", [eval_id])


def training_runs(data: DataSource, limit: int = 50) -> Rows:
    """SFT and GRPO runs, newest first."""
    marks = ", ".join("?" for _ in STAGES)
    return safe_rows(data, f"SELECT run_id, kind, status, started_at FROM runs WHERE kind IN ({marks}) "
                           f"ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT {int(limit)}", list(STAGES))


def run_history(data: DataSource, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    """A run's stored (step, metrics) in event order: its StepMetrics and CheckpointSaved events, as the
    live charts received them."""
    rows = safe_rows(data, "SELECT payload FROM events WHERE run_id = ? AND type IN (?, ?) ORDER BY seq",
                     [run_id, StepMetrics.type, CheckpointSaved.type])
    history = []
    for row in rows:
        payload = as_mapping(row.get("payload"))
        if isinstance(payload.get("step"), int):
            history.append((payload["step"], as_mapping(payload.get("metrics"))))
    return history


def run_rollouts(data: DataSource, run_id: str, limit: int = 100) -> Rows:
    """A run's latest scored rollouts, oldest first (the order the live stream received them)."""
    rows = safe_rows(data, "SELECT step, task_id, sample_index, completion, reward, bucket, v_reason AS reason "
                           "FROM rollouts WHERE run_id = ? ORDER BY step DESC, created_at DESC "
                           f"LIMIT {int(limit)}", [run_id])
    return rows[::-1]


def flywheel_trends(data: DataSource) -> tuple[list[Any], list[Any], int | None]:
    """The flywheel's adapter versions oldest first (appliance.flywheel.trends), each one's lightest fix, and
    the row of the newest known version (the one `appliance trajectories triage` recommends for); a store
    without the flywheel's views yet has none."""
    from appliance.flywheel.trends import failure_modes_over_time, flywheel_fix, newest_per_pack

    try:
        adapters = failure_modes_over_time(data)
    except Exception as error:  # noqa: BLE001 - DuckDB raises several kinds for a missing view
        if "does not exist" in str(error) or "not found" in str(error).lower():
            return [], [], None
        raise
    fixes = [flywheel_fix(data, adapter) for adapter in adapters]
    newest = newest_per_pack(adapters)
    return adapters, fixes, (max(adapters.index(adapter) for adapter in newest) if newest else None)


# --- packs and the host -----------------------------------------------------------


def when(value: Any) -> str:
    """A timestamp as local 'YYYY-MM-DD HH:MM' (DuckDB returns aware datetimes)."""
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M")
    return "" if value is None else str(value)[:16]


def list_packs(root: str | os.PathLike[str] = "tasks") -> list[str]:
    """Pack folders (those holding a pack.toml) under `root`, by name."""
    base = Path(root)
    if not base.is_dir():
        return []
    return sorted(p.parent.name for p in base.glob("*/pack.toml"))


def _split_files(root: str | os.PathLike[str], pack: str) -> dict[str, Path] | None:
    """Split name → its JSONL file, from the pack's manifest alone (no pack load); None if unreadable."""
    import tomllib

    folder = Path(root) / pack
    try:
        manifest = tomllib.loads((folder / "pack.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {split: folder / file_name for split, file_name in manifest.get("splits", {}).items()}


def pack_splits(root: str | os.PathLike[str], pack: str) -> list[str]:
    """The splits of a pack's manifest an eval may use (all but the training pools); ['val'] if unreadable."""
    splits = [name for name in _split_files(root, pack) or {} if name not in TRAIN_SPLITS]
    return splits or ["val"]


def split_sizes(root: str | os.PathLike[str], pack: str) -> dict[str, int]:
    """Tasks per split of a pack (its JSONL lines, counted without loading the pack); {} if unreadable."""
    try:
        return {split: sum(1 for line in path.open(encoding="utf-8") if line.strip())
                for split, path in (_split_files(root, pack) or {}).items()}
    except OSError:
        return {}


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
