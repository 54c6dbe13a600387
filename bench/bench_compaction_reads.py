"""Reads during compaction: does a query ever count a run's rows wrong while the run is compacted?

One thread appends 4 rollouts and compacts the run, over and over; another counts the run's rows
as fast as it can, either through `Workspace.query` (which holds the workspace's shared lock) or
through a plain connection over the same views (no lock, as an outside `duckdb` reader). A count
is wrong when it is not a multiple of 4, has duplicates, or is below what was there at the start.
A third mode calls DuckDB's `glob()` on the run's folder and counts listings that found no file.

Prints `name: value` lines. Session 23 found `unlocked_wrong_counts` > 0 (DuckDB lists a folder,
then looks each name up by path, so a listing that straddles the swap finds none of the old names).
Run: .venv/bin/python bench/bench_compaction_reads.py [--rounds 1500]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from appliance.store import Workspace  # noqa: E402

COUNT_SQL = "SELECT count(*), count(DISTINCT (step, sample_index)) FROM rollouts"
FIRST_ROWS = 120


def rollouts(step: int) -> list[dict]:
    return [{"run_id": "r1", "step": step, "sample_index": i, "task_id": f"t{i}", "reward": 1.0} for i in range(4)]


def read_while_compacting(ws: Workspace, rounds: int, read: Callable[[], bool]) -> tuple[int, int]:
    """(reads, wrong reads) while `rounds` append-then-compact cycles run."""
    reads, wrong, stop = [0], [0], threading.Event()

    def loop() -> None:
        while not stop.is_set():
            reads[0] += 1
            wrong[0] += not read()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        for round_ in range(rounds):
            ws.append("rollouts", rollouts(10_000 + round_))
            ws.compact("rollouts", "r1")
    finally:
        stop.set()
        thread.join()
    return reads[0], wrong[0]


def counted_right(rows: tuple[int, int]) -> bool:
    total, distinct = rows
    return total == distinct and total % 4 == 0 and total >= FIRST_ROWS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1500)
    args = parser.parse_args()
    for mode in ("locked", "unlocked", "glob"):
        root = Path(tempfile.mkdtemp()) / "runs"
        ws = Workspace.open(root)
        for step in range(FIRST_ROWS // 4):
            ws.append("rollouts", rollouts(step))
        reader = Workspace.open(root)
        con = reader.connect()
        run_glob = str(root / "data" / "rollouts" / "run_id=r1" / "*.parquet")

        def unlocked() -> bool:
            try:
                return counted_right(con.execute(COUNT_SQL).fetchone())
            except Exception:  # a vanished part: an error, not a wrong count
                return True

        read = {"locked": lambda: counted_right(reader.query(COUNT_SQL)[1][0]), "unlocked": unlocked,
                "glob": lambda: bool(con.execute(f"SELECT file FROM glob('{run_glob}')").fetchall())}[mode]
        reads, wrong = read_while_compacting(ws, args.rounds, read)
        print(f"{mode}_reads: {reads}")
        print(f"{mode}_wrong_counts: {wrong}" if mode != "glob" else f"glob_empty_listings: {wrong}")
        reader.close()
        ws.close()


if __name__ == "__main__":
    main()
