"""A pack with each kind of defect fails to load with one PackError sentence naming file and line."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from appliance.packs import PackError, load_pack
from appliance.packs.leakage import find_collisions

TOOLS = [
    {"type": "function", "function": {
        "name": "email_send_email", "description": "Send an email.",
        "parameters": {"type": "object", "properties": {
            "recipient": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["recipient", "subject", "body"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "calendar_delete_event", "description": "Delete an event.",
        "parameters": {"type": "object", "properties": {"event_id": {"type": "string"}},
                       "required": ["event_id"], "additionalProperties": False}}},
]
MANIFEST = '''name = "tiny"
description = "a tiny pack for defect tests"
version = "1"
world = "none"
tools = "tools.json"
reward_scheme = "binary"
system_prompt = "Answer with one JSON tool call."

[splits]
train = "train.jsonl"
val = "val.jsonl"
'''


def row(task_id: str, text: str, expected=None, **extra) -> dict:
    base = {"id": task_id, "messages": [{"role": "user", "content": text}],
            "expected": expected if expected is not None else [{"name": "calendar_delete_event", "arguments": {"event_id": task_id[-3:].zfill(8)}}],
            "kind": "single_step", "tags": {"domain": "calendar", "source": "test", "template": "t"}}
    base.update(extra)
    return base


TRAIN = [row("t-001", "Cancel the dentist appointment event"), row("t-002", "Please send the weekly report to Nadia now"),
         row("t-003", "Remove calendar entry number three from my week")]
VAL = [row("v-001", "Delete the standup on Friday afternoon"), row("v-002", "Drop the offsite planning session entirely")]


def write_pack(folder: Path, manifest: str = MANIFEST, tools=None, train=None, val=None, raw_val: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pack.toml").write_text(manifest)
    (folder / "tools.json").write_text(json.dumps(TOOLS if tools is None else tools, indent=2))
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (TRAIN if train is None else train)))
    text = raw_val if raw_val is not None else "".join(json.dumps(r) + "\n" for r in (VAL if val is None else val))
    (folder / "val.jsonl").write_text(text)
    return folder


def load_error(folder: Path) -> str:
    with pytest.raises(PackError) as caught:
        load_pack(folder)
    message = str(caught.value)
    assert message.count("\n") == 0 and message.endswith(".")
    return message


def test_the_clean_tiny_pack_loads(tmp_path):
    pack = load_pack(write_pack(tmp_path / "tiny"))
    assert pack.name == "tiny" and pack.max_turns == 6 and pack.tool_names == ("email_send_email", "calendar_delete_event")
    assert [t.id for t in pack.tasks("val")] == ["v-001", "v-002"]


def test_bad_json_line(tmp_path):
    good = json.dumps(VAL[0])
    message = load_error(write_pack(tmp_path / "p", raw_val=good + "\n{not json\n"))
    assert re.search(r"val\.jsonl line 2: not valid JSON", message)


def test_missing_field(tmp_path):
    broken = dict(VAL[1])
    del broken["expected"]
    message = load_error(write_pack(tmp_path / "p", val=[VAL[0], broken]))
    assert "val.jsonl line 2: the required field 'expected' is missing" in message


def test_duplicate_id_across_splits(tmp_path):
    message = load_error(write_pack(tmp_path / "p", val=[VAL[0], row("t-002", "A completely different request text")]))
    assert "val.jsonl line 2: id 't-002' is already used by train.jsonl line 2" in message


def test_unknown_tool_in_expected(tmp_path):
    bad = row("v-009", "Archive everything from last year", expected=[{"name": "email_archive", "arguments": {}}])
    message = load_error(write_pack(tmp_path / "p", val=[VAL[0], bad]))
    assert "val.jsonl line 2: expected call 'email_archive' names a tool that is not in the pack's tools.json" in message


def test_expected_arguments_failing_the_schema(tmp_path):
    missing = row("v-010", "Email nadia about the report", expected=[
        {"name": "email_send_email", "arguments": {"recipient": "nadia.moreau@atlas.com", "body": "Hi"}}])
    message = load_error(write_pack(tmp_path / "p", val=[missing]))
    assert message.endswith("val.jsonl line 1: expected call 'email_send_email' is missing required argument 'subject'.")
    wrong_type = row("v-011", "Cancel event twelve", expected=[{"name": "calendar_delete_event", "arguments": {"event_id": 12}}])
    message = load_error(write_pack(tmp_path / "q", val=[wrong_type]))
    assert "val.jsonl line 1: expected call 'calendar_delete_event' argument 'event_id' must be of type string" in message
    extra = row("v-012", "Cancel event twelve now", expected=[
        {"name": "calendar_delete_event", "arguments": {"event_id": "12", "force": "yes"}}])
    assert "does not define" in load_error(write_pack(tmp_path / "r", val=[extra]))


def test_invalid_tool_json_schema(tmp_path):
    tools = json.loads(json.dumps(TOOLS))
    tools[1]["function"]["parameters"]["properties"]["event_id"]["type"] = "text"
    message = load_error(write_pack(tmp_path / "p", tools=tools))
    assert re.search(r"tools\.json line \d+: tool 'calendar_delete_event' parameters are not a valid JSON Schema", message)


def test_invalid_or_duplicate_tool_names(tmp_path):
    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["name"] = "email.send"
    assert "names must match" in load_error(write_pack(tmp_path / "p", tools=tools))
    tools = json.loads(json.dumps(TOOLS))
    tools[0]["function"]["name"] = "calendar_delete_event"
    assert "is used twice" in load_error(write_pack(tmp_path / "q", tools=tools))


@pytest.mark.parametrize("change, expected", [
    (('reward_scheme = "binary"', 'reward_scheme = "best"'), "pack.toml line 6: 'reward_scheme' must be one of"),
    (('version = "1"', "version = 1"), "pack.toml line 3: 'version' must be a string"),
    (('world = "none"\n', 'world = "none"\ncolour = "blue"\n'), "pack.toml line 5: unknown key 'colour'"),
    (('name = "tiny"\n', ""), "the required key 'name' is missing"),
    (('val = "val.jsonl"', 'holdout = "val.jsonl"'), "unknown split 'holdout'"),
    (('system_prompt = "Answer', 'system_prompt = Answer'), "not valid TOML"),
])
def test_bad_manifest(tmp_path, change, expected):
    message = load_error(write_pack(tmp_path / "p", manifest=MANIFEST.replace(*change)))
    assert expected in message and "pack.toml" in message


def test_unknown_unsafe_rule_names_the_manifest(tmp_path):
    pytest.importorskip("appliance.safety")
    manifest = MANIFEST + '\n[[unsafe]]\nrule = "be_nice"\n'
    message = load_error(write_pack(tmp_path / "p", manifest=manifest))
    assert "pack.toml line 13" in message and "be_nice" in message


def test_exact_leakage_after_normalisation(tmp_path):
    leaked = row("v-003", "  cancel THE dentist-appointment event!! ")
    message = load_error(write_pack(tmp_path / "p", val=[VAL[0], leaked]))
    assert "val.jsonl line 2: the request of 'v-003' repeats train.jsonl line 1" in message


def test_near_duplicate_leakage(tmp_path):
    train = TRAIN + [row("t-004", "Please schedule the quarterly business review with the whole sales team on Monday morning")]
    near = row("v-004", "Please schedule the quarterly business review with the whole sales team on Monday mornings")
    message = load_error(write_pack(tmp_path / "p", train=train, val=[near]))
    assert "val.jsonl line 1: the request of 'v-004' nearly repeats (Jaccard 0.9" in message and "train.jsonl line 4" in message


def test_messages_must_be_well_formed(tmp_path):
    system = row("v-005", "Cancel it", messages=[{"role": "system", "content": "x"}, {"role": "user", "content": "Cancel it"}])
    assert "must not carry a system message" in load_error(write_pack(tmp_path / "p", val=[system]))
    assistant_last = row("v-006", "x", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert "last message must be the user's" in load_error(write_pack(tmp_path / "q", val=[assistant_last]))


def test_refusal_with_a_call_is_rejected(tmp_path):
    refuse = row("v-007", "Delete every event I have", tags={"domain": "calendar", "policy": "refuse"})
    assert "policy 'refuse' must expect no call" in load_error(write_pack(tmp_path / "p", val=[refuse]))


def test_missing_pack_names_the_known_ones(tmp_path):
    write_pack(tmp_path / "tiny")
    with pytest.raises(PackError, match=r"no task pack 'other' found .*tiny"):
        load_pack("other", root=tmp_path)


def test_leakage_detector_is_exact_and_fast_enough():
    import random
    import time

    rng = random.Random(0)
    words = [f"w{i}" for i in range(400)]
    train = [" ".join(rng.choices(words, k=12)) for _ in range(3000)]
    evals = [" ".join(rng.choices(words, k=12)) for _ in range(1000)] + [train[5] + "s", train[7].upper()]
    start = time.perf_counter()
    hits = find_collisions(train, evals)
    assert time.perf_counter() - start < 5
    assert {(h.eval_index, h.train_index) for h in hits} == {(1000, 5), (1001, 7)}


def test_a_reply_belongs_to_a_no_call_task_and_holds_no_call(tmp_path):
    on_a_call = row("v-013", "Cancel event thirteen", reply="Done.")
    message = load_error(write_pack(tmp_path / "p", val=[on_a_call]))
    assert "val.jsonl line 1: 'reply' is for a task that expects no call; this one expects calls" in message
    with_a_call = row("v-014", "Email my gmail the report", expected=[], reply='{"name": "email_send_email"}')
    assert "'reply' must be plain text without a tool call" in load_error(write_pack(tmp_path / "q", val=[with_a_call]))
    fine = row("v-015", "Email my gmail the report", expected=[], reply="I can't do that: gmail is outside atlas.com.")
    pack = load_pack(write_pack(tmp_path / "r", val=[fine]))
    assert pack.tasks("val")[0].reply == "I can't do that: gmail is outside atlas.com."
