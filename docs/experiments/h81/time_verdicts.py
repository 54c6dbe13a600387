"""The time verdicts an eval's first answers state, against the check SFT's target would state (session 45, H81).

    .venv/bin/python docs/experiments/h81/time_verdicts.py <workspace> <eval id> [--each] [--tasks-root <root>]

Counts, over the split's calendar requests that name a clock time: how many answers state a time, how many
stated verdicts are wrong for the time written, and how many stated times are not the request's; `--each` prints
every such answer's check beside the one SFT teaches.
"""
from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import duckdb

from appliance.packs.pack import load_pack
from appliance.train.checks import meeting_hours, policy_check, time_verdict

TIME = re.compile(r"(\d\d):(\d\d) (inside|outside)")
COUNTS = ("requests with a time", "answers stating a time", "answers that call",
          "wrong verdicts for the time written", "times not the request's")


def main(workspace: str, eval_id: str, each: bool, tasks_root: str | None) -> None:
    root = Path(tasks_root) if tasks_root else Path(__file__).resolve().parents[3] / "tasks"
    store = duckdb.connect(str(Path(workspace) / "appliance.duckdb"), read_only=True)
    pack_name, split = store.execute("select pack, split from evals where id = ?", [eval_id]).fetchone()
    pack = load_pack(root / pack_name)
    hours = meeting_hours(pack)
    tasks = {task.id: task for task in pack.tasks(split)}
    rows = store.execute("select task_id, completion, bucket from eval_samples where eval_id = ? and sample_index = 0",
                         [eval_id]).fetchall()
    counts: collections.Counter[str] = collections.Counter()
    for task_id, completion, bucket in rows:
        taught = {f"{h}:{m}": verdict for h, m, verdict in TIME.findall(policy_check(tasks[task_id], [], hours))}
        check = completion.partition("</think>")[0] if completion.startswith("<think>") else ""
        stated = TIME.findall(check)
        counts["requests with a time"] += bool(taught)
        counts["answers stating a time"] += bool(taught and stated)
        counts["answers that call"] += bool(taught) and "{" in completion
        for hour, minute, verdict in stated:
            minutes = int(hour) * 60 + int(minute)
            counts["wrong verdicts for the time written"] += verdict != time_verdict(minutes, hours)
            counts["times not the request's"] += f"{hour}:{minute}" not in taught
        if each and (taught or stated):
            print(f"{task_id} {bucket}: {check[7:80]!r}, taught {taught}, calls: {'{' in completion}")
    for name in COUNTS:
        print(f"{name}: {counts[name]}")


if __name__ == "__main__":
    options = sys.argv[3:]
    root = options[options.index("--tasks-root") + 1] if "--tasks-root" in options else None
    main(sys.argv[1], sys.argv[2], "--each" in options, root)
