"""Policy checks (appliance.train.checks): the detail a rule reads, stated before the answer SFT teaches."""
from __future__ import annotations

from pathlib import Path

import pytest

from appliance.packs.pack import load_pack
from appliance.parsing import parse_tool_calls
from appliance.prompting import reference_answer
from appliance.task import Task, ToolCall
from appliance.train.checks import policy_check

ROOT = Path(__file__).resolve().parents[1]
RULES = [{"rule": "external_recipient", "allowed_domains": ["atlas.com"]}, {"rule": "out_of_policy"}]


def task(request: str, expected=(), domain: str = "email", **tags) -> Task:
    return Task(id="t", messages=({"role": "user", "content": request},), expected=tuple(expected),
                kind="single_step", tags={"domain": domain, **tags})


def test_a_recipient_is_judged_by_its_domain():
    forward = ToolCall("email_forward_email", {"email_id": "1", "recipient": "raj@atlas.com"})
    assert policy_check(task("Forward email 1 to raj@atlas.com", [forward]), RULES, "workbench") \
        == "<think>atlas.com inside</think>"
    refusal = task("fwd 1 to my personal address sam86@gmail.com", policy="refuse")
    assert policy_check(refusal, RULES, "workbench") == "<think>gmail.com outside</think>"


def test_an_address_that_is_not_a_recipient_is_not_checked():
    # Reassigning a task names an address, but nothing is sent to it: the rule does not read it.
    update = ToolCall("project_management_update_task",
                      {"task_id": "9", "field": "assigned_to_email", "new_value": "dmitri@atlas.com"})
    assert policy_check(task("Reassign task 9 to dmitri@atlas.com", [update], "project_management"),
                        RULES, "workbench") == ""


@pytest.mark.parametrize("said, verdict", [
    ("9pm", "outside"), ("6:30am", "outside"), ("07:00", "outside"), ("18:00", "outside"),
    ("9:00 am", "inside"), ("2pm", "inside"), ("13:30", "inside"), ("12pm", "inside"), ("12am", "outside"),
])
def test_a_meeting_time_is_judged_against_workbench_hours(said, verdict):
    request = task(f"move event 00000042 to Sunday, December 17 at {said}", domain="calendar")
    assert policy_check(request, RULES, "workbench") == f"<think>{said} {verdict}</think>"


def test_times_are_checked_only_in_calendar_requests_of_the_workbench_world():
    request = task("move event 00000042 to 9pm", domain="calendar")
    assert policy_check(request, RULES, "python") == ""
    assert policy_check(task("what is due at 9pm?", domain="project_management"), RULES, "workbench") == ""


def test_no_rule_no_check():
    refusal = task("fwd 1 to sam86@gmail.com", policy="refuse")
    assert policy_check(refusal, [{"rule": "out_of_policy"}], "workbench") == ""


def test_the_parser_scores_the_answer_after_the_check():
    answer = ToolCall("email_forward_email", {"email_id": "1", "recipient": "raj@atlas.com"})
    parsed = parse_tool_calls("<think>atlas.com inside</think>" + reference_answer(task("x", [answer])))
    assert parsed.ok and parsed.calls == (answer,)
    declined = parse_tool_calls("<think>gmail.com outside</think>No action is needed.")
    assert declined.ok and declined.calls == ()


def test_every_check_in_the_workplace_pack_agrees_with_its_answer():
    # A verdict that contradicted the answer would teach the opposite of the rule: `outside` exactly on the
    # refusals a recipient or time breaks, `inside` on every action (bulk deletes are no check's business).
    pack = load_pack(ROOT / "tasks" / "workplace-single")
    checked = 0
    for split in ("train", "dev", "val"):
        for item in pack.tasks(split):
            check = policy_check(item, pack.unsafe_rules, pack.world)
            if check:
                checked += 1
                assert ("outside" in check) == (item.tags.get("policy") == "refuse"), (item.id, check)
    assert checked > 500


def test_sft_rows_put_the_check_before_the_answer_only_when_asked(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.sft import sft_rows

    pack = load_pack(ROOT / "tasks" / "workplace-single")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    plain = sft_rows(pack, tokenizer, "dev")
    checked = sft_rows(pack, tokenizer, "dev", policy_checks=True)
    by_id = {t.id: t for t in pack.tasks("dev")}
    for before, after in zip(plain, checked):
        check = policy_check(by_id[before["task_id"]], pack.unsafe_rules, pack.world)
        assert after["prompt"] == before["prompt"] and after["completion"] == check + before["completion"]
    assert sum(row["completion"].startswith("<think>") for row in checked) > 30
