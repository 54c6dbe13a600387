"""Reward schemes and the TRL reward functions, called exactly as GRPOTrainer calls them."""
from __future__ import annotations

import functools
import inspect
import json
from types import SimpleNamespace

import pytest

import appliance.rewards as rewards_module
from appliance.errors import ApplianceError
from appliance.rewards import (
    COMPONENTS,
    SCHEMES,
    completion_text,
    components,
    make_reward_funcs,
    reward_weights,
    score,
)
from appliance.task import Task, ToolCall
from appliance.verify import Verifier
from appliance.world import tool_schemas

RULES = [{"rule": "external_recipient", "allowed_domains": ["atlas.com"]}]
SEND = ToolCall("email_send_email", {"recipient": "carlos.rodriguez@atlas.com", "subject": "Hi", "body": "Hello"})
EVENT = ToolCall("calendar_create_event", {"event_name": "Sync", "participant_email": "aisha.chen@atlas.com",
                                           "event_start": "2023-12-01 13:00:00", "duration": "60"})
TASKS = {
    "send": Task("send", ({"role": "user", "content": "email Carlos"},), (SEND,)),
    "event": Task("event", ({"role": "user", "content": "book it"},), (EVENT,)),
    "none": Task("none", ({"role": "user", "content": "if x then..."},), ()),
}
GOOD = json.dumps(SEND.to_json())
HALF_RIGHT = json.dumps({"name": SEND.name, "arguments": {**SEND.arguments, "body": "Bye"}})
UNSAFE = json.dumps({"name": SEND.name, "arguments": {**SEND.arguments, "recipient": "x@evil.com"}})


@pytest.fixture(scope="module")
def verifier() -> Verifier:
    return Verifier(tool_schemas(), RULES)


# --- schemes --------------------------------------------------------------------------------------


def test_binary_scheme_rewards_only_success(verifier):
    assert score(verifier.verify(TASKS["send"], GOOD), "binary").total == 1.0
    for output in (HALF_RIGHT, UNSAFE, "nope", "{"):
        assert score(verifier.verify(TASKS["send"], output), "binary").total == 0.0


def test_decline_cost_ranks_a_declined_action_below_a_malformed_attempt(verifier):
    declined, malformed = "I will not do that.", "{"
    assert score(verifier.verify(TASKS["send"], declined), "decline_cost").components["missed_call"] == 1.0
    assert score(verifier.verify(TASKS["send"], declined), "decline_cost").total == pytest.approx(-0.2)
    assert score(verifier.verify(TASKS["send"], malformed), "decline_cost").total == 0.0
    assert score(verifier.verify(TASKS["send"], declined), "attempt").total == 0.0  # attempt: the two tie
    for output in (GOOD, HALF_RIGHT, malformed):  # every other outcome scores as under attempt
        assert (score(verifier.verify(TASKS["send"], output), "decline_cost").total
                == score(verifier.verify(TASKS["send"], output), "attempt").total)


def test_shaped_scheme_uses_the_seed_weights(verifier):
    assert score(verifier.verify(TASKS["send"], GOOD), "shaped").total == pytest.approx(0.1 + 0.2 + 0.3 + 1.0)
    partial = score(verifier.verify(TASKS["send"], HALF_RIGHT), "shaped")
    assert partial.total == pytest.approx(0.1 + 0.2 + 0.3 * 2 / 3)
    assert partial.components == {"completed": 0.0, "right_tool": 1.0, "valid_artifact": 1.0,
                                  "partial_arguments": pytest.approx(2 / 3), "unsafe": 0.0,
                                  "right_decision": 1.0, "missed_call": 0.0}
    wrong_tool = score(verifier.verify(TASKS["event"], GOOD), "shaped")
    assert wrong_tool.total == pytest.approx(0.2)
    assert score(verifier.verify(TASKS["send"], "{"), "shaped").total == 0.0


def test_unsafe_output_scores_below_doing_nothing(verifier):
    unsafe = score(verifier.verify(TASKS["send"], UNSAFE), "shaped")
    assert unsafe.components["unsafe"] == 1.0
    assert unsafe.total == pytest.approx(0.2 - 1.0)  # valid artifact, but no tool/argument credit
    assert unsafe.total < score(verifier.verify(TASKS["send"], "I won't."), "shaped").total


def test_declining_a_task_that_needs_a_call_earns_nothing(verifier):
    assert score(verifier.verify(TASKS["send"], "Done!"), "shaped").total == 0.0
    assert score(verifier.verify(TASKS["none"], "Nothing to do."), "shaped").total == pytest.approx(1.6)


def test_attempt_scores_a_declined_action_below_a_wrong_attempt(verifier):
    """Under `binary` a decline and a wrong call of an action both score 0, so only refusal tasks teach the
    act-or-decline decision; `attempt` orders it on both kinds of task, and never credits an unsafe call."""
    def attempt(task, output):
        return score(verifier.verify(TASKS[task], output), "attempt").total

    assert attempt("send", GOOD) == pytest.approx(1.2)
    assert attempt("send", HALF_RIGHT) == pytest.approx(0.2)  # a schema-valid call with a wrong argument
    assert attempt("send", "Done!") == 0.0 == attempt("send", "{")  # declined, or no call at all
    assert attempt("event", GOOD) == pytest.approx(0.2)  # the wrong tool is still an attempt
    assert attempt("send", UNSAFE) == 0.0
    assert attempt("none", "Nothing to do.") == pytest.approx(1.2)
    assert attempt("none", GOOD) == 0.0  # a call where none is needed


def _total(verifier, task, output, scheme):
    return score(verifier.verify(TASKS[task], output), scheme).total


def test_safe_attempt_is_attempt_with_an_unsafe_action_below_every_other_answer(verifier):
    total = functools.partial(_total, verifier)

    for task, output in (("send", GOOD), ("send", HALF_RIGHT), ("send", "Done!"), ("none", "Nothing to do.")):
        assert total(task, output, "safe_attempt") == total(task, output, "attempt")
    assert total("send", UNSAFE, "safe_attempt") == pytest.approx(-1.0)
    assert total("send", UNSAFE, "safe_attempt") < total("send", "Done!", "safe_attempt")


def test_tool_credit_pays_the_right_tool_and_nothing_for_a_wrong_one_or_a_decline(verifier):
    """The answers `attempt` and `binary` leave as cheap attractors (a valid call of any tool; a decline) earn 0."""
    credit = functools.partial(_total, verifier, scheme="tool_credit")

    assert credit("send", GOOD) == pytest.approx(1.2)
    assert credit("send", HALF_RIGHT) == pytest.approx(0.2)  # the expected tool, an argument wrong
    assert credit("event", GOOD) == 0.0  # a valid call of another tool: 0.2 under attempt
    assert credit("send", "Done!") == 0.0 == credit("send", "{")  # declined where a call is due, or malformed
    assert credit("send", UNSAFE) == 0.0
    assert credit("none", "Nothing to do.") == pytest.approx(1.2)  # declined where none is due
    assert credit("none", GOOD) == 0.0


def test_arguments_pays_each_right_argument_and_costs_each_missing_or_extra_one(verifier):
    """No answer short of the right call earns what it does: the right tool then stop (tool_credit's attractor) pays
    a share, a decline, another tool and an unsafe call pay nothing where a call is due."""
    credit = functools.partial(_total, verifier, scheme="arguments")

    def send(arguments):
        return json.dumps({"name": SEND.name, "arguments": arguments})

    recipient_only = send({"recipient": SEND.arguments["recipient"]})
    two_right = send({key: SEND.arguments[key] for key in ("recipient", "subject")})
    extra = send({**SEND.arguments, "cc": "x@atlas.com"})
    assert credit("send", GOOD) == pytest.approx(1.5)
    assert credit("send", recipient_only) == pytest.approx(0.5 / 3)
    assert credit("send", recipient_only) < credit("send", two_right) < credit("send", GOOD)
    assert credit("send", two_right) == credit("send", HALF_RIGHT)  # a wrong value counts as a missing one
    assert credit("send", extra) == pytest.approx(0.5 * 3 / 4)  # three right keys of four given: the extra costs
    assert credit("event", GOOD) == 0.0  # another tool
    assert credit("send", "Done!") == 0.0 == credit("send", "{") == credit("send", UNSAFE)
    assert credit("none", "Nothing to do.") == pytest.approx(1.5)  # declined where none is due
    assert credit("none", GOOD) == 0.0


def test_every_component_is_kept_even_with_weight_zero(verifier):
    breakdown = score(verifier.verify(TASKS["send"], HALF_RIGHT), "binary")
    assert set(breakdown.components) == set(COMPONENTS)
    assert breakdown.components["right_tool"] == 1.0 and breakdown.total == 0.0


def _docstring_weight_table() -> dict[str, dict[str, float]]:
    """The weight table in `appliance.rewards`' docstring, as {scheme: {component: weight}}."""
    lines = rewards_module.__doc__.splitlines()
    border = next(i for i, line in enumerate(lines) if line.startswith("====="))
    header = lines[border + 1].split()
    schemes = header[2:]  # after "component" and "value"
    table: dict[str, dict[str, float]] = {scheme: {} for scheme in schemes}
    for line in lines[border + 3:]:
        if line.startswith("====="):
            break
        cells = line.split()
        if cells and cells[0] in COMPONENTS:  # a component's first line (its value may wrap onto more)
            for scheme, weight in zip(schemes, cells[-len(schemes):]):
                table[scheme][cells[0]] = float(weight)
    return table


def test_the_docstring_table_shows_the_weights_the_schemes_use():
    assert _docstring_weight_table() == SCHEMES


def test_unknown_scheme_is_an_actionable_error(verifier):
    with pytest.raises(ApplianceError, match="unknown reward scheme 'dense'"):
        score(verifier.verify(TASKS["send"], GOOD), "dense")
    with pytest.raises(ApplianceError):
        make_reward_funcs(verifier, "dense", TASKS)


def test_reward_weights_follow_function_order(verifier):
    for scheme in SCHEMES:
        funcs = make_reward_funcs(verifier, scheme, TASKS)
        assert [f.__name__ for f in funcs] == list(COMPONENTS)
        assert reward_weights(scheme) == [f.weight for f in funcs]


# --- TRL calling convention -----------------------------------------------------------------------


def trl_kwargs(task_ids, logs):
    """The keyword arguments GRPOTrainer._calculate_rewards passes besides prompts/completions."""
    return dict(
        completion_ids=[[1, 2, 3]] * len(task_ids),
        task_id=list(task_ids),
        prompt=["ignored column"] * len(task_ids),
        trainer_state=None,
        log_extra=lambda column, values: logs.setdefault(column, []).extend(values),
        log_metric=lambda name, value: logs.setdefault(name, []).append(value),
    )


def test_called_exactly_as_trl_calls_them(verifier):
    funcs = make_reward_funcs(verifier, "shaped", TASKS)
    prompts = ["p1", "p2", "p3", "p4"]
    completions = [GOOD, HALF_RIGHT, "{", "Nothing to do."]
    task_ids = ["send", "send", "send", "none"]
    logs: dict = {}
    per_func = [f(prompts=prompts, completions=completions, **trl_kwargs(task_ids, logs)) for f in funcs]
    by_name = dict(zip(COMPONENTS, per_func))
    assert by_name["completed"] == [1.0, 0.0, 0.0, 1.0]
    assert by_name["right_tool"] == [1.0, 1.0, 0.0, 1.0]
    assert by_name["valid_artifact"] == [1.0, 1.0, 0.0, 1.0]
    assert by_name["partial_arguments"] == pytest.approx([1.0, 2 / 3, 0.0, 1.0])
    # TRL: rewards = (rewards_per_func * reward_weights).nansum(dim=1)
    totals = [sum(w * col[i] for w, col in zip(reward_weights("shaped"), per_func)) for i in range(4)]
    assert totals == pytest.approx([1.6, 0.1 + 0.2 + 0.2, 0.0, 1.6])
    assert logs["verdict_bucket"] == ["success", "wrong_arguments", "format_error", "success"]
    assert len(logs["verdict_reason"]) == 4  # logged once per batch, by the first function only
    assert logs["verdict/success"] == [0.5]


def test_positional_prompts_and_completions_work(verifier):
    completed = make_reward_funcs(verifier, "binary", TASKS)[0]
    assert completed(["p"], [GOOD], task_id=["send"], trainer_state=None) == [1.0]


def test_signature_is_prompts_completions_kwargs(verifier):
    parameters = inspect.signature(make_reward_funcs(verifier, "binary", TASKS)[0]).parameters
    assert list(parameters)[:2] == ["prompts", "completions"]
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def test_conversational_completions(verifier):
    completed = make_reward_funcs(verifier, "binary", TASKS)[0]
    as_content = [[{"role": "assistant", "content": f"<tool_call>{GOOD}</tool_call>"}]]
    as_tool_calls = [[{"role": "assistant", "content": "",
                       "tool_calls": [{"type": "function", "function": {"name": SEND.name,
                                                                         "arguments": SEND.arguments}}]}]]
    as_parts = [[{"role": "assistant", "content": [{"type": "text", "text": GOOD}]}]]
    for completions in (as_content, as_tool_calls, as_parts):
        assert completed(prompts=[[{"role": "user", "content": "x"}]], completions=completions,
                         task_id=["send"]) == [1.0]


def test_multi_turn_completion_keeps_every_assistant_call():
    turns = [
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "a", "arguments": "{}"}}]},
        {"role": "tool", "content": "{ignored: tool output}"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "b", "arguments": {"x": 1}}]},
    ]
    text = completion_text(turns)
    assert "{ignored" not in text
    assert text.count("<tool_call>") == 2


def test_verdicts_are_cached_across_component_functions(verifier):
    calls = []
    original = verifier.verify

    def counting(task, output):
        calls.append(output)
        return original(task, output)

    counted = SimpleNamespace(verify=counting)
    funcs = make_reward_funcs(verifier, "shaped", TASKS)
    funcs[0]._cache.verifier = counted  # count the verifications the five functions share
    for func in funcs:
        func(prompts=["p", "p"], completions=[GOOD, GOOD], task_id=["send", "send"])
    assert len(calls) == 1


def test_missing_task_id_column_is_an_actionable_error(verifier):
    completed = make_reward_funcs(verifier, "binary", TASKS)[0]
    with pytest.raises(ApplianceError, match="task_id"):
        completed(prompts=["p"], completions=[GOOD])
    with pytest.raises(ApplianceError, match="not among the training tasks"):
        completed(prompts=["p"], completions=[GOOD], task_id=["missing"])


def test_pack_is_duck_typed_and_provides_tasks():
    pack = SimpleNamespace(tools=tool_schemas(), unsafe_rules=RULES, world="workbench", task=TASKS.__getitem__)
    completed = make_reward_funcs(pack, "binary")[0]
    assert completed(prompts=["p"], completions=[GOOD], task_id=["send"]) == [1.0]


def test_components_of_a_verdict_are_floats(verifier):
    values = components(verifier.verify(TASKS["send"], GOOD))
    assert all(isinstance(v, float) for v in values.values())


def test_works_as_a_grpo_trainer_reward_list(verifier):
    trainer_module = pytest.importorskip("trl.trainer.utils")
    funcs = make_reward_funcs(verifier, "shaped", TASKS)
    assert [trainer_module.get_callable_name(f) for f in funcs] == list(COMPONENTS)
    assert not any(trainer_module.is_async_callable(f) for f in funcs)


@pytest.mark.slow
def test_real_grpo_trainer_computes_the_scheme_total(verifier, tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": "email Carlos", "task_id": "send"}] * 4
    config = GRPOConfig(output_dir=str(tmp_path), reward_weights=reward_weights("shaped"), use_cpu=True,
                        per_device_train_batch_size=2, num_generations=2, max_completion_length=8, report_to=[])
    trainer = GRPOTrainer(model=str(tiny_model_dir), reward_funcs=make_reward_funcs(verifier, "shaped", TASKS),
                          args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    per_func = trainer._calculate_rewards(rows[:2], ["email Carlos"] * 2, [GOOD, HALF_RIGHT], [[1], [1]])
    totals = (per_func * trainer.reward_weights).nansum(dim=1).tolist()
    assert trainer.reward_func_names == list(COMPONENTS)
    assert totals == pytest.approx([1.6, 0.1 + 0.2 + 0.3 * 2 / 3])
    assert trainer._pending_extra_logs["verdict_bucket"] == ["success", "wrong_arguments"]
