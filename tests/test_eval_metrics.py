"""Eval metrics, the recommendation rules and the paired comparison."""
from __future__ import annotations

import pytest

from appliance.evaluate.compare import metric_deltas, paired_bootstrap
from appliance.evaluate.decision import DecisionThresholds, recommend
from appliance.evaluate.metrics import ScoredSample, pass_at_k, summarize
from appliance.task import Task, ToolCall, Verdict


def verdict(bucket: str, *, parse_ok: bool = True, unsafe: bool = False, n_calls: int = 1) -> Verdict:
    ok = bucket == "success"
    return Verdict(parse_ok=parse_ok, schema_ok=parse_ok, tool_ok=ok, arguments_ok=ok,
                   arguments_fraction=1.0 if ok else 0.0, executed_ok=ok, state_match=ok, unsafe=unsafe,
                   unsafe_rule="bulk_delete" if unsafe else None, bucket=bucket, reason="",
                   n_calls=n_calls if parse_ok else 0)


def sample(task_id: str, index: int, bucket: str, latency: float = 1.0, **kw) -> ScoredSample:
    return ScoredSample(task_id, index, "", verdict(bucket, **kw), 1.0 if bucket == "success" else 0.0, {},
                        latency, 10, 5)


def task(task_id: str, expected: bool = True) -> Task:
    calls = (ToolCall("email_delete_email", {"email_id": "1"}),) if expected else ()
    return Task(id=task_id, messages=({"role": "user", "content": task_id},), expected=calls)


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)


def test_summarize_reports_seed_metrics_buckets_and_floor():
    tasks = [task("a"), task("b"), task("none", expected=False)]
    samples = [sample("a", 0, "success"), sample("a", 1, "format_error", parse_ok=False),
               sample("b", 0, "wrong_tool"), sample("b", 1, "unsafe_action", unsafe=True),
               sample("none", 0, "success", latency=3.0, n_calls=0), sample("none", 1, "success", n_calls=0)]
    declining = {"a": 0.0, "b": 0.0, "none": 1.0}  # what scoring.declining_everything gives these tasks
    m = summarize(samples, tasks, k=2, wall_s=2.0, do_nothing=declining)
    assert m["valid_json_rate"] == pytest.approx(5 / 6)
    prose_instead_of_call = summarize([sample("a", 0, "missed_call", n_calls=0)], tasks, k=1, wall_s=1.0,
                                      do_nothing=declining)
    assert prose_instead_of_call["valid_json_rate"] == 0.0
    assert m["execution_success_rate"] == pytest.approx(3 / 6)
    assert m["unsafe_action_rate"] == pytest.approx(1 / 6)
    assert m["pass@1"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert m["pass@2"] == pytest.approx((1 + 0 + 1) / 3)
    assert m["inconsistent_tasks"] == 1
    assert m["buckets"]["wrong_tool"] == 1 and m["buckets"]["success"] == 3
    assert m["do_nothing_floor"] == pytest.approx(1 / 3)
    # The floor is the mean of the scores it is given, not the share of tasks that expect no call (also 1/3 above):
    # a pack whose scorer gives declining partial credit on a calling task raises it.
    partial = summarize(samples, tasks, k=2, wall_s=2.0, do_nothing={**declining, "b": 0.5})
    assert partial["do_nothing_floor"] == pytest.approx(0.5)
    assert m["success_on_change_tasks"] == pytest.approx(0.25)
    assert m["latency_p95_s"] == 3.0
    assert m["tokens_per_s"] == pytest.approx(30 / 2.0)


def test_summarize_reads_latency_as_the_tokens_each_request_generated():
    tasks = [task(f"t{i}") for i in range(20)]
    samples = [ScoredSample(f"t{i}", 0, "", verdict("success"), 1.0, {}, 9.0, 10, tokens)
               for i, tokens in enumerate([4] * 10 + [8] * 9 + [96])]
    m = summarize(samples, tasks, k=1, wall_s=1.0, do_nothing={})
    # The 19th of 20 requests in token order: the one answer that ran to the cap is beyond p95.
    assert (m["completion_tokens_p50"], m["completion_tokens_p95"]) == (4, 8)


@pytest.mark.parametrize("metrics,action", [
    ({"valid_json_rate": 0.1, "pass@1": 0.0, "k": 4, "pass@4": 0.0}, "sft"),
    ({"valid_json_rate": 0.95, "pass@1": 0.3, "k": 4, "pass@4": 0.6}, "grpo"),
    ({"valid_json_rate": 0.95, "pass@1": 0.0, "k": 4, "pass@4": 0.0}, "out_of_reach"),
    ({"valid_json_rate": 0.99, "pass@1": 0.95, "k": 4, "pass@4": 0.97}, "promote"),
])
def test_recommendation_follows_the_seed_rules(metrics, action):
    rec = recommend(metrics)
    assert rec.action == action
    assert "%" in rec.reason  # the numbers behind it are stated


def test_thresholds_are_settings():
    metrics = {"valid_json_rate": 0.5, "pass@1": 0.3, "k": 4, "pass@4": 0.6}
    assert recommend(metrics).action == "sft"
    assert recommend(metrics, DecisionThresholds(min_valid_format=0.4)).action == "grpo"


def test_paired_bootstrap_separates_real_gain_from_noise():
    tasks = [f"t{i}" for i in range(60)]
    a = {t: 0.0 for t in tasks}
    better = {t: 1.0 if i % 2 == 0 else 0.0 for i, t in enumerate(tasks)}
    d = paired_bootstrap(a, better)
    assert d.delta == pytest.approx(0.5) and d.significant_improvement
    same = paired_bootstrap(better, dict(better))
    assert same.delta == 0 and not same.significant_improvement and not same.significant_regression
    worse = paired_bootstrap(better, a)
    assert worse.significant_regression


def test_a_gain_held_by_two_templates_of_eight_is_noise_when_templates_are_resampled():
    """Tasks of one template pass or fail together: 20 flipped tasks are two draws, not twenty."""
    tasks = [f"t{i}" for i in range(80)]
    templates = {t: f"template-{i // 10}" for i, t in enumerate(tasks)}
    a = {t: 0.0 for t in tasks}
    b = {t: 1.0 if templates[t] in ("template-0", "template-1") else 0.0 for t in tasks}
    by_task = paired_bootstrap(a, b)
    by_template = paired_bootstrap(a, b, clusters=templates)
    assert by_task.delta == by_template.delta == pytest.approx(0.25)
    assert by_task.significant_improvement and not by_template.significant_improvement
    assert (by_task.unit, by_task.n_units, by_task.sample) == ("task", 80, "80 tasks")
    assert (by_template.unit, by_template.n_units, by_template.sample) == ("template", 8, "80 tasks in 8 templates")
    assert by_template.high - by_template.low > 2 * (by_task.high - by_task.low)


def test_one_template_per_task_resamples_exactly_as_tasks_do_and_untagged_tasks_stand_alone():
    a = {f"t{i}": float(i % 3 == 0) for i in range(30)}
    b = {f"t{i}": float(i % 2 == 0) for i in range(30)}
    plain = paired_bootstrap(a, b)
    own = paired_bootstrap(a, b, clusters={t: f"tpl-{t}" for t in a})
    assert (own.delta, own.low, own.high) == (plain.delta, plain.low, plain.high)
    partly = paired_bootstrap(a, b, clusters={"t0": "x", "t1": "x"})  # 28 untagged tasks + one template of two
    assert partly.n_units == 29 and partly.unit == "template"


def test_an_eval_stores_the_template_of_each_tagged_task():
    hello = ({"role": "user", "content": "hi"},)
    tagged = [Task(id=f"t{i}", messages=hello, expected=(), tags={"template": f"tpl{i % 2}"}) for i in range(3)]
    untagged = Task(id="u", messages=hello, expected=())
    samples = [sample(t.id, 0, "success") for t in [*tagged, untagged]]
    metrics = summarize(samples, [*tagged, untagged], k=1, wall_s=1.0, do_nothing={})
    assert metrics["task_templates"] == {"t0": "tpl0", "t1": "tpl1", "t2": "tpl0"}
    assert "task_templates" not in summarize(samples[-1:], [untagged], k=1, wall_s=1.0, do_nothing={})


def test_metric_deltas_only_compares_shared_numbers():
    rows = metric_deltas({"pass@1": 0.2, "mean_reward": 0.1}, {"pass@1": 0.5})
    assert rows == [("pass@1", 0.2, 0.5, pytest.approx(0.3))]
