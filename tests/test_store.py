"""Run store: schema, validation, versioned rows, migrations, compaction (single process)."""
from __future__ import annotations

import shutil
import threading
from datetime import datetime, timezone

import duckdb
import pytest

from appliance.errors import StoreError
from appliance.store import SCHEMA_VERSION, TABLES, Workspace
from appliance.store import migrations
from appliance.task import Verdict


def _verdict(bucket: str = "wrong_arguments") -> Verdict:
    return Verdict(parse_ok=True, schema_ok=True, tool_ok=True, arguments_ok=False, arguments_fraction=0.5,
                   executed_ok=False, state_match=False, unsafe=False, unsafe_rule=None, bucket=bucket,
                   reason="argument 'time' differs", n_calls=1)


def rollout(i: int, bucket: str = "wrong_arguments") -> dict:
    return {"task_id": f"task-{i % 7}", "sample_index": i, "prompt": "Book a room for Friday at 10",
            "completion": '{"name": "book_room", "arguments": {"day": "friday"}}', "prompt_tokens": 30,
            "completion_tokens": 12, "latency_s": 0.2, "reward": 0.3,
            "components": {"valid_json": 1.0, "right_tool": 1.0, "exact": 0.0}, **_verdict(bucket).to_row()}


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace.open(tmp_path / "runs")
    yield workspace
    workspace.close()


def test_empty_workspace_has_every_table_with_zero_rows(ws):
    assert ws.db_path.exists()
    for table in TABLES:
        columns, rows = ws.query(f"SELECT * FROM {table}")
        assert rows == []
        assert columns == list(TABLES[table].column_names)
    _, rows = ws.query("SELECT components['right_tool'], payload->>'$.x' FROM rollouts, events")
    assert rows == []
    with duckdb.connect(str(ws.db_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM eval_samples").fetchone() == (0,)
        assert con.execute("SELECT version FROM schema_version").fetchone() == (SCHEMA_VERSION,)


def test_rollouts_keep_components_by_name_and_verdict_fields(ws):
    ws.append("rollouts", [{**rollout(i), "run_id": "r1", "step": 0} for i in range(3)]
              + [{**rollout(9, "success"), "run_id": "r1", "step": 1, "bucket": None}])
    _, rows = ws.query("SELECT step, components['right_tool'], components['exact'], v_arguments_fraction, "
                       "v_unsafe_rule, bucket, v_n_calls FROM rollouts ORDER BY step, sample_index")
    assert rows[0] == (0, 1.0, 0.0, 0.5, None, "wrong_arguments", 1)
    assert rows[-1][5] == "success"  # bucket defaults to v_bucket
    _, [(created,)] = ws.query("SELECT min(created_at) FROM rollouts")
    assert created is not None


def test_append_rejects_unknown_table_column_missing_key_and_bad_type(ws):
    with pytest.raises(StoreError, match="Unknown table"):
        ws.append("nope", [{"run_id": "r"}])
    with pytest.raises(StoreError, match="no column.*rewrd"):
        ws.append("rollouts", [{"run_id": "r", "step": 0, "rewrd": 1.0}])
    with pytest.raises(StoreError, match="needs a value for step"):
        ws.append("rollouts", [{"run_id": "r", "step": 0}, {"run_id": "r"}])
    with pytest.raises(StoreError, match="rollouts.reward"):
        ws.append("rollouts", [{"run_id": "r", "step": 0, "reward": "high"}])
    assert ws.query("SELECT count(*) FROM rollouts")[1] == [(0,)]


def test_versioned_rows_show_newest_value_of_each_column(ws):
    ws.append("runs", [{"run_id": "r1", "kind": "grpo", "status": "running", "config": {"lr": 2e-5},
                        "started_at": 1_700_000_000.0}])
    ws.append("runs", [{"run_id": "r1", "status": "finished", "finished_at": "2024-01-01T00:00:00+00:00"}])
    _, rows = ws.query("SELECT kind, status, (config->>'$.lr')::DOUBLE, started_at, finished_at FROM runs")
    assert rows == [("grpo", "finished", 2e-5, datetime.fromtimestamp(1_700_000_000, timezone.utc),
                     datetime(2024, 1, 1, tzinfo=timezone.utc))]
    ws.append("checkpoints", [{"id": "c1", "run_id": "r1", "promoted": True},
                              {"id": "c2", "run_id": "r1", "promoted": False}])
    ws.append("checkpoints", [{"id": "c1", "run_id": "r1", "promoted": False, "status": "rolled_back"},
                              {"id": "c2", "run_id": "r1", "promoted": True, "status": "promoted"}])
    _, rows = ws.query("SELECT id, status FROM checkpoints WHERE promoted")
    assert rows == [("c2", "promoted")]


def test_eval_tables_store_trajectories_and_audits(ws):
    eval_id = ws.new_id("eval")
    ws.append("evals", [{"id": eval_id, "model": "smollm2", "pack": "workbench", "split": "heldout", "k": 2,
                         "backend": "hf", "status": "running"}])
    trajectory = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{}"}]
    ws.append("eval_samples", [{"eval_id": eval_id, "task_id": "t1", "sample_index": s, "trajectory": trajectory,
                                "reward": 1.0, "components": {"exact": 1.0}, **_verdict("success").to_row()}
                               for s in range(2)])
    ws.append("evals", [{"id": eval_id, "status": "finished", "success_rate": 1.0, "metrics": {"success": 1.0}}])
    ws.append("audits", [{"eval_id": eval_id, "task_id": "t1", "sample_index": 0, "label": "agree"}])
    _, rows = ws.query("SELECT e.status, e.k, e.metrics->>'$.success', json_array_length(s.trajectory), a.label "
                       "FROM evals e JOIN eval_samples s ON s.eval_id = e.id "
                       "LEFT JOIN audits a USING (eval_id, task_id, sample_index) ORDER BY s.sample_index")
    assert rows == [("finished", 2, "1.0", 2, "agree"), ("finished", 2, "1.0", 2, None)]


def test_one_append_spanning_two_runs_lands_in_each_run_folder(ws):
    ws.append("events", [{"run_id": "a", "seq": 0, "type": "x"}, {"run_id": "b/../evil", "seq": 0, "type": "y"}])
    _, rows = ws.query("SELECT run_id, type FROM events ORDER BY run_id")
    assert rows == [("a", "x"), ("b/../evil", "y")]
    folders = sorted(p.name for p in (ws.data_dir / "events").iterdir())
    assert folders == ["run_id=_seed", "run_id=a", "run_id=b%2F..%2Fevil"]


def test_run_writer_numbers_steps_and_events_and_resumes(ws):
    writer = ws.writer("r1")
    assert writer.write_step([rollout(i) for i in range(4)]) == 0
    assert writer.write_step([rollout(i) for i in range(4)]) == 1
    assert writer.event("step_metrics", {"loss": 0.5}) == 0
    writer.alarm("zero_variance", "all rewards equal in 3 groups", step=1)
    resumed = ws.writer("r1")
    assert (resumed.last_step, resumed.last_seq) == (1, 0)
    assert resumed.write_step([rollout(0)]) == 2
    _, rows = ws.query("SELECT step, count(*) FROM rollouts GROUP BY step ORDER BY step")
    assert rows == [(0, 4), (1, 4), (2, 1)]
    assert ws.query("SELECT kind, step FROM alarms")[1] == [("zero_variance", 1)]


def test_compaction_merges_parts_into_one_file_without_changing_rows(ws):
    writer = ws.writer("r1")
    for _ in range(5):
        writer.write_step([rollout(i) for i in range(8)])
    before = ws.query("SELECT step, sample_index, reward FROM rollouts ORDER BY ALL")[1]
    assert ws.compact("rollouts", "r1") == 5
    assert len(list((ws.data_dir / "rollouts" / "run_id=r1").glob("*.parquet"))) == 1
    assert ws.query("SELECT step, sample_index, reward FROM rollouts ORDER BY ALL")[1] == before
    assert ws.compact("rollouts", "r1") == 0
    writer.write_step([rollout(0)])
    assert ws.query("SELECT count(*) FROM rollouts")[1] == [(41,)]
    assert not any(ws.tmp_dir.iterdir())


def test_queries_during_compaction_never_see_duplicates_or_gaps(ws, tmp_path):
    for step in range(30):
        ws.append("rollouts", [{**rollout(i), "run_id": "r1", "step": step} for i in range(4)])
    reader = Workspace.open(ws.root)
    counts, stop = [], threading.Event()

    def read_loop():
        sql = "SELECT count(*), count(DISTINCT (step, sample_index)) FROM rollouts"
        while not stop.is_set():
            counts.append(reader.query(sql)[1][0])

    thread = threading.Thread(target=read_loop)
    thread.start()
    try:
        for round_ in range(6):
            ws.append("rollouts", [{**rollout(i), "run_id": "r1", "step": 100 + round_} for i in range(4)])
            ws.compact("rollouts", "r1")
    finally:
        stop.set()
        thread.join()
    reader.close()
    assert counts, "the reader thread never completed a query"
    bad = [(total, distinct) for total, distinct in counts
           if not (total == distinct and total % 4 == 0 and 120 <= total <= 144)]
    assert not bad, f"{len(bad)} of {len(counts)} queries saw duplicates or gaps: (count, distinct) {bad[:5]}"


def test_old_schema_version_is_migrated(ws):
    ws.append("runs", [{"run_id": "r1", "status": "running"}])
    # Make it look like v0: a views file without schema_version, and no seed parts.
    ws.db_path.unlink()
    with duckdb.connect(str(ws.db_path)) as con:
        con.execute("CREATE VIEW runs AS SELECT 1 AS run_id")
    for table in TABLES:
        shutil.rmtree(migrations.seed_folder(ws.data_dir, table))
    assert migrations.read_recorded_version(ws.db_path) == (0, "")

    upgraded = Workspace.open(ws.root)
    assert migrations.read_recorded_version(ws.db_path) == (SCHEMA_VERSION, str(ws.root))
    assert upgraded.query("SELECT run_id, status FROM runs")[1] == [("r1", "running")]
    assert upgraded.query("SELECT count(*) FROM rollouts")[1] == [(0,)]


def test_newer_schema_version_is_refused_with_one_sentence(ws):
    with duckdb.connect(str(ws.db_path)) as con:
        con.execute("UPDATE schema_version SET version = ?", [SCHEMA_VERSION + 1])
    with pytest.raises(StoreError, match="upgrade the appliance") as caught:
        Workspace.open(ws.root)
    assert str(caught.value).count(". ") == 0


def test_moved_workspace_rebuilds_views_for_its_new_folder(ws, tmp_path):
    ws.append("events", [{"run_id": "r1", "seq": 0, "type": "run_started"}])
    moved = tmp_path / "elsewhere"
    shutil.move(ws.root, moved)
    reopened = Workspace.open(moved)
    with duckdb.connect(str(reopened.db_path), read_only=True) as con:
        assert con.execute("SELECT type FROM events").fetchall() == [("run_started",)]
        assert con.execute("SELECT root FROM schema_version").fetchone() == (str(moved),)


def test_rebuilding_the_views_file_does_not_disturb_an_open_reader(ws):
    ws.append("events", [{"run_id": "r1", "seq": 0, "type": "a"}])
    with duckdb.connect(str(ws.db_path), read_only=True) as held:
        migrations.build_database(ws.root, ws.data_dir, ws.db_path)
        ws.append("events", [{"run_id": "r1", "seq": 1, "type": "b"}])
        assert held.execute("SELECT count(*) FROM events").fetchone() == (2,)
        with duckdb.connect(str(ws.db_path), read_only=True) as fresh:
            assert fresh.execute("SELECT count(*) FROM events").fetchone() == (2,)


def test_stale_temp_files_are_ignored_by_readers_and_removed_on_open(ws):
    ws.append("events", [{"run_id": "r1", "seq": 0, "type": "a"}])
    stale = ws.data_dir / "events" / "run_id=r1" / ".999999999-deadbeef.tmp"
    stale.write_bytes(b"half a parquet file")
    assert ws.query("SELECT count(*) FROM events")[1] == [(1,)]
    Workspace.open(ws.root)
    assert not stale.exists()



def test_upgrade_rewrites_parts_written_with_fewer_columns(ws):
    import pyarrow as pa
    import pyarrow.parquet as pq
    old_part = ws.data_dir / "alarms" / "run_id=old"
    old_part.mkdir()
    pq.write_table(pa.table({"run_id": ["old"], "kind": ["regression"]}), old_part / "0001-old.parquet")
    with duckdb.connect(str(ws.db_path)) as con:
        con.execute("UPDATE schema_version SET version = 0")
    upgraded = Workspace.open(ws.root)
    assert upgraded.query("SELECT run_id, kind, severity FROM alarms")[1] == [("old", "regression", None)]
    [part] = old_part.glob("*.parquet")
    assert pq.read_schema(part).names == list(TABLES["alarms"].column_names)


def test_any_id_round_trips_through_its_folder_name_as_text(ws):
    ids = ["123", "_seed", ".hidden", "é run", "x=y", "a+b", "%41", "o'neil", "a/b\\c"]
    ws.append("events", [{"run_id": run_id, "seq": 0, "type": "t"} for run_id in ids])
    assert sorted(ws.query("SELECT run_id FROM events")[1]) == sorted((run_id,) for run_id in ids)
    assert ws.query("SELECT DISTINCT typeof(run_id) FROM events")[1] == [("VARCHAR",)]
    for run_id in ids:
        assert ws.query("SELECT count(*) FROM events WHERE run_id = ?", [run_id])[1] == [(1,)]


def test_run_writer_compacts_every_n_steps_and_on_finish(ws):
    writer = ws.writer("r1", compact_every=3)
    for _ in range(4):
        writer.write_step([rollout(i) for i in range(2)])
    folder = ws.data_dir / "rollouts" / "run_id=r1"
    assert len(list(folder.glob("*.parquet"))) == 2  # steps 0-2 merged, step 3 on its own
    writer.event("run_finished")
    writer.finish()
    assert len(list(folder.glob("*.parquet"))) == 1
    assert ws.query("SELECT status, finished_at IS NOT NULL FROM runs")[1] == [("finished", True)]
    assert ws.query("SELECT count(*), count(DISTINCT step) FROM rollouts")[1] == [(8, 4)]


def test_append_accepts_an_arrow_table_and_checks_it(ws):
    import pyarrow as pa
    data = pa.table({"run_id": ["a", "a", "b"], "step": [0, 0, 1], "reward": [1, 0, 1],
                     "v_bucket": ["success", "missed_call", "success"]})
    ws.append("rollouts", data)
    assert ws.query("SELECT run_id, step, reward, bucket FROM rollouts ORDER BY ALL")[1] == [
        ("a", 0, 0.0, "missed_call"), ("a", 0, 1.0, "success"), ("b", 1, 1.0, "success")]
    with pytest.raises(StoreError, match="no column"):
        ws.append("rollouts", pa.table({"run_id": ["a"], "step": [0], "oops": [1]}))
    with pytest.raises(StoreError, match="needs a value for run_id"):
        ws.append("rollouts", pa.table({"step": [0]}))
