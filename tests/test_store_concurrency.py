"""Run store with real processes: a live writer and readers, a SIGKILLed writer, a read-write lock holder."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from appliance.errors import StoreError
from appliance.store import TABLES, Workspace

REPO = Path(__file__).resolve().parents[1]
GROUP = 64

# Appends steps of 64 rollouts and prints each step number after its append returned.
WRITER = textwrap.dedent(f"""
    import sys
    from appliance.store import Workspace
    root, run_id, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    writer = Workspace.open(root).writer(run_id)
    rows = [{{"task_id": f"t{{i % 8}}", "sample_index": i, "prompt": "Email Bob the Q3 numbers",
              "completion": '{{"name": "send_email", "arguments": {{"to": "bob"}}}}', "reward": i / 64,
              "components": {{"right_tool": 1.0}}, "v_bucket": "success"}} for i in range({GROUP})]
    written = 0
    while steps == 0 or written < steps:
        step = writer.write_step(rows)
        writer.event("step_metrics", {{"step": step}})
        print(step, flush=True)
        written += 1
""")


def start_writer(root: Path, run_id: str, steps: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(root), run_id, str(steps)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def full_steps_only(count_rows: list[tuple]) -> bool:
    return all(count == GROUP for _, count in count_rows)


def test_readers_see_every_completed_step_while_a_writer_process_appends(tmp_path):
    root = tmp_path / "runs"
    ws = Workspace.open(root)
    writer = start_writer(root, "live", steps=40)
    held = duckdb.connect(str(ws.db_path), read_only=True)  # stays open the whole time
    seen_api, seen_file = 0, 0
    for line in writer.stdout:
        completed = (int(line) + 1) * GROUP
        [(api_count,)] = ws.query("SELECT count(*) FROM rollouts")[1]
        [(file_count,)] = held.execute("SELECT count(*) FROM rollouts").fetchall()
        with duckdb.connect(str(ws.db_path), read_only=True) as fresh:
            per_step = fresh.execute("SELECT step, count(*) FROM rollouts GROUP BY step").fetchall()
        assert api_count % GROUP == 0 and file_count % GROUP == 0
        assert api_count >= completed and file_count >= completed, "a completed step was not visible"
        assert api_count >= seen_api and file_count >= seen_file, "a reader saw rows disappear"
        assert full_steps_only(per_step)
        seen_api, seen_file = api_count, file_count
    assert writer.wait(timeout=60) == 0, writer.stderr.read()
    assert ws.query("SELECT count(*), count(DISTINCT step) FROM rollouts")[1] == [(40 * GROUP, 40)]
    held.close()


def kill_writer_mid_run(root: Path, run_id: str, delay_s: float) -> tuple[list[int], bool]:
    """Start a writer, SIGKILL it after a few steps; return the steps it reported and whether it died mid-write."""
    writer = start_writer(root, run_id, steps=0)
    reported = [int(writer.stdout.readline()) for _ in range(3)]
    time.sleep(delay_s)  # land the kill at different points inside an append
    os.kill(writer.pid, signal.SIGKILL)
    reported += [int(line) for line in writer.stdout.read().split()]
    assert writer.wait(timeout=30) == -signal.SIGKILL
    died_mid_write = any(p.name.endswith(".tmp") for p in (root / "data").rglob("*"))
    return reported, died_mid_write


def assert_store_intact(root: Path, last_reported_step: int) -> int:
    ws = Workspace.open(root)  # also sweeps the killed writer's temp files
    [(count, steps, last)] = ws.query("SELECT count(*), count(DISTINCT step), max(step) FROM rollouts")[1]
    assert count % GROUP == 0 and last >= last_reported_step, "a reported step was lost"
    assert steps == last + 1, "steps are not contiguous"
    assert full_steps_only(ws.query("SELECT step, count(*) FROM rollouts GROUP BY step")[1])
    for table in TABLES:
        ws.query(f"SELECT * FROM {table}")
    with duckdb.connect(str(ws.db_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM rollouts").fetchone() == (count,)
    assert not [p for p in (root / "data").rglob("*") if p.name.endswith(".tmp")]
    ws.close()
    return last


def test_sigkilled_writers_lose_no_reported_step_and_leave_everything_readable(tmp_path):
    """Kill a writer (resuming the same run each time) until one kill has landed inside an append."""
    root = tmp_path / "runs"
    Workspace.open(root)
    delays, mid_write_kills, last = [0.0, 0.004, 0.009, 0.013, 0.017, 0.021, 0.027, 0.031, 0.002, 0.011], 0, -1
    for attempt, delay in enumerate(delays):
        reported, died_mid_write = kill_writer_mid_run(root, "doomed", delay)
        assert reported[0] == last + 1, "the restarted writer did not resume after the last stored step"
        last = assert_store_intact(root, reported[-1])
        mid_write_kills += died_mid_write
        if mid_write_kills and attempt >= 2:
            break
    assert mid_write_kills, "no kill landed inside an append; the test did not exercise that case"


def test_database_held_read_write_by_another_process_gives_an_actionable_error(tmp_path):
    root = tmp_path / "runs"
    ws = Workspace.open(root)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; con = duckdb.connect(sys.argv[1]); "
                               "print('ready', flush=True); sys.stdin.read()", str(ws.db_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match="read-write in another program"):
            Workspace.open(root)
        ws.append("events", [{"run_id": "r", "seq": 0, "type": "still_writable"}])  # writers never need the file
        assert ws.query("SELECT type FROM events")[1] == [("still_writable",)]
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
