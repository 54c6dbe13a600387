"""Run store benchmarks: ingest rate, step-to-visible latency, and a 1M-rollout aggregate query.

Prints `name: value` lines. Goals (from the store issue): ingest >= 500,000 rollout
rows/s in batches; one GRPO step of 64 rows visible to a reader in < 50 ms; a
reward-by-bucket-and-step query over 1,000,000 rollouts in < 0.1 s (after compaction).
Run: .venv/bin/python bench/bench_store.py [--rows 1000000]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from appliance.store import TABLES, Workspace  # noqa: E402
from appliance.store.rows import to_arrow  # noqa: E402
from appliance.task import BUCKETS  # noqa: E402

TOOLS = ["send_email", "create_event", "search_customers", "update_ticket", "delete_file", "book_room"]
REQUESTS = ["Email {n} the Q{q} numbers", "Book a room for {n} on Friday at {q}pm",
            "Find the customer record for {n}", "Close ticket {q}{q} and notify {n}",
            "Move the sync with {n} to next week"]
NAMES = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hiro"]


def realistic_rollouts(n: int, run_id: str, seed: int = 0) -> list[dict]:
    """Rows shaped like GRPO rollouts: short prompt/completion text, reward breakdown, verdict fields."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        tool, bucket = rng.choice(TOOLS), rng.choice(BUCKETS)
        request = rng.choice(REQUESTS).format(n=rng.choice(NAMES), q=rng.randint(1, 4))
        ok = bucket == "success"
        rows.append({
            "run_id": run_id, "step": 0, "task_id": f"wb-{rng.randint(0, 689):03d}", "sample_index": i % 64,
            "prompt": f"<|system|>You call tools.<|user|>{request}",
            "completion": f'{{"name": "{tool}", "arguments": {{"to": "{rng.choice(NAMES).lower()}"}}}}',
            "prompt_tokens": rng.randint(200, 320), "completion_tokens": rng.randint(10, 48),
            "latency_s": rng.random(), "reward": float(ok),
            "components": {"valid_json": float(bucket != "format_error"), "right_tool": rng.random(),
                           "exact": float(ok)},
            "v_parse_ok": bucket != "format_error", "v_schema_ok": ok, "v_tool_ok": ok, "v_arguments_ok": ok,
            "v_arguments_fraction": rng.random(), "v_executed_ok": ok, "v_state_match": ok,
            "v_unsafe": bucket == "unsafe_action", "v_unsafe_rule": None, "v_bucket": bucket,
            "v_reason": f"bucket {bucket}", "v_n_calls": 1, "advantage": rng.gauss(0, 1),
        })
    return rows


def bench_ingest(ws: Workspace, batch: int, total: int, rounds: int = 3, arrow: bool = False
                 ) -> tuple[float, float]:
    """Best-of-rounds rows/s by wall clock and by this process's CPU time (the second ignores other load)."""
    rows = realistic_rollouts(batch, f"ingest-{batch}-{arrow}")
    table = to_arrow(TABLES["rollouts"], rows)  # for the Arrow path: a table already in the store's types
    best_wall, best_cpu, step = 0.0, 0.0, 0
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(total // batch):
            if arrow:
                ws.append("rollouts", table.set_column(1, "step", pa.array([step] * batch, pa.int64())))
            else:
                for row in rows:
                    row["step"] = step
                ws.append("rollouts", rows)
            step += 1
        written = (total // batch) * batch
        best_wall = max(best_wall, written / (time.perf_counter() - wall))
        best_cpu = max(best_cpu, written / (time.process_time() - cpu))
    return best_wall, best_cpu


def bench_step_visible(ws: Workspace, reader: Workspace, prior_steps: int, samples: int) -> tuple[float, float]:
    """Milliseconds from the start of a 64-row append until a separate reader's query counts it."""
    writer = ws.writer("visible")
    rows = realistic_rollouts(64, "visible", seed=1)
    for _ in range(prior_steps):
        writer.write_step(rows)
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        step = writer.write_step(rows)
        _, [(count,)] = reader.query("SELECT count(*) FROM rollouts WHERE run_id = 'visible' AND step = ?", [step])
        assert count == 64
        timings.append((time.perf_counter() - start) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(0.95 * (len(timings) - 1))]


QUERY = "SELECT step, bucket, avg(reward), count(*) FROM rollouts WHERE run_id = 'big' GROUP BY step, bucket"


def time_query(reader: Workspace, repeats: int = 5) -> float:
    reader.query(QUERY)  # warm the file system cache
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _, rows = reader.query(QUERY)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rollouts stored for the query benchmark")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-store-") as folder:
        ws = Workspace.open(Path(folder) / "runs")
        reader = Workspace.open(ws.root)
        for batch, total in ((10_000, 100_000), (64, 64 * 100)):
            wall, cpu = bench_ingest(ws, batch, total)
            print(f"ingest_rows_per_s_batch_{batch}: {wall:.0f}")
            print(f"ingest_rows_per_cpu_s_batch_{batch}: {cpu:.0f}")
        wall, cpu = bench_ingest(ws, 10_000, 100_000, arrow=True)
        print(f"ingest_rows_per_s_batch_10000_arrow_input: {wall:.0f}")
        print(f"ingest_rows_per_cpu_s_batch_10000_arrow_input: {cpu:.0f}")
        p50, p95 = bench_step_visible(ws, reader, prior_steps=200, samples=50)
        print(f"step64_visible_ms_p50_after_200_steps: {p50:.1f}")
        print(f"step64_visible_ms_p95_after_200_steps: {p95:.1f}")

        rows = realistic_rollouts(10_000, "big", seed=2)
        steps = max(1, args.rows // len(rows))
        for step in range(steps):
            for row in rows:
                row["step"] = step
            ws.append("rollouts", rows)
        print(f"query_rows: {steps * len(rows)}")
        uncompacted = time_query(reader)
        print(f"query_group_by_bucket_step_s_{steps}_parts: {uncompacted:.4f}")
        start = time.perf_counter()
        merged = ws.compact("rollouts", "big")
        print(f"compact_s_{merged}_parts: {time.perf_counter() - start:.2f}")
        compacted = time_query(reader)
        print(f"query_group_by_bucket_step_s_compacted: {compacted:.4f}")
        print(f"query_speedup_from_compaction: {uncompacted / compacted:.2f}")
        print(f"query_group_by_bucket_step_s_all_runs_compacted: "
              f"{time_query_all(reader, ws):.4f}")
        reader.close()
        ws.close()


def time_query_all(reader: Workspace, ws: Workspace) -> float:
    """The same query without the run filter, after compacting every run of the table."""
    ws.compact("rollouts")
    sql = "SELECT step, bucket, avg(reward), count(*) FROM rollouts GROUP BY step, bucket"
    reader.query(sql)
    start = time.perf_counter()
    reader.query(sql)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
