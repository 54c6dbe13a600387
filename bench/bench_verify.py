"""Single-step verification throughput on one core, against a plain json + jsonschema baseline.

A fixed, seeded mix of 10,000 outputs over hand-built WorkBench tasks: exact
calls in all four accepted shapes, case variations, wrong arguments, wrong
tools, prose answers, and 10% adversarial outputs (broken JSON, deep nesting,
NaN, duplicate keys, huge integers, oversized text, wrong types). Verification
includes parsing, schema checks, unsafe rules, world replay and state
comparison.

Times are CPU seconds of this process (time.process_time), so other work on a
shared machine disturbs them less than wall time would. Prints `name: value` lines:
  verify_per_s                 verdicts per second, caches as in real use (fresh verifier)
  verify_uncached_per_s        the same with the replay cache disabled
  json_plus_jsonschema_per_s   json.loads + a precompiled jsonschema check, same outputs
  ratio_verify_to_baseline     verify_per_s / json_plus_jsonschema_per_s

Run: .venv/bin/python bench/bench_verify.py [--n 10000]
"""
from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter

from jsonschema import Draft202012Validator

from appliance import verify as verify_module
from appliance.task import Task, ToolCall
from appliance.verify import Verifier
from appliance.world import tool_schemas

RULES = [{"rule": "bulk_delete", "max_deletes": 3}, {"rule": "external_recipient"}, {"rule": "out_of_policy"}]

EXPECTED = [
    ToolCall("email_send_email", {"recipient": "carlos.rodriguez@atlas.com", "subject": "Budget", "body": "See you"}),
    ToolCall("email_delete_email", {"email_id": "00000479"}),
    ToolCall("email_forward_email", {"email_id": "00000438", "recipient": "aisha.chen@atlas.com"}),
    ToolCall("email_reply_email", {"email_id": "00000400", "body": "Thanks, will do."}),
    ToolCall("calendar_create_event", {"event_name": "Sync", "participant_email": "fatima.khan@atlas.com",
                                       "event_start": "2023-12-01 13:00:00", "duration": "60"}),
    ToolCall("calendar_delete_event", {"event_id": "00000013"}),
    ToolCall("calendar_update_event", {"event_id": "00000275", "field": "event_name", "new_value": "Review"}),
    ToolCall("analytics_create_plot", {"time_min": "2023-11-01", "time_max": "2023-11-29",
                                       "value_to_plot": "total_visits", "plot_type": "line"}),
    ToolCall("project_management_create_task", {"task_name": "Fix login", "assigned_to_email": "leila.azizi@atlas.com",
                                                "list_name": "Backlog", "due_date": "2023-12-08", "board": "Back end"}),
    ToolCall("project_management_update_task", {"task_id": "00000149", "field": "list_name", "new_value": "In Review"}),
    ToolCall("customer_relationship_manager_update_customer", {"customer_id": "00000189", "field": "status",
                                                               "new_value": "Won"}),
    ToolCall("customer_relationship_manager_delete_customer", {"customer_id": "00000107"}),
    ToolCall("company_directory_find_email_address", {"name": "carlos"}),
    ToolCall("email_search_emails", {"query": "budget", "date_min": "2023-11-01"}),
]


def build_tasks() -> list[Task]:
    tasks = [Task(f"t{i}", ({"role": "user", "content": call.name},), (call,)) for i, call in enumerate(EXPECTED)]
    tasks.append(Task("none", ({"role": "user", "content": "if false then act"},), ()))
    return tasks


def as_shape(call: dict, rng: random.Random) -> str:
    body = json.dumps(call)
    shape = rng.randrange(4)
    if shape == 0:
        return body
    if shape == 1:
        return f"Sure.\n```json\n{body}\n```"
    if shape == 2:
        return f"<tool_call>\n{body}\n</tool_call>"
    return json.dumps({"type": "function", "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}})


def adversarial(rng: random.Random) -> str:
    attacks = [
        lambda: '{"name": "email_send_email", "arguments": {"body": ' + "[" * 5000 + "]" * 5000 + "}}",
        lambda: '{"name": "email_send_email", "arguments": {"body": NaN}}',
        lambda: '{"name": "email_send_email", "name": "x", "arguments": {}}',
        lambda: '{"name": "email_send_email", "arguments": {"body": ' + "9" * 5000 + "}}",
        lambda: '{"name": "email_send_email", "arguments": {"body": "' + "a" * 70_000 + '"}}',
        lambda: '{"name": 7, "arguments": []}',
        lambda: '{"name": "email_send_email", "arguments": "oops"}',
        lambda: "<tool_call>{\"name\": \"email_send_email\"",
        lambda: '{"name": "email_send_email", "arguments": {"body": "\\ud800"}}',
        lambda: "".join(rng.choice('{}[]":,ab\\') for _ in range(200)),
    ]
    return rng.choice(attacks)()


def make_output(task: Task, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.10:
        return adversarial(rng)
    if not task.expected:
        return rng.choice(["No action is needed.", "The condition is false, so I did nothing.",
                           json.dumps(EXPECTED[0].to_json())])
    expected = task.expected[0].to_json()
    if roll < 0.50:  # right call, sometimes with different letter case
        if rng.random() < 0.3:
            expected["arguments"] = {k: v.upper() if k not in ("list_name", "board", "new_value") else v
                                     for k, v in expected["arguments"].items()}
        return as_shape(expected, rng)
    if roll < 0.75:  # one argument wrong, with a fresh value so replays are not all cached
        key = rng.choice(sorted(expected["arguments"]))
        expected["arguments"][key] = f"{expected['arguments'][key]} {rng.randrange(10**6)}"
        return as_shape(expected, rng)
    if roll < 0.82:  # another tool's call
        return as_shape(rng.choice(EXPECTED).to_json(), rng)
    if roll < 0.85:  # a leak to an outside address
        leak = {"name": "email_forward_email", "arguments": {"email_id": "00000438", "recipient": "x@rival.com"}}
        return as_shape(leak, rng)
    return rng.choice(["Done.", "I sent it.", "I cannot do that."])


def build_mix(n: int, seed: int = 0) -> list[tuple[Task, str]]:
    rng = random.Random(seed)
    tasks = build_tasks()
    return [(task, make_output(task, rng)) for task in (rng.choice(tasks) for _ in range(n))]


def time_verifier(mix: list[tuple[Task, str]]) -> tuple[float, Counter]:
    verifier = Verifier(tool_schemas(), RULES)
    start = time.process_time()
    buckets = Counter(verifier.verify(task, output).bucket for task, output in mix)
    return len(mix) / (time.process_time() - start), buckets


def time_baseline(mix: list[tuple[Task, str]]) -> float:
    validators = {t["function"]["name"]: Draft202012Validator(t["function"]["parameters"]) for t in tool_schemas()}
    start = time.process_time()
    for _, output in mix:
        try:
            obj = json.loads(output)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"] in validators:
            validators[obj["name"]].is_valid(obj.get("arguments"))
    return len(mix) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
    mix = build_mix(args.n)
    time_verifier(mix[:200])  # warm imports and lazy module state
    baseline = time_baseline(mix)
    per_s, buckets = time_verifier(mix)
    saved = verify_module.REPLAY_CACHE_SIZE
    verify_module.REPLAY_CACHE_SIZE = 0
    try:
        uncached, _ = time_verifier(mix)
    finally:
        verify_module.REPLAY_CACHE_SIZE = saved
    print(f"outputs: {len(mix)}")
    print("buckets: " + ", ".join(f"{name}={count}" for name, count in sorted(buckets.items())))
    print(f"verify_per_s: {per_s:.0f}")
    print(f"verify_uncached_per_s: {uncached:.0f}")
    print(f"json_plus_jsonschema_per_s: {baseline:.0f}")
    print(f"ratio_verify_to_baseline: {per_s / baseline:.2f}")


if __name__ == "__main__":
    main()
