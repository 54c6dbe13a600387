"""Micro-benchmark of the workplace world: fresh world + replay + state comparison.

Prints `name: value` lines. The workload is WorkBench's own ground-truth
answers when /work/shared/datasets/workbench is present (the 416 single-call
tasks, plus the multi-call ones), otherwise a small built-in set of calls.
Each verdict is what the verifier does per rollout: a fresh world, replay of
the predicted calls, and a comparison against the (cached) expected world.

    .venv/bin/python bench/bench_world.py
"""
from __future__ import annotations

import ast
import csv
import time
from pathlib import Path

from appliance.task import ToolCall
from appliance.world import World, parse_workbench_call, replay
from appliance.world.base import load_base

ANSWERS_DIR = Path("/work/shared/datasets/workbench/data/processed/queries_and_answers")
BUILT_IN = [
    ['email.delete_email.func(email_id="00000479")'],
    ['email.send_email.func(recipient="leila.azizi@atlas.com", subject="Hi", body="See you")'],
    ['calendar.create_event.func(event_name="Sync", participant_email="raj.patel@atlas.com", event_start="2023-12-01 13:00:00", duration="30")'],
    ['customer_relationship_manager.update_customer.func(customer_id="00000189", field="status", new_value="Won")'],
    ['analytics.create_plot.func(time_min="2023-11-01", time_max="2023-11-29", value_to_plot="total_visits", plot_type="bar")'],
    ['project_management.update_task.func(task_id="00000149", field="list_name", new_value="In Review")'],
]


def load_answers() -> list[list[ToolCall]]:
    if not ANSWERS_DIR.is_dir():
        return [[parse_workbench_call(t) for t in answer] for answer in BUILT_IN]
    answers = []
    for path in sorted(ANSWERS_DIR.glob("*_queries_and_answers.csv")):
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                answers.append([parse_workbench_call(t) for t in ast.literal_eval(row["answer"])])
    return answers


def verdicts_per_second(tasks: list[list[ToolCall]], seconds: float = 1.5) -> float:
    """Fresh world + replay + compare against the cached expected world, as fast as possible."""
    expected = [replay(calls) for calls in tasks]
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for calls, target in zip(tasks, expected):
            world = World.fresh()
            for call in calls:
                world.call(call)
            world.same_state(target)
        done += len(tasks)
    return done / (time.perf_counter() - start)


def fresh_per_second(seconds: float = 0.5) -> float:
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10_000):
            World.fresh()
        done += 10_000
    return done / (time.perf_counter() - start)


def main() -> None:
    load_base.cache_clear()
    start = time.perf_counter()
    load_base()
    print(f"base_load_ms: {(time.perf_counter() - start) * 1000:.1f}")
    answers = load_answers()
    single = [a for a in answers if len(a) == 1]
    multi = [a for a in answers if len(a) > 1]
    print(f"tasks_single_call: {len(single)}")
    print(f"world_fresh_per_s: {fresh_per_second():.0f}")
    rate = verdicts_per_second(single)
    print(f"single_call_verdicts_per_s: {rate:.0f}")
    print(f"single_call_verdict_us: {1e6 / rate:.1f}")
    if multi:
        print(f"tasks_multi_call: {len(multi)}")
        print(f"multi_call_verdicts_per_s: {verdicts_per_second(multi):.0f}")
    empty = [a for a in answers if not a]
    if empty:
        print(f"no_action_verdicts_per_s: {verdicts_per_second(empty, 0.5):.0f}")


if __name__ == "__main__":
    main()
