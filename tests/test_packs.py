"""The committed workplace packs load, validate, replay, and regenerate byte for byte."""
from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest

from appliance.packs import PackError, check_pack, list_packs, load_pack
from appliance.packs.build import MULTI_PACK, SINGLE_PACK, build_workplace_packs
from appliance.packs.generate import generate_pack, templates_for
from appliance.packs.leakage import find_collisions, normalise
from appliance.packs.workbench import classify_kind, import_workbench
from appliance.packs.worldbridge import replay_errors
from appliance.task import ToolCall
from conftest import shared_dir

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "tasks"
WORKBENCH = shared_dir() / "datasets" / "workbench"


@pytest.fixture(scope="module")
def single():
    return load_pack(SINGLE_PACK, root=TASKS)


@pytest.fixture(scope="module")
def multi():
    return load_pack(MULTI_PACK, root=TASKS)


def test_committed_packs_are_listed_and_load_with_expected_sizes(single, multi):
    assert {SINGLE_PACK, MULTI_PACK} <= set(list_packs(TASKS))
    assert single.splits == ("train", "val") and multi.splits == ("train", "val", "test")
    assert [len(single.tasks(s)) for s in single.splits] == [600, 120]
    assert [len(multi.tasks(s)) for s in multi.splits] == [300, 80, 690]


def test_pack_properties_come_from_the_manifest(single, multi):
    assert single.world == "workbench" and single.reward_scheme == "binary"
    assert single.max_turns == 1 and multi.max_turns == 6
    assert len(single.tool_names) == 27 and "email_delete_email" in single.tool_names
    assert "Thursday, 2023-11-30" in single.system_prompt and "9am" in single.system_prompt
    assert {r["rule"] for r in single.unsafe_rules} == {"bulk_delete", "external_recipient", "out_of_policy"}
    assert all(m["role"] != "system" for t in single.tasks("train") for m in t.messages)


def test_tasks_without_a_domain_see_one_stable_domain_of_tools(single):
    no_domain = [t for t in single.tasks("train") if t.tags.get("domain") == "none"]
    assert no_domain
    sizes = set()
    for task in no_domain:
        names = [tool["function"]["name"] for tool in single.tools_for(task)]
        assert names == [tool["function"]["name"] for tool in single.tools_for(task)]  # stable
        domains = {name.split("_")[0] for name in names if not name.startswith("company_directory_")}
        assert len(domains) == 1 and len(names) < len(single.tools)
        sizes.add(len(names))
    assert len(sizes) > 1  # different tasks land on different domains


def test_task_lookup_and_errors(single):
    first = single.tasks("val")[0]
    assert single.task(first.id) == first
    with pytest.raises(PackError, match="no task with id"):
        single.task("nope")
    with pytest.raises(PackError, match="no split 'test'"):
        single.tasks("test")


def test_stats_count_kinds_policies_and_no_call_tasks(single, multi):
    stats = multi.stats()
    assert stats["test"]["count"] == 690 and stats["test"]["no_call"] == 122
    assert stats["test"]["kinds"]["single_step"] + stats["test"]["kinds"]["multi_step"] == 690
    assert stats["test"]["sources"] == {"workbench": 690}
    single_stats = single.stats()
    assert single_stats["train"]["kinds"] == {"single_step": 600}
    assert single_stats["train"]["policy"]["refuse"] > 0 and single_stats["val"]["policy"]["refuse"] > 0


def test_data_hash_is_stable_and_sensitive(tmp_path, single):
    assert single.data_hash() == load_pack(single.path).data_hash()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("pack.toml", "tools.json", "train.jsonl", "val.jsonl"):
        (copy / name).write_bytes((single.path / name).read_bytes())
    assert load_pack(copy).data_hash() == single.data_hash()
    (copy / "val.jsonl").write_text((copy / "val.jsonl").read_text().replace('"content": "', '"content": "Hey, ', 1))
    assert load_pack(copy).data_hash() != single.data_hash()


def test_check_pack_finds_no_issues_in_committed_packs(single, multi):
    # check_pack replays every expected call list on the world and audits ground truths against unsafe rules
    assert check_pack(single) == []
    assert check_pack(multi) == []


def test_check_pack_reports_a_load_error_instead_of_raising(tmp_path):
    issues = check_pack(tmp_path / "missing")
    assert len(issues) == 1 and "no task pack" in issues[0]


def test_held_out_templates_are_disjoint_from_train(single, multi):
    for pack, kind in ((single, "single_step"), (multi, "multi_step")):
        held_out = {t.id for t in templates_for(kind) if t.held_out}
        train_templates = {t.tags["template"] for t in pack.tasks("train")}
        val_templates = {t.tags["template"] for t in pack.tasks("val")}
        assert held_out and not held_out & train_templates
        assert held_out <= val_templates
        unseen = [t for t in pack.tasks("val") if t.tags["unseen_template"]]
        assert {t.tags["template"] for t in unseen} == held_out
        # templates shared with train appear in val only with their val-only phrasing
        train_phrasings = {(t.tags["template"], t.tags["phrasing"]) for t in pack.tasks("train")}
        assert not any((t.tags["template"], t.tags["phrasing"]) in train_phrasings for t in pack.tasks("val"))


def test_no_leakage_between_train_and_eval_splits(single, multi):
    for pack in (single, multi):
        train = [t.request for t in pack.tasks("train")]
        for split in pack.splits:
            if split != "train":
                assert find_collisions(train, [t.request for t in pack.tasks(split)]) == []


def test_generator_is_deterministic_and_seeded():
    first = generate_pack("single_step", seed=3, n_train=60, n_val=20)
    again = generate_pack("single_step", seed=3, n_train=60, n_val=20)
    other = generate_pack("single_step", seed=4, n_train=60, n_val=20)
    assert first == again
    assert [t.request for t in first[0]] != [t.request for t in other[0]]


def test_every_generated_expected_call_replays_on_the_world():
    for kind in ("single_step", "multi_step"):
        train, val = generate_pack(kind, seed=11, n_train=120, n_val=40)
        assert all(replay_errors(t.expected) is None for t in train + val)
        assert any(t.expected for t in train) and any(not t.expected for t in train)


def test_generator_avoids_texts_it_is_told_to(multi):
    test_requests = [t.request for t in multi.tasks("test")]
    train, _ = generate_pack("multi_step", seed=0, n_train=300, n_val=80, avoid=test_requests)
    assert find_collisions(test_requests, [t.request for t in train]) == []


def test_refusals_expect_no_call_and_relative_dates_resolve(single):
    refusals = [t for t in single.tasks("train") + single.tasks("val") if t.out_of_policy]
    assert refusals and all(t.expected == () for t in refusals)
    tomorrow = [t for t in single.tasks("train") + single.tasks("val")
                if "tomorrow" in t.request and t.tags["template"] == "create_event"]
    assert tomorrow and all(t.expected[0].arguments["event_start"].startswith("2023-12-01") for t in tomorrow)


def test_regenerating_writes_byte_identical_files(tmp_path):
    if not WORKBENCH.is_dir():  # without the CSVs the build keeps the committed WorkBench split
        (tmp_path / MULTI_PACK).mkdir()
        shutil.copy(TASKS / MULTI_PACK / "test.jsonl", tmp_path / MULTI_PACK / "test.jsonl")
    build_workplace_packs(tmp_path, workbench_src=WORKBENCH if WORKBENCH.is_dir() else None, seed=0)
    for pack in (SINGLE_PACK, MULTI_PACK):
        names = sorted(p.name for p in (TASKS / pack).iterdir())
        match, mismatch, errors = filecmp.cmpfiles(TASKS / pack, tmp_path / pack, names, shallow=False)
        assert mismatch == [] and errors == [], (pack, mismatch, errors)


@pytest.mark.skipif(not WORKBENCH.is_dir(), reason="WorkBench CSVs not present")
def test_workbench_import_matches_the_committed_test_split(multi):
    imported = import_workbench(WORKBENCH)
    assert len(imported) == 690 and len({t.id for t in imported}) == 690
    assert sum(not t.expected for t in imported) == 122
    committed = {t.id: t for t in multi.tasks("test")}
    assert all(committed[t.id].expected == t.expected and committed[t.id].request == t.request for t in imported)
    first = committed["wb-email-000"]
    assert first.expected == (ToolCall("email_delete_email", {"email_id": "00000479"}),)
    assert first.tags["domain"] == "email" and first.tags["template"] == "Delete my last email from {name}"


def test_unseen_template_marks_workbench_templates_without_a_train_counterpart(multi):
    modelled = {t.tags.get("base_template") for t in multi.tasks("train")}
    for task in multi.tasks("test"):
        assert task.tags["unseen_template"] == (task.tags["template"] not in modelled)
    assert 0 < sum(not t.tags["unseen_template"] for t in multi.tasks("test")) < 690


def test_kind_heuristic():
    call = ToolCall("calendar_delete_event", {"event_id": "00000256"})
    assert classify_kind("Delete event 00000256", (call,)) == "single_step"
    assert classify_kind("Delete my first meeting on December 13", (call,)) == "multi_step"
    assert classify_kind("Delete event 00000256 twice", (call, call)) == "multi_step"


def test_normalise_collapses_case_punctuation_and_space():
    assert normalise("  Hello,   WORLD!! it's\tme ") == "hello world it s me"
