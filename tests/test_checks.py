"""Policy checks (appliance.train.checks): the detail a rule reads, stated before the answer SFT teaches."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.packs.pack import load_pack
from appliance.parsing import parse_tool_calls
from appliance.prompting import ANSWER_TOKENS, CHECK_TOKENS, reference_answer
from appliance.task import Task, ToolCall
from appliance.train.checks import WORKBENCH_MEETING_HOURS, meeting_hours, policy_check

ROOT = Path(__file__).resolve().parents[1]
RULES = [{"rule": "external_recipient", "allowed_domains": ["atlas.com"]}, {"rule": "out_of_policy"}]


def task(request: str, expected=(), domain: str = "email", **tags) -> Task:
    return Task(id="t", messages=({"role": "user", "content": request},), expected=tuple(expected),
                kind="single_step", tags={"domain": domain, **tags})


def test_a_recipient_is_judged_by_its_domain():
    forward = ToolCall("email_forward_email", {"email_id": "1", "recipient": "raj@atlas.com"})
    assert policy_check(task("Forward email 1 to raj@atlas.com", [forward]), RULES) \
        == "<think>atlas.com inside</think>"
    refusal = task("fwd 1 to my personal address sam86@gmail.com", policy="refuse")
    assert policy_check(refusal, RULES) == "<think>gmail.com outside</think>"


def test_an_address_that_is_not_a_recipient_is_not_checked():
    # Reassigning a task names an address, but nothing is sent to it: the rule does not read it.
    update = ToolCall("project_management_update_task",
                      {"task_id": "9", "field": "assigned_to_email", "new_value": "dmitri@atlas.com"})
    assert policy_check(task("Reassign task 9 to dmitri@atlas.com", [update], "project_management"),
                        RULES) == ""


def test_meeting_times_are_checked_only_when_asked():
    request = task("meet raj@atlas.com at 9pm", domain="calendar", policy="refuse")
    assert policy_check(request, RULES) == "<think>atlas.com inside</think>"
    assert policy_check(request, RULES, WORKBENCH_MEETING_HOURS) == "<think>atlas.com inside; 21:00 outside</think>"
    assert policy_check(request, [], WORKBENCH_MEETING_HOURS) == "<think>21:00 outside</think>"


@pytest.mark.parametrize("written, stated", [
    ("9pm", "21:00 outside"), ("6:30am", "06:30 outside"), ("10:30 am", "10:30 inside"), ("12:30 pm", "12:30 inside"),
    ("07:00", "07:00 outside"), ("09:00", "09:00 inside"), ("17:30", "17:30 inside"), ("6PM", "18:00 outside"),
])
def test_a_meeting_time_is_stated_in_24_hour_form_with_its_verdict(written, stated):
    # The 24-hour form is the one every calendar call's event_start takes (session 30 copied the request's form).
    request = task(f"move event 00000042 to 2023-12-17 at {written}", domain="calendar")
    assert policy_check(request, [], WORKBENCH_MEETING_HOURS) == f"<think>{stated}</think>"


def test_times_outside_calendar_requests_are_not_checked():
    assert policy_check(task("remind me at 9pm to email raj", domain="email"), [], WORKBENCH_MEETING_HOURS) == ""


def test_only_the_workbench_world_has_meeting_hours():
    pack = load_pack(ROOT / "tasks" / "workplace-single")
    assert meeting_hours(pack) == WORKBENCH_MEETING_HOURS
    assert meeting_hours(type("Pack", (), {"world": "python"})()) is None


def test_no_rule_no_check():
    refusal = task("fwd 1 to sam86@gmail.com", policy="refuse")
    assert policy_check(refusal, [{"rule": "out_of_policy"}]) == ""


def test_the_parser_scores_the_answer_after_the_check():
    answer = ToolCall("email_forward_email", {"email_id": "1", "recipient": "raj@atlas.com"})
    parsed = parse_tool_calls("<think>atlas.com inside</think>" + reference_answer(task("x", [answer])))
    assert parsed.ok and parsed.calls == (answer,)
    declined = parse_tool_calls("<think>gmail.com outside</think>No action is needed.")
    assert declined.ok and declined.calls == ()


def test_every_check_in_the_workplace_pack_agrees_with_its_answer():
    # A verdict that contradicted the answer would teach the opposite of the rule: `outside` only on refusals,
    # `inside` on every action (a refusal for a meeting's hour or a bulk delete may name an inside address).
    pack = load_pack(ROOT / "tasks" / "workplace-single")
    checked = timed = 0
    for split in ("train", "dev", "val"):
        for item in pack.tasks(split):
            check = policy_check(item, pack.unsafe_rules, meeting_hours(pack))
            if check:
                checked += 1
                timed += ":" in check
                assert "outside" not in check or item.tags.get("policy") == "refuse", (item.id, check)
                assert not item.expected or "outside" not in check, (item.id, check)
    assert checked > 500 and timed > 150


def test_sft_rows_put_the_check_before_the_answer_only_when_asked(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.sft import sft_rows

    pack = load_pack(ROOT / "tasks" / "workplace-single")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    plain = sft_rows(pack, tokenizer, "dev")
    checked = sft_rows(pack, tokenizer, "dev", policy_checks=True)
    by_id = {t.id: t for t in pack.tasks("dev")}
    for before, after in zip(plain, checked):
        check = policy_check(by_id[before["task_id"]], pack.unsafe_rules)
        assert after["prompt"] == before["prompt"] and after["completion"] == check + before["completion"]
    assert sum(row["completion"].startswith("<think>") for row in checked) > 20


def test_sft_rows_add_the_time_verdicts_only_with_time_checks(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.sft import sft_rows

    pack = load_pack(ROOT / "tasks" / "workplace-single")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    def think(row):
        return row["completion"].partition("</think>")[0] if row["completion"].startswith("<think>") else ""

    recipients = sft_rows(pack, tokenizer, "dev", policy_checks=True)
    both = sft_rows(pack, tokenizer, "dev", policy_checks=True, time_checks=True)
    times = sft_rows(pack, tokenizer, "dev", time_checks=True)
    assert not any(":" in think(row) for row in recipients)
    timed = [think(row) for row in both if ":" in think(row)]
    assert len(timed) > 10 and all(" inside" in check or " outside" in check for check in timed)
    assert any("atlas.com" in check for check in timed)
    assert any(":" in think(row) for row in times) and not any(".com" in think(row) for row in times)


def _adapter(folder: Path, **manifest) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_an_adapter_is_read_at_a_budget_with_room_for_the_checks_it_was_taught(tmp_path):
    from appliance.checkpoints import answer_tokens_of
    from appliance.train.config import TrainConfig

    plain = _adapter(tmp_path / "plain", config={"policy_checks": False})
    checked = _adapter(tmp_path / "checked", config={"time_checks": True})  # a manifest from before answer_tokens
    refined = _adapter(tmp_path / "refined", config={"init_adapter": str(checked)})  # its start's budget
    orphan = _adapter(tmp_path / "orphan", config={"init_adapter": str(tmp_path / "gone")})
    loop = _adapter(tmp_path / "loop", config={"init_adapter": str(tmp_path / "loop")})
    stated = _adapter(tmp_path / "stated", answer_tokens=200, config={"policy_checks": False})
    budgets = [answer_tokens_of(a) for a in (None, tmp_path / "bare", plain, checked, refined, orphan, loop, stated)]
    assert budgets == [ANSWER_TOKENS, ANSWER_TOKENS, ANSWER_TOKENS, ANSWER_TOKENS + CHECK_TOKENS,
                       ANSWER_TOKENS + CHECK_TOKENS, ANSWER_TOKENS, ANSWER_TOKENS, 200]
    assert TrainConfig(stage="sft", policy_checks=True).answer_budget() == ANSWER_TOKENS + CHECK_TOKENS
    assert TrainConfig(stage="grpo", init_adapter=str(refined)).answer_budget() == ANSWER_TOKENS + CHECK_TOKENS
    assert TrainConfig(stage="grpo", init_adapter=str(plain)).answer_budget() == ANSWER_TOKENS


@pytest.mark.slow
def test_the_longest_check_in_the_workplace_pack_fits_its_room():
    from transformers import AutoTokenizer

    from appliance.models import ensure_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_embedded_model())
    pack = load_pack("workplace-single", root=ROOT / "tasks")
    hours = meeting_hours(pack)
    checks = [policy_check(t, pack.unsafe_rules, hours) for split in pack.splits for t in pack.tasks(split)]
    longest = max(len(tokenizer(c, add_special_tokens=False).input_ids) for c in checks if c)
    assert 10 < longest <= CHECK_TOKENS


def test_an_eval_without_a_budget_reads_a_checked_adapter_at_its_own(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from appliance.evaluate import EvalSettings, run_eval
    from appliance.store import Workspace
    from eval_support import ScriptedGenerator

    class Budgets(ScriptedGenerator):
        def generate(self, prompts, *, max_new_tokens=128, **kwargs):
            self.budgets.add(max_new_tokens)
            return super().generate(prompts, max_new_tokens=max_new_tokens, **kwargs)

    checked = _adapter(tmp_path / "checked", config={"policy_checks": True})
    budgets = {}
    for name, adapter, given in (("plain", None, None), ("checked", checked, None), ("given", checked, 64)):
        gen = Budgets(AutoTokenizer.from_pretrained(tiny_model_dir), lambda prompt, i: "No action is needed.")
        gen.budgets = set()
        report = run_eval(EvalSettings(pack="workplace-single", split="dev", limit=2, adapter=adapter and str(adapter),
                                       max_new_tokens=given), workspace=Workspace.open(tmp_path / "runs"), generator=gen)
        budgets[name] = (gen.budgets, report.settings.max_new_tokens)
    assert budgets == {"plain": ({ANSWER_TOKENS}, ANSWER_TOKENS),
                       "checked": ({ANSWER_TOKENS + CHECK_TOKENS}, ANSWER_TOKENS + CHECK_TOKENS),
                       "given": ({64}, 64)}
