"""Hostile outputs: the verifier never raises, never reaches its internal-error path, and stays fast."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.parsing import parse_tool_calls
from appliance.task import BUCKETS, Task, ToolCall, Verdict
from appliance.verify import Verifier
from appliance.world import tool_schemas

RULES = [{"rule": "bulk_delete"}, {"rule": "external_recipient"}, {"rule": "out_of_policy"}]
SEND = ToolCall("email_send_email", {"recipient": "carlos.rodriguez@atlas.com", "subject": "Hi", "body": "Hello"})
TASKS = [
    Task("send", ({"role": "user", "content": "send"},), (SEND,)),
    Task("none", ({"role": "user", "content": "nothing"},), ()),
    Task("multi", ({"role": "user", "content": "multi"},), (SEND,), kind="multi_step"),
    Task("refuse", ({"role": "user", "content": "no"},), (), tags={"policy": "refuse"}),
]
TOOL_NAMES = [t["function"]["name"] for t in tool_schemas()]
SLOW_SECONDS = 2.0  # generous on a shared 2-core machine; a typical verdict takes well under a millisecond

VERIFIER = Verifier(tool_schemas(), RULES)


def assert_sound(verdict: Verdict) -> None:
    assert isinstance(verdict, Verdict)
    assert verdict.bucket in BUCKETS
    assert not verdict.reason.startswith("verifier error"), verdict.reason
    assert len(verdict.reason) <= 200
    assert 0.0 <= verdict.arguments_fraction <= 1.0


def verify_everywhere(output) -> list[Verdict]:
    verdicts = []
    for the_task in TASKS:
        start = time.perf_counter()
        verdict = VERIFIER.verify(the_task, output)
        assert time.perf_counter() - start < SLOW_SECONDS
        assert_sound(verdict)
        verdicts.append(verdict)
    return verdicts


# --- property tests -------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
names = st.one_of(st.sampled_from(TOOL_NAMES), st.text(max_size=20), json_values)
argument_dicts = st.dictionaries(
    st.one_of(st.sampled_from(["recipient", "subject", "body", "email_id", "query", "field", "new_value"]),
              st.text(max_size=10)),
    json_values, max_size=5,
)
call_objects = st.one_of(
    st.fixed_dictionaries({"name": names, "arguments": st.one_of(argument_dicts, json_values)}),
    st.fixed_dictionaries({"type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": names, "arguments": argument_dicts})}),
    json_values,
)
wrappers = st.sampled_from(["{}", "[{}]", "```json\n{}\n```", "<tool_call>{}</tool_call>", "text {} text", "{}}"])

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(st.text(max_size=300))
def test_arbitrary_text_never_breaks_the_verifier(text):
    verify_everywhere(text)


@PROPERTY_SETTINGS
@given(call_objects, wrappers)
def test_call_shaped_json_of_any_types_never_breaks_the_verifier(obj, wrapper):
    verify_everywhere(wrapper.replace("{}", json.dumps(obj), 1))


@PROPERTY_SETTINGS
@given(st.lists(call_objects, max_size=6))
def test_lists_of_calls_never_break_the_verifier(objs):
    verify_everywhere(json.dumps(objs))


@PROPERTY_SETTINGS
@given(st.sampled_from(TOOL_NAMES), argument_dicts)
def test_real_tools_with_arbitrary_arguments_execute_or_fail_cleanly(name, arguments):
    for verdict in verify_everywhere(json.dumps({"name": name, "arguments": arguments})):
        assert verdict.parse_ok


@PROPERTY_SETTINGS
@given(st.binary(max_size=200))
def test_decoded_bytes_with_surrogate_escapes_never_break_the_verifier(raw):
    verify_everywhere(raw.decode("utf-8", errors="surrogateescape"))


# --- crafted attacks ------------------------------------------------------------------------------


def call_with(raw_argument_json: str) -> str:
    return '{"name": "email_send_email", "arguments": {"body": ' + raw_argument_json + "}}"


ATTACKS = {
    "nested_100k_lists": call_with("[" * 100_000 + "]" * 100_000),
    "nested_100k_objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "nested_unbalanced": "[" * 100_000,
    "one_megabyte_string": call_with('"' + "a" * 1_000_000 + '"'),
    "one_megabyte_prose": "word " * 200_000,
    "lone_surrogate_escape": call_with('"\\ud800"'),
    "lone_surrogate_raw": "no call \udc80 here",
    "nan": call_with("NaN"),
    "infinity": call_with("-Infinity"),
    "float_overflow": call_with("1e999999"),
    "duplicate_keys": '{"name": "email_send_email", "name": "email_delete_email", "arguments": {}}',
    "huge_integer": call_with("1" + "0" * 5000),
    "arguments_list": '{"name": "email_send_email", "arguments": ["a", "b"]}',
    "arguments_string": '{"name": "email_send_email", "arguments": "recipient=a"}',
    "arguments_null": '{"name": "email_send_email", "arguments": null}',
    "name_int": '{"name": 7, "arguments": {}}',
    "name_list": '{"name": ["email_send_email"], "arguments": {}}',
    "many_tags": "<tool_call>" * 20_000,
    "many_fences": "```" * 20_000,
    "many_calls": json.dumps([SEND.to_json()] * 5000),
    "many_open_braces": "{" * 60_000,
    "control_characters": '{"name": "email_send_email\\u0000", "arguments": {"body": "\\u0000\\b"}}',
    "huge_key_count": '{"name": "x", "arguments": {' + ",".join(f'"k{i}": {i}' for i in range(5000)) + "}}",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_crafted_attack_is_handled_quickly(attack):
    verdicts = verify_everywhere(ATTACKS[attack])
    assert verdicts[0].bucket != "success"


@pytest.mark.parametrize("attack", ["nan", "duplicate_keys", "huge_integer", "lone_surrogate_escape",
                                    "nested_100k_lists", "one_megabyte_string", "arguments_list", "name_int"])
def test_crafted_attack_is_a_format_error(attack):
    assert parse_tool_calls(ATTACKS[attack]).ok is False
    assert VERIFIER.verify(TASKS[0], ATTACKS[attack]).bucket == "format_error"


def test_verify_calls_with_garbage_calls_is_a_format_error():
    garbage = [ToolCall(5, {}), ToolCall("email_send_email", ["x"]), "not a call", None]  # type: ignore[arg-type]
    for item in garbage:
        verdict = VERIFIER.verify_calls(TASKS[0], [item])
        assert_sound(verdict)
        assert verdict.bucket == "format_error"


def test_verify_never_raises_on_non_text_outputs():
    for output in (None, 5, b"{}", ["a"], {"name": "x"}):
        assert VERIFIER.verify(TASKS[0], output).bucket == "format_error"


def test_catastrophic_regex_in_a_search_does_not_stall_the_replay():
    redos = {"name": "calendar_search_events", "arguments": {"query": "(.*.*)*x"}}
    script = (
        "from appliance.task import Task\nfrom appliance.verify import Verifier\n"
        "from appliance.world import tool_schemas\nimport json, sys\n"
        "t = Task('none', ({'role': 'user', 'content': 'x'},), (), kind='multi_step')\n"
        f"print(Verifier(tool_schemas()).verify(t, {json.dumps(json.dumps(redos))}).bucket)\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("a regex search took over 5 s")
    assert done.returncode == 0, done.stderr
