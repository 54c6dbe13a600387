"""`appliance tasks expand`: train grown from a human seed set, which becomes val.

Slots fill the request and the expected calls alike (typed where a marker is a
whole value); train rows are restyled, replayed in the pack's world, deduplicated
and kept clear of val; the same seed writes the same bytes; the report says why
candidates were dropped; and a seed a person must fix is one sentence.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.errors import PackError
from appliance.packs import load_pack
from appliance.packs.leakage import find_collisions
from appliance.userworld.cli import add_tasks_expand, cmd_tasks_expand
from appliance.userworld.expand import expand_pack
from appliance.userworld.writer import new_pack

FIXTURES = Path(__file__).parent / "fixtures"
PEOPLE = [{"text": "Dana", "value": "dana@example.com"}, {"text": "Eli", "value": "eli@example.com"},
          {"text": "Fay", "value": "fay@example.com"}]
SEEDS = [
    {"id": "assign", "request": "Assign issue {issue} to {person}",
     "expected": [{"name": "assign_issue", "arguments": {"issue_id": "{issue}", "assignee": "{person}"}}],
     "slots": {"person": PEOPLE}},
    # issue 99 does not exist: those candidates fail their replay and are dropped
    {"id": "close", "request": "Please close #{issue}, it's fixed",
     "expected": [{"name": "transition_issue", "arguments": {"issue_id": "{issue}", "status": "done"}}],
     "slots": {"issue": [1, 2, 99]}},
    {"id": "file", "request": "File a bug called '{title}'",
     "expected": [{"name": "create_issue", "arguments": {"title": "{title}"}}],
     "slots": {"title": ["Checkout is broken", "Dark mode flickers", "CSV export is empty", "Avatars are blurry"]}},
    {"id": "nuke", "request": "Delete every issue in the tracker", "expected": [], "tags": {"policy": "refuse"}},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def pack_dir(tmp_path):
    made = new_pack("tracker", functions=FIXTURES / "tracker_functions.py", root=tmp_path)
    manifest = made.path / "pack.toml"
    manifest.write_text(manifest.read_text() + "\n[slots]\nissue = [1, 2]\n")  # the pack-level table
    return made.path


def test_seeds_become_val_and_train_is_filled_restyled_replayed_and_clean(pack_dir, tmp_path):
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS)
    report = expand_pack(pack_dir, seeds=seeds, per_seed=4, rl_per_seed=2, seed=3)
    pack = load_pack(pack_dir)
    val, train, train_rl = pack.tasks("val"), pack.tasks("train"), pack.tasks("train_rl")
    assert [t.request for t in val] == ["Assign issue 1 to Dana", "Please close #1, it's fixed",
                                        "File a bug called 'Checkout is broken'", "Delete every issue in the tracker"]
    assert val[0].expected[0].arguments == {"issue_id": 1, "assignee": "dana@example.com"}  # typed, by its value
    assert report.kept == {"val": 4, "train": len(train), "train_rl": len(train_rl)}
    assert len(train) == 16 and train_rl
    for task in train + train_rl:
        assert task.tags["source"] == "expanded" and task.tags["seed"]
        if task.tags["seed"] == "assign":
            email = task.expected[0].arguments["assignee"]
            name = next(p["text"] for p in PEOPLE if p["value"] == email)
            assert name in task.request and str(task.expected[0].arguments["issue_id"]) in task.request
        if task.tags["seed"] == "close":
            assert task.expected[0].arguments["issue_id"] in (1, 2)  # 99 never replays
        if task.tags["seed"] == "nuke":
            assert task.out_of_policy and task.expected == ()
    assert report.dropped["replay_failed"] > 0
    assert find_collisions([t.request for t in train + train_rl], [t.request for t in val]) == []
    assert len({t.request.lower() for t in train + train_rl}) == len(train) + len(train_rl)
    restyled = [t for t in train if t.request not in {v.request for v in val}]
    assert len(restyled) > len(train) // 2
    saved = json.loads((pack_dir / "expand_report.json").read_text())
    assert saved["kept"] == report.kept and "replay_failed" in saved["drop_reasons"]


def test_the_same_seed_writes_the_same_bytes_and_another_seed_differs(pack_dir, tmp_path):
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS[:1])
    expand_pack(pack_dir, seeds=seeds, per_seed=3, seed=1)
    first = (pack_dir / "train.jsonl").read_bytes()
    expand_pack(pack_dir, seeds=seeds, per_seed=3, seed=1)
    assert (pack_dir / "train.jsonl").read_bytes() == first
    expand_pack(pack_dir, seeds=seeds, per_seed=3, seed=2)
    assert (pack_dir / "train.jsonl").read_bytes() != first


@pytest.mark.parametrize("seed, problem", [
    ({"request": "Assign issue 1 to {who}", "expected": []}, "slot '{who}' has no values"),
    ({"request": "Show issue {n}", "expected": [{"name": "get_issue", "arguments": {"issue_id": "{n}"}}],
      "slots": {"n": [99]}}, "seed 'seed-0001' (line 1)"),
    ({"request": "Hi", "expected": [], "slots": {"x": []}}, None),  # an unused slot is never asked for
    ({"expected": []}, "a seed is"),
])
def test_a_seed_to_fix_is_one_sentence_naming_it(pack_dir, tmp_path, seed, problem):
    seeds = write_jsonl(tmp_path / "seeds.jsonl", [seed])
    if problem is None:
        assert expand_pack(pack_dir, seeds=seeds, per_seed=1).kept["val"] == 1
        return
    with pytest.raises(PackError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")
                       .replace("}", r"\}")):
        expand_pack(pack_dir, seeds=seeds, per_seed=1)


def test_the_front_end_parses_and_reports(pack_dir, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    add_tasks_expand(parser.add_subparsers(dest="tasks_cmd"))
    seeds = write_jsonl(tmp_path / "seeds.jsonl", SEEDS[1:2])
    args = parser.parse_args(["expand", str(pack_dir), "--seeds", str(seeds), "--per-seed", "2"])
    assert cmd_tasks_expand(args) == 0
    printed = capsys.readouterr().out
    assert "kept val 1, train 2" in printed and "dropped" in printed and "expand_report.json" in printed
