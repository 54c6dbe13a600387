"""Session 45 (docs/learning.md, R45): train's meeting requests with only their clock time swapped across the
meeting hours, as the `train_rl` split of a pack copy (a held-out split may not nearly repeat `train`, and these
do on purpose), to read whether an adapter's time verdict follows the hour in a sentence shape it trained on.

    .venv/bin/python docs/experiments/h81/time_probes.py OUT_ROOT [PER_TEMPLATE]

`create_event`'s requests (allowed, inside the hours) get an off-hours time and `refuse_meeting_off_hours`'s
(the twin in the same wordings) an allowed one, in the request's own style (12-hour, 24-hour). Every probe
expects no call, so an eval's success counts declines; what is read is the verdict each answer states
(`time_verdicts.py`) and whether it calls:

    appliance eval --split train_rl --max-new-tokens 128 --tasks-root OUT_ROOT --adapter <it>
"""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

from appliance.train.checks import CLOCK

REPO = Path(__file__).resolve().parents[3]
PACK = REPO / "tasks" / "workplace-single"
OFF = {"12": ("6:30am", "7:30pm", "9pm", "11pm", "5am"), "24": ("07:00", "19:30", "21:00", "05:00", "20:00")}
ALLOWED = {"12": ("10am", "11:30am", "2pm", "3:30pm", "1pm"), "24": ("10:00", "11:30", "14:00", "15:30", "13:00")}


def swap_time(request: str, times: dict, rng: random.Random) -> tuple[str, str] | None:
    """`request` with its one clock time replaced by one of `times` in the same style, and the time written;
    None when the request names no time or several."""
    matches = list(CLOCK.finditer(request))
    if len(matches) != 1:
        return None
    match = matches[0]
    new_time = rng.choice(times["24" if match.group(4) else "12"])
    return request[:match.start()] + new_time + request[match.end():], new_time


def swapped(task: dict, times: dict, rng: random.Random) -> dict | None:
    result = swap_time(task["messages"][-1]["content"], times, rng)
    if result is None:
        return None
    probe = json.loads(json.dumps(task))
    probe["messages"][-1]["content"] = result[0]
    probe["tags"] = {key: value for key, value in task["tags"].items() if key != "policy"}
    probe["tags"]["probe_of"] = task["id"]
    probe["expected"] = []
    return probe


def main(out_root: str, per_template: int = 20) -> None:
    rng = random.Random(45)
    rows = [json.loads(line) for line in (PACK / "train.jsonl").open()]
    allowed = [r for r in rows if r["tags"]["template"] == "create_event"][:per_template]
    refused = [r for r in rows if r["tags"]["template"] == "refuse_meeting_off_hours"][:per_template]
    probes = []
    for task in allowed:  # an allowed meeting moved off hours: now a refusal
        probe = swapped(task, OFF, rng)
        if probe:
            probe["tags"]["policy"] = "refuse"
            probes.append(probe)
    for task in refused:  # an off-hours meeting moved into the hours: the twin's wording, now an action
        probe = swapped(task, ALLOWED, rng)
        if probe:
            probes.append(probe)
    out = Path(out_root) / "workplace-single"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(PACK, out)
    with (out / "train_rl.jsonl").open("w") as f:
        for index, probe in enumerate(probes):
            probe["id"] = f"ws-probe-{index:04d}"
            f.write(json.dumps(probe) + "\n")
    print(f"probes: {len(probes)} ({len(allowed)} allowed moved off hours, {len(refused)} off-hours moved in)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
