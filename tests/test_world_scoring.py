"""WorkBench's state comparison (TOOLS_AND_SCORING.md §3) and the 690 ground-truth answers."""
from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest

from appliance.task import ToolCall
from appliance.world import World, parse_workbench_call, replay
from conftest import shared_dir

ANSWERS_DIR = shared_dir() / "datasets/workbench/data/processed/queries_and_answers"


def calls(*texts: str) -> list[ToolCall]:
    return [parse_workbench_call(t) for t in texts]


def same(a: list[ToolCall], b: list[ToolCall]) -> bool:
    return replay(a).same_state(replay(b))


EVENT = 'calendar.create_event.func(event_name="Catch up", participant_email="leila.azizi@atlas.com", event_start="{start}", duration="{duration}")'
EVENT_B = 'calendar.create_event.func(event_name="Review", participant_email="raj.patel@atlas.com", event_start="2023-12-01 15:00:00", duration="60")'


def event(start: str = "2023-12-01 13:00:00", duration: str = "30") -> str:
    return EVENT.format(start=start, duration=duration)


# ---- §3 consequences -----------------------------------------------------------------------


def test_time_text_must_match_exactly():
    assert not same(calls(event("2023-12-01 13:00")), calls(event()))
    assert not same(calls(event(duration="30.0")), calls(event()))


def test_plot_dates_must_match():
    plot = 'analytics.create_plot.func(time_min="2023-11-01", time_max="{end}", value_to_plot="total_visits", plot_type="bar")'
    assert not same(calls(plot.format(end="2023-11-30")), calls(plot.format(end="2023-11-29")))


def test_names_subjects_bodies_and_addresses_ignore_case():
    assert same(calls(event().replace("Catch up", "CATCH UP")), calls(event()))
    send = 'email.send_email.func(recipient="{r}", subject="{s}", body="{b}")'
    assert same(
        calls(send.format(r="Leila.Azizi@atlas.com", s="Discuss Overdue Tasks", b="LET'S TALK")),
        calls(send.format(r="leila.azizi@atlas.com", s="discuss overdue tasks", b="let's talk")),
    )
    rename = 'customer_relationship_manager.update_customer.func(customer_id="00000189", field="customer_name", new_value="{v}")'
    assert same(calls(rename.format(v="TAYLOR J")), calls(rename.format(v="taylor j")))


def test_status_list_name_and_board_are_case_sensitive():
    # add_customer does not validate status, so a wrongly cased one reaches the table and differs.
    add = 'customer_relationship_manager.add_customer.func(customer_name="Ada", assigned_to_email="raj.patel@atlas.com", status="{s}", product_interest="{p}")'
    assert not same(calls(add.format(s="won", p="Software")), calls(add.format(s="Won", p="Software")))
    assert same(calls(add.format(s="Won", p="software")), calls(add.format(s="Won", p="Software")))
    # the tools reject a wrongly cased list or board, so the state stays unchanged and differs.
    move = 'project_management.update_task.func(task_id="00000149", field="list_name", new_value="{v}")'
    assert not same(calls(move.format(v="in review")), calls(move.format(v="In Review")))
    assert not replay(calls(move.format(v="in review"))).changed()


def test_creation_order_and_duplicates_matter():
    assert not same(calls(event(), EVENT_B), calls(EVENT_B, event()))
    assert not same(calls(event(), event()), calls(event()))


def test_create_delete_create_equals_create():
    assert same(calls(event(), 'calendar.delete_event.func(event_id="00000300")', event()), calls(event()))


def test_argument_order_is_irrelevant():
    a = 'customer_relationship_manager.update_customer.func(customer_id="00000189", field="status", new_value="Won")'
    b = 'customer_relationship_manager.update_customer.func(new_value="Won", field="status", customer_id="00000189")'
    assert same(calls(a), calls(b))


def test_read_only_and_failed_calls_do_not_matter():
    noise = calls(
        'email.search_emails.func(query="budget")',
        'calendar.search_events.func(query="sync")',
        'company_directory.find_email_address.func(name="raj")',
        'email.delete_email.func(email_id="does-not-exist")',
        'calendar.search_events.func(query="(")',  # raises
    )
    target = calls('email.delete_email.func(email_id="00000479")')
    assert same(noise + target + noise, target)


def test_no_action_task_passes_with_do_nothing_and_fails_with_a_write():
    assert replay([]).same_state(World.fresh())
    assert not replay([]).changed()
    assert not replay(calls('calendar.delete_event.func(event_id="00000013")')).same_state(World.fresh())


def test_reassigning_a_customer_to_its_owner_is_a_no_op():
    owner = World.fresh().rows("crm")[0]["assigned_to_email"]
    same_owner = ToolCall(
        "customer_relationship_manager_update_customer",
        {"customer_id": "00000189", "field": "assigned_to_email", "new_value": owner.upper()},
    )
    world = World.fresh()
    result = world.call(same_owner)
    assert result.ok and not result.changed and not world.changed()


def test_case_only_change_is_not_a_scored_change():
    world = World.fresh()
    result = world.call(ToolCall("calendar_update_event", {"event_id": "00000013", "field": "event_name", "new_value": "SYNC UP"}))
    assert result.ok and not result.changed and not world.changed()


def test_row_labels_matter_like_pandas():
    # add_customer relabels rows 0..n (concat ignore_index); delete keeps labels: same rows, different labels.
    add = 'customer_relationship_manager.add_customer.func(customer_name="Ada", assigned_to_email="raj.patel@atlas.com", status="Lead")'
    delete = 'customer_relationship_manager.delete_customer.func(customer_id="00000189")'
    add_then_delete, delete_then_add = replay(calls(add, delete)), replay(calls(delete, add))
    assert add_then_delete.rows("crm") == delete_then_add.rows("crm")
    assert not add_then_delete.same_state(delete_then_add)


def test_changed_flag_per_call():
    world = World.fresh()
    assert world.call(parse_workbench_call('email.delete_email.func(email_id="00000479")')).changed
    assert not world.call(parse_workbench_call('email.search_emails.func(query="x")')).changed
    assert not world.call(parse_workbench_call('email.delete_email.func(email_id="00000479")')).changed


def test_fresh_worlds_share_the_base_until_changed():
    a, b = World.fresh(), World.fresh()
    assert a.emails is b.emails
    a.call(ToolCall("email_delete_email", {"email_id": "00000479"}))
    assert a.emails is not b.emails and len(b.rows("emails")) == 500


# ---- the 690 WorkBench ground-truth answers ------------------------------------------------


def _load_tasks() -> list[tuple[str, str, list[str]]]:
    tasks = []
    for path in sorted(ANSWERS_DIR.glob("*_queries_and_answers.csv")):
        with open(path, newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                tasks.append((path.name, row["query"], ast.literal_eval(row["answer"])))
    return tasks


@pytest.mark.skipif(not ANSWERS_DIR.is_dir(), reason="WorkBench answers not present")
def test_every_ground_truth_answer_replays_and_scores_as_success():
    tasks = _load_tasks()
    assert len(tasks) == 690
    failures, unchanged = [], []
    for source, query, answer in tasks:
        parsed = [parse_workbench_call(text) for text in answer]
        world = World.fresh()
        for tool_call in parsed:
            result = world.call(tool_call)
            if not result.ok:
                failures.append((source, query, tool_call.name, result.observation))
        if not world.same_state(replay(parsed)):
            failures.append((source, query, "same_state", "answer does not match itself"))
        if not world.changed():
            unchanged.append((query, answer))
    assert failures == []
    empty = [q for q, a in unchanged if not a]
    no_ops = [(q, a) for q, a in unchanged if a]
    assert len(empty) == sum(1 for _, _, a in tasks if not a) == 122
    # The two documented no-op answers: reassigning a customer to the owner it already has.
    assert len(no_ops) == 2
    assert all(len(a) == 1 and 'field="assigned_to_email"' in a[0] for _, a in no_ops)


@pytest.mark.skipif(not ANSWERS_DIR.is_dir(), reason="WorkBench answers not present")
def test_ground_truth_answers_of_different_tasks_rarely_collide():
    # A sanity check that the comparison is discriminative: distinct non-empty answers give distinct states,
    # except where the answers differ only in letter case or are no-ops.
    worlds = {}
    for _, _, answer in _load_tasks():
        if answer:
            worlds.setdefault(tuple(answer), replay(parse_workbench_call(t) for t in answer))
    keys = list(worlds)[:150]
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if worlds[a].same_state(worlds[b]):
                assert [x.lower() for x in a] == [y.lower() for y in b] or not worlds[a].changed()
