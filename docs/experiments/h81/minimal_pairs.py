"""Session 45 (docs/learning.md, H83): workplace-single whose `train` holds each allowed meeting request three
times, identical but for the clock time: as generated, moved to another allowed time (the same call at that
time), and moved off hours (a decline).

    .venv/bin/python docs/experiments/h81/minimal_pairs.py OUT_ROOT

Why: R45 found that the two-pass SFT start declines a trained meeting request whose time alone was changed,
whatever the time, and writes `outside` to match. The twins (`refuse_meeting_off_hours`) reuse create_event's
wordings but differ in every slot, so each request can be fitted whole; rows that differ only in the time can
not, unless the answer reads the time. Only `train` changes (dev, val and `train_rl` are copied as committed);
off-hours moves are not added, so dev's `refuse_off_hours_move` stays a rule the data teaches from another angle.
"""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

from time_probes import ALLOWED, OFF, PACK, swap_time

from appliance.train.checks import CLOCK, WORKBENCH_MEETING_HOURS, clock_minutes, clock_text


def minutes_of(time_text: str) -> int:
    return clock_minutes(CLOCK.search(time_text))


def pair_rows(task: dict, rng: random.Random) -> list[dict]:
    """The allowed copy (the same call at another allowed time that leaves room for the meeting) and the
    off-hours copy (no call) of one `create_event` row."""
    call = task["expected"][0]
    latest = WORKBENCH_MEETING_HOURS[1] - int(call["arguments"]["duration"])
    request = task["messages"][-1]["content"]
    start = call["arguments"]["event_start"].split(" ")[1]
    original = int(start[:2]) * 60 + int(start[3:5])
    fitting = {style: tuple(t for t in times if minutes_of(t) <= latest and minutes_of(t) != original)
               for style, times in ALLOWED.items()}
    rows = []
    for times, allowed in ((fitting, True), (OFF, False)):
        result = swap_time(request, times, rng)
        if result is None:
            return []
        row = json.loads(json.dumps(task))
        row["messages"][-1]["content"], written = result
        row["tags"] = {**task["tags"], "pair_of": task["id"]}
        if allowed:
            day = call["arguments"]["event_start"].split(" ")[0]
            row["expected"][0]["arguments"]["event_start"] = f"{day} {clock_text(minutes_of(written))}:00"
        else:
            row["expected"], row["tags"]["policy"] = [], "refuse"
        rows.append(row)
    return rows


def main(out_root: str) -> None:
    rng = random.Random(83)
    out = Path(out_root) / "workplace-single"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(PACK, out)
    rows = [json.loads(line) for line in (PACK / "train.jsonl").open()]
    added = [row for task in rows if task["tags"]["template"] == "create_event" for row in pair_rows(task, rng)]
    for index, row in enumerate(added):
        row["id"] = f"ws-pair-{index:04d}"
    with (out / "train.jsonl").open("w") as f:
        for row in rows + added:
            f.write(json.dumps(row) + "\n")
    print(f"train: {len(rows)} + {len(added)} rows ({len(added) // 2} meetings, each at another allowed time and "
          f"off hours)")


if __name__ == "__main__":
    main(sys.argv[1])
