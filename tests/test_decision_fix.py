"""The lightest fix: prompt, SFT, DPO or GRPO, read from the failure buckets, each with its counts."""
from __future__ import annotations

import json

from appliance.evaluate.decision import failure_detail, lightest_fix, recommend
from appliance.evaluate.metrics import ScoredSample
from appliance.task import Task, ToolCall, Verdict


def metrics(buckets: dict[str, int], *, k: int = 1, p1: float = 0.3, pk: float | None = None, n_tasks: int = 20,
            inconsistent: int = 0, detail: dict | None = None) -> dict:
    m = {"valid_json_rate": 0.9, "pass@1": p1, "k": k, f"pass@{k}": p1 if pk is None else pk, "buckets": buckets,
         "n_tasks": n_tasks, "inconsistent_tasks": inconsistent}
    if detail is not None:
        m["failure_detail"] = detail
    return m


def test_one_tool_confused_with_another_is_a_prompt_fix():
    fix = lightest_fix(metrics({"wrong_tool": 8, "wrong_arguments": 2, "success": 10},
                               detail={"confusions": {"email_reply_email → email_send_email": 7}}))
    assert fix.kind == "prompt" and "7 of 10 failures" in fix.reason
    assert fix.evidence["confusion"] == {"email_reply_email → email_send_email": 7}


def test_one_undocumented_missing_argument_is_a_tool_description_fix():
    fix = lightest_fix(metrics({"wrong_arguments": 6, "success": 4},
                               detail={"undocumented_missing_arguments": {"calendar_create_event.duration": 5}}))
    assert fix.kind == "prompt" and "calendar_create_event.duration" in fix.reason


def test_one_undeclared_argument_in_most_failures_is_a_tool_description_fix():
    fix = lightest_fix(metrics({"wrong_arguments": 6, "success": 4},
                               detail={"undeclared_arguments": {"calendar_delete_event.field": 4}}))
    assert fix.kind == "prompt"
    assert "4 of 6 failures: calls carry an argument their tool does not declare" in fix.reason
    assert fix.evidence["undeclared_argument"] == {"calendar_delete_event.field": 4}
    spread = lightest_fix(metrics({"wrong_arguments": 6, "success": 4},
                                  detail={"undeclared_arguments": {"a.x": 2, "b.y": 2}}))
    assert spread.kind == "grpo"  # no single argument explains half the failures


def test_triaged_hallucinated_apis_are_a_prompt_fix():
    fix = lightest_fix(metrics({"success": 10}), triage_modes={"hallucinated_api": 4, "success": 3})
    assert fix.kind == "prompt" and fix.evidence["triage"] == {"hallucinated_api": 4}


def test_mostly_format_errors_is_sft():
    fix = lightest_fix(metrics({"format_error": 9, "wrong_tool": 3}))
    assert fix.kind == "sft" and "9 of 12 failures are format errors" in fix.reason


def test_sometimes_passing_the_same_tasks_is_dpo():
    fix = lightest_fix(metrics({"wrong_arguments": 10, "success": 30}, k=4, pk=0.6, inconsistent=8))
    assert fix.kind == "dpo" and fix.evidence["inconsistent_tasks"] == 8


def test_verifiable_and_sometimes_reached_is_grpo():
    fix = lightest_fix(metrics({"wrong_arguments": 5, "execution_error": 5, "success": 5}))
    assert fix.kind == "grpo"


def test_nothing_reached_and_no_pattern_is_sft_and_nothing_failed_is_no_fix():
    assert lightest_fix(metrics({"wrong_arguments": 5, "missed_call": 5}, p1=0.0)).kind == "sft"
    assert lightest_fix(metrics({"success": 5})) is None


def test_the_action_string_the_pipeline_splits_on_is_unchanged():
    rec = recommend(metrics({"format_error": 9, "success": 1}) | {"valid_json_rate": 0.2})
    assert rec.action == "sft" and str(rec).split(":", 1)[0] == "sft"
    assert str(rec).startswith(f"sft: {rec.reason}") and "Lightest fix: sft" in str(rec)


def _verdict(bucket: str) -> Verdict:
    return Verdict(True, True, bucket != "wrong_tool", False, 0.5, False, False, False, None, bucket, "")


def test_failure_detail_counts_confusions_and_undocumented_missing_arguments():
    tools = [{"type": "function", "function": {"name": "a_send", "description": "Send.", "parameters": {
        "type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string",
                                                                          "description": "the text"}}}}},
             {"type": "function", "function": {"name": "a_reply", "description": "", "parameters": {}}}]
    task = Task("t1", ({"role": "user", "content": "send"},), (ToolCall("a_send", {"to": "x", "body": "y"}),),
                "single_step", {})
    samples = [ScoredSample("t1", 0, '{"name": "a_reply", "arguments": {}}', _verdict("wrong_tool"), 0, {}, 0, 0, 0),
               ScoredSample("t1", 1, '{"name": "a_send", "arguments": {}}', _verdict("wrong_arguments"), 0, {}, 0,
                            0, 0)]
    detail = failure_detail(samples, {"t1": task}, lambda _: tools)
    assert detail == {"confusions": {"a_send → a_reply": 1}, "undocumented_missing_arguments": {"a_send.to": 1},
                      "undeclared_arguments": {}}


def test_failure_detail_counts_arguments_a_closed_schema_does_not_declare():
    """As the verifier reads a schema: closed by default when it lists properties, open when it says so."""
    def tool(name: str, **extra) -> dict:
        return {"type": "function", "function": {"name": name, "description": "", "parameters": {
            "type": "object", "properties": {"event_id": {"type": "string"}}, **extra}}}

    tools = [tool("delete"), tool("strict_delete", additionalProperties=False), tool("open_delete",
                                                                                       additionalProperties=True)]
    samples, tasks = [], {}
    for index, name in enumerate(("delete", "strict_delete", "open_delete")):
        task_id = f"t{index}"
        tasks[task_id] = Task(task_id, ({"role": "user", "content": "delete 1"},),
                              (ToolCall(name, {"event_id": "1"}),), "single_step", {})
        completion = json.dumps({"name": name, "arguments": {"event_id": "1", "field": "x", "new_value": "1"}})
        samples.append(ScoredSample(task_id, 0, completion, _verdict("wrong_arguments"), 0, {}, 0, 0, 0))
    detail = failure_detail(samples, tasks, lambda _: tools)
    assert detail["undeclared_arguments"] == {"delete.field": 1, "delete.new_value": 1, "strict_delete.field": 1,
                                              "strict_delete.new_value": 1}
