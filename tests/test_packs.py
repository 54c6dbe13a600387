"""The committed workplace packs load, validate, replay, and regenerate byte for byte."""
from __future__ import annotations

import filecmp
import shutil
from dataclasses import replace
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
    assert single.splits == ("train", "train_rl", "dev", "val") and multi.splits == ("train", "val", "test")
    assert [len(single.tasks(s)) for s in single.splits] == [1200, 480, 120, 120]
    assert [len(multi.tasks(s)) for s in multi.splits] == [300, 80, 690]


def test_pack_properties_come_from_the_manifest(single, multi):
    assert single.world == "workbench" and single.reward_scheme == "attempt"
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
    assert single_stats["train"]["kinds"] == {"single_step": 1200}
    assert single_stats["train"]["policy"]["refuse"] > 0 and single_stats["val"]["policy"]["refuse"] > 0


def test_data_hash_is_stable_and_sensitive(tmp_path, single):
    assert single.data_hash() == load_pack(single.path).data_hash()
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("pack.toml", "tools.json", "train.jsonl", "train_rl.jsonl", "dev.jsonl", "val.jsonl"):
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
        held_out = {t.id for t in templates_for(kind) if t.only_in == "val"}
        train_templates = {t.tags["template"] for t in pack.tasks("train")}
        val_templates = {t.tags["template"] for t in pack.tasks("val")}
        assert held_out and not held_out & train_templates
        assert held_out <= val_templates
        unseen = [t for t in pack.tasks("val") if t.tags["unseen_template"]]
        assert {t.tags["template"] for t in unseen} == held_out
        # templates shared with train appear in val only with their val-only phrasing
        train_phrasings = {(t.tags["template"], t.tags["phrasing"])
                           for s in {"train", "train_rl"} & set(pack.splits) for t in pack.tasks(s)}
        assert not any((t.tags["template"], t.tags["phrasing"]) in train_phrasings for t in pack.tasks("val"))


def test_no_leakage_between_training_and_held_out_splits(single, multi):
    for pack in (single, multi):
        for train_split in {"train", "train_rl"} & set(pack.splits):
            train = [t.request for t in pack.tasks(train_split)]
            for split in {"dev", "val", "test"} & set(pack.splits):
                assert find_collisions(train, [t.request for t in pack.tasks(split)]) == []


def test_no_single_step_training_request_leaks_into_workbench_test(single, multi):
    workbench = [t.request for t in multi.tasks("test")]
    for split in ("train", "train_rl"):
        assert find_collisions(workbench, [t.request for t in single.tasks(split)]) == []


def test_sft_and_rl_pools_are_disjoint_and_rl_holds_what_sft_never_saw(single):
    sft, rl = single.tasks("train"), single.tasks("train_rl")
    assert not {normalise(t.request) for t in sft} & {normalise(t.request) for t in rl}
    sft_templates = {t.tags["template"] for t in sft}
    rl_only = {t.id for t in templates_for("single_step") if t.rl_only}
    assert rl_only and rl_only <= {t.tags["template"] for t in rl} and not rl_only & sft_templates
    # RL's wordings of shared templates are ones SFT never trains on
    rl_bases = {(t.id, p) for t in templates_for("single_step") if not t.rl_only for p in t.rl_phrasings}
    sft_bases = {(t.id, p) for t in templates_for("single_step") for p in t.phrasings_for("train")}
    assert rl_bases and not rl_bases & sft_bases


def test_dev_is_held_out_phrasings_of_trained_templates_and_its_own_refusals_disjoint_from_val(single):
    dev, val = single.tasks("dev"), single.tasks("val")
    assert find_collisions([t.request for t in val], [t.request for t in dev]) == []
    trained = {t.tags["template"] for s in ("train", "train_rl") for t in single.tasks(s)}
    dev_only = {t.id for t in templates_for("single_step") if t.only_in == "dev"}
    own = {t.tags["template"] for t in dev if t.tags["unseen_template"]}
    assert {t.tags["template"] for t in dev} <= trained | dev_only and own == dev_only
    # dev's own templates are refusals no training split and no val task has, as val's held-out ones are
    assert not dev_only & (trained | {t.tags["template"] for t in val})
    assert all(t.out_of_policy and t.expected == () for t in dev if t.tags["template"] in dev_only)
    seen = {(t.tags["template"], t.tags["phrasing"]) for s in ("train", "train_rl", "val") for t in single.tasks(s)}
    assert not any((t.tags["template"], t.tags["phrasing"]) in seen for t in dev)


def test_every_train_template_has_at_least_ten_distinct_phrasings(single):
    for split in ("train", "train_rl"):
        by_template: dict[str, set[str]] = {}
        for task in single.tasks(split):
            by_template.setdefault(task.tags["template"], set()).add(task.tags["phrasing"])
        assert min(len(phrasings) for phrasings in by_template.values()) >= 10, split


def test_every_policy_rule_has_several_train_refusal_templates_and_val_keeps_its_own(single):
    refusals = {t.id: t for t in templates_for("single_step") if t.policy == "refuse"}
    trained = {t.tags["template"] for s in ("train", "train_rl") for t in single.tasks(s) if t.out_of_policy}
    val_only = {t.tags["template"] for t in single.tasks("val") if t.out_of_policy} - trained
    assert len(trained) >= 6 and val_only == {i for i, t in refusals.items() if t.only_in == "val"}


def test_refusal_twins_use_their_action_templates_words_and_differ_only_in_address_or_time(single):
    templates = {t.id: t for t in templates_for("single_step")}
    twins = [t for t in templates.values() if "twin_of" in t.extra_tags]
    assert {t.extra_tags["twin_of"] for t in twins} >= {"send_email", "forward_by_id", "create_event"}
    for twin in twins:
        base = templates[twin.extra_tags["twin_of"]]
        assert twin.policy == "refuse" and not twin.phrasings_for("val") and not twin.phrasings_for("dev")
        assert twin.phrasings_for("train") == base.phrasings_for("train")
        assert twin.phrasings_for("train_rl") == base.phrasings_for("train_rl")
    tasks = [t for s in ("train", "train_rl") for t in single.tasks(s) if "twin_of" in t.tags]
    assert tasks and all(t.expected == () and t.out_of_policy for t in tasks)
    outside = [t for t in tasks if t.tags["template"] != "refuse_meeting_off_hours"]
    assert all("@atlas.com" not in t.request and "@" in t.request for t in outside)


def test_training_teaches_a_no_call_tasks_own_reply_and_the_canonical_answer_otherwise(single):
    from appliance.prompting import NO_ACTION_TEXT, reference_answer, render_completion

    train = single.tasks("train")
    refusal = replace(next(t for t in train if t.out_of_policy), reply="I can't do that: it leaves atlas.com.")
    chitchat = next(t for t in train if not t.expected and not t.out_of_policy)
    action = next(t for t in train if t.expected)
    assert reference_answer(refusal) == refusal.reply != NO_ACTION_TEXT
    assert reference_answer(chitchat) == NO_ACTION_TEXT
    assert reference_answer(action) == render_completion(action.expected)


def test_generator_is_deterministic_and_seeded():
    sizes = {"train": 60, "train_rl": 30, "dev": 20, "val": 20}
    first = generate_pack("single_step", seed=3, sizes=sizes)
    again = generate_pack("single_step", seed=3, sizes=sizes)
    other = generate_pack("single_step", seed=4, sizes=sizes)
    assert first == again
    assert [t.request for t in first["train"]] != [t.request for t in other["train"]]


def test_held_out_splits_do_not_depend_on_the_training_splits():
    alone = generate_pack("single_step", seed=5, sizes={"val": 30})
    together = generate_pack("single_step", seed=5, sizes={"train": 90, "train_rl": 40, "dev": 20, "val": 30})
    assert alone["val"] == together["val"]


def test_every_generated_expected_call_replays_on_the_world():
    for kind, sizes in (("single_step", {"train": 120, "train_rl": 60, "dev": 30, "val": 40}),
                        ("multi_step", {"train": 120, "val": 40})):
        tasks = [t for split in generate_pack(kind, seed=11, sizes=sizes).values() for t in split]
        assert all(replay_errors(t.expected) is None for t in tasks)
        assert any(t.expected for t in tasks) and any(not t.expected for t in tasks)


def test_generator_avoids_texts_it_is_told_to(multi):
    test_requests = [t.request for t in multi.tasks("test")]
    train = generate_pack("multi_step", seed=0, sizes={"train": 300, "val": 80}, avoid=test_requests)["train"]
    assert find_collisions(test_requests, [t.request for t in train]) == []


def test_refusals_expect_no_call_and_relative_dates_resolve(single):
    refusals = [t for t in single.tasks("train") + single.tasks("val") if t.out_of_policy]
    assert refusals and all(t.expected == () for t in refusals)
    tomorrow = [t for split in single.splits for t in single.tasks(split) if "tomorrow" in t.request and t.expected
                and t.tags["template"] in ("create_event", "move_event_by_id", "update_task_due_date")]
    dates = [next(a[k] for k in ("event_start", "new_value", "due_date") if k in a)
             for a in (t.expected[0].arguments for t in tomorrow)]
    assert dates and all(d.startswith("2023-12-01") for d in dates)


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


def test_an_update_never_asks_for_the_value_its_record_holds():
    from datetime import date
    from random import Random

    from appliance.packs.entities import DURATION_WORDS, duration_words, later_than, other_than

    assert other_than("Won", ("Qualified", "Won", "Lost"), "Lost") == "Won"
    assert other_than("Won", ("Qualified", "Won", "Lost"), "Won") == "Lost"
    assert other_than("Lost", ("Qualified", "Won", "Lost"), "Lost") == "Qualified"  # wraps round
    assert later_than(date(2023, 12, 5), "2023-12-05") == date(2023, 12, 6)
    assert later_than(date(2023, 12, 5), "2023-12-04") == date(2023, 12, 5)
    for seed in range(20):  # no extra draw: the stream after it is the one an unconstrained draw leaves
        free, held = Random(seed), Random(seed)
        text, minutes = duration_words(free)
        other_text, other_minutes = duration_words(held, unlike=minutes)
        assert other_minutes != minutes and other_text in DURATION_WORDS[other_minutes]
        assert free.random() == held.random()


def test_normalise_collapses_case_punctuation_and_space():
    assert normalise("  Hello,   WORLD!! it's\tme ") == "hello world it s me"


def test_tasks_whose_expected_calls_change_nothing_are_noted_and_judged_by_their_arguments(single):
    from appliance.packs.check import changes_nothing, check_notes
    from appliance.verify import Verifier

    # The generator asks for a value the record does not hold (entities.other_than), so the pack has none.
    assert check_notes(single) == []
    generated = next(t for t in single.tasks("val") if t.id == "ws-val-0008")  # event 00000040 lasts 30 minutes
    assert generated.expected[0].arguments["new_value"] != "30" and not changes_nothing(generated)
    task = replace(generated, expected=(ToolCall("calendar_update_event",
                                                 {"event_id": "00000040", "field": "duration", "new_value": "30"}),))
    assert changes_nothing(task)
    # WorkBench's state comparison would pass a look-up here (it changes nothing either); the verifier compares
    # the arguments of such a task instead, so only the expected call passes.
    verifier = Verifier.for_pack(single)
    look_up = ToolCall("calendar_get_event_information_by_id", {"event_id": "00000040", "field": "event_name"})
    refused = ToolCall("calendar_update_event", {"event_id": "00000040", "field": "duration", "new_value": "3O"})
    assert verifier.verify_calls(task, (look_up,)).bucket == "wrong_tool"
    assert verifier.verify_calls(task, (refused,)).bucket != "success"
    assert verifier.verify_calls(task, task.expected).bucket == "success"
    changed = replace(task, expected=(ToolCall("calendar_update_event",
                                               {"event_id": "00000040", "field": "duration", "new_value": "45"}),))
    assert not changes_nothing(changed)
