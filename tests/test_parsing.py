"""parse_tool_calls: every accepted shape, the no-call/broken-call line, and every guard."""
from __future__ import annotations

import json

import pytest

from appliance.parsing import MAX_CALLS, MAX_CHARS, MAX_DEPTH, parse_tool_calls
from appliance.task import ToolCall

SEND = ToolCall("email_send_email", {"recipient": "a@atlas.com", "subject": "Hi", "body": "Hello"})
SEND_JSON = json.dumps(SEND.to_json())


def only_call(text: str) -> ToolCall:
    result = parse_tool_calls(text)
    assert result.ok, result.error
    assert len(result.calls) == 1
    return result.calls[0]


# --- accepted shapes -------------------------------------------------------------------------------


def test_bare_object():
    assert only_call(SEND_JSON) == SEND
    assert parse_tool_calls(SEND_JSON).shape == "bare"


def test_surrounding_whitespace_is_fine():
    assert only_call(f"\n\n  {SEND_JSON}  \n") == SEND


def test_parameters_is_an_alias_of_arguments():
    text = json.dumps({"name": SEND.name, "parameters": SEND.arguments})
    assert only_call(text) == SEND


def test_openai_shape_with_arguments_as_json_string():
    text = json.dumps({"type": "function", "function": {"name": SEND.name, "arguments": json.dumps(SEND.arguments)}})
    assert only_call(text) == SEND


def test_openai_shape_with_arguments_as_object_and_an_id():
    text = json.dumps({"id": "call_1", "type": "function", "function": {"name": SEND.name, "arguments": SEND.arguments}})
    assert only_call(text) == SEND


def test_missing_arguments_mean_no_arguments():
    assert only_call('{"name": "company_directory_list"}') == ToolCall("company_directory_list", {})


def test_json_list_of_calls_keeps_order():
    second = ToolCall("email_delete_email", {"email_id": "00000001"})
    result = parse_tool_calls(json.dumps([SEND.to_json(), second.to_json()]))
    assert result.ok and result.calls == (SEND, second) and result.shape == "list"


def test_empty_list_is_an_explicit_no_call():
    result = parse_tool_calls(" [ ] ")
    assert result.ok and result.calls == ()


@pytest.mark.parametrize("fence", ["```json", "```", "```JSON"])
def test_fenced_block_with_prose_around(fence):
    text = f"Sure, here is the call:\n{fence}\n{SEND_JSON}\n```\nLet me know!"
    assert only_call(text) == SEND
    assert parse_tool_calls(text).shape == "fence"


def test_fence_on_one_line():
    assert only_call(f"```{SEND_JSON}```") == SEND


def test_fence_tagged_with_another_language_is_an_error():
    result = parse_tool_calls(f"```python\n{SEND_JSON}\n```")
    assert not result.ok and "python" in result.error


def test_several_tool_call_tags_with_prose():
    second = ToolCall("calendar_delete_event", {"event_id": "00000001"})
    text = (f"I'll do both.\n<tool_call>\n{SEND_JSON}\n</tool_call>\n"
            f"<tool_call>{json.dumps(second.to_json())}</tool_call> done")
    result = parse_tool_calls(text)
    assert result.ok and result.calls == (SEND, second) and result.shape == "tool_call"


def test_leading_think_block_is_dropped():
    assert only_call(f"<think>the user wants {{an email}}</think>\n{SEND_JSON}") == SEND


def test_unicode_arguments_survive():
    call = only_call('{"name": "email_send_email", "arguments": {"body": "caf\\u00e9 \\ud83d\\ude00 ok"}}')
    assert call.arguments["body"] == "café 😀 ok"


# --- no call versus broken call --------------------------------------------------------------------


@pytest.mark.parametrize("text", ["I can't do that.", "No action is needed.", "[Note] nothing to do", "Готово."])
def test_prose_without_a_call_attempt_is_a_valid_no_call(text):
    result = parse_tool_calls(text)
    assert result.ok and result.calls == () and result.shape == "prose"


@pytest.mark.parametrize("text", ["", "   ", "\x00\x01", "🙂🙂🙂", "?!", "\x1b[31m red"])
def test_empty_or_wordless_output_is_a_format_error_not_a_no_call(text):
    result = parse_tool_calls(text)
    assert not result.ok and result.error


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "email_send_email",',  # truncated
        "Sure! {name: email_send_email}",  # prose with a brace
        f"Here you go: {SEND_JSON}",  # bare JSON with prose before it
        f"{SEND_JSON} hope that helps",  # and after it
        f"{SEND_JSON}\n{SEND_JSON}",  # two bare objects
        "<tool_call>" + SEND_JSON,  # unclosed tag
        SEND_JSON + "</tool_call>",  # stray close
        "<tool_call></tool_call>",  # empty tag
        "```json\n" + SEND_JSON,  # unclosed fence
        "<think>never closed " + SEND_JSON,
        '{"arguments": {}}',  # no name
        '{"name": "", "arguments": {}}',
        '{"name": 42, "arguments": {}}',
        '{"name": null}',
        '{"name": "x", "arguments": []}',
        '{"name": "x", "arguments": "not json"}',
        '{"name": "x", "arguments": "[1, 2]"}',
        '{"name": "x", "arguments": null}',
        '{"name": "x", "arguments": 3}',
        '{"name": "x", "arguments": {}, "parameters": {}}',
        '{"name": "x", "arguments": {}, "extra": 1}',
        '{"type": "tool", "function": {"name": "x"}}',
        '{"type": "function", "function": "x"}',
        '[{"name": "x"}, 5]',
        "[1, 2, 3, {}]",
    ],
)
def test_broken_or_misplaced_calls_are_format_errors(text):
    result = parse_tool_calls(text)
    assert not result.ok
    assert result.error
    assert result.calls == ()


# --- guards ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_non_finite_numbers_are_rejected(literal):
    result = parse_tool_calls(f'{{"name": "x", "arguments": {{"n": {literal}}}}}')
    assert not result.ok


def test_duplicate_keys_are_rejected():
    result = parse_tool_calls('{"name": "x", "name": "y", "arguments": {}}')
    assert not result.ok and "duplicate key 'name'" in result.error
    nested = parse_tool_calls('{"name": "x", "arguments": {"a": 1, "a": 2}}')
    assert not nested.ok


def test_deep_nesting_is_rejected_before_decoding():
    deep = '{"name": "x", "arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    result = parse_tool_calls(deep[:MAX_CHARS])
    assert not result.ok
    just_deep_enough = '{"name": "x", "arguments": {"a": ' + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "}}"
    assert parse_tool_calls(just_deep_enough).ok
    too_deep = '{"name": "x", "arguments": {"a": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}}"
    assert "deeper" in parse_tool_calls(too_deep).error


def test_brackets_inside_strings_do_not_count_as_depth():
    body = "[" * 200
    call = only_call(json.dumps({"name": "x", "arguments": {"body": body}}))
    assert call.arguments["body"] == body


def test_oversized_input_is_rejected_without_parsing():
    result = parse_tool_calls('{"name": "x", "arguments": {"body": "' + "a" * MAX_CHARS + '"}}')
    assert not result.ok and "limit" in result.error


def test_huge_integer_is_a_format_error_not_a_crash():
    result = parse_tool_calls('{"name": "x", "arguments": {"n": ' + "9" * 5000 + "}}")
    assert not result.ok


def test_lone_surrogates_are_rejected_in_escapes_and_raw_text():
    assert not parse_tool_calls('{"name": "x", "arguments": {"body": "\\ud800"}}').ok
    assert not parse_tool_calls('{"name": "x\\udfff"}').ok
    assert not parse_tool_calls('{"name": "x", "arguments": {"\\udc00": 1}}').ok
    assert not parse_tool_calls("no call here \ud800").ok


def test_too_many_calls_is_a_format_error():
    calls = [{"name": "x"}] * (MAX_CALLS + 1)
    result = parse_tool_calls(json.dumps(calls))
    assert not result.ok and "limit" in result.error
    assert parse_tool_calls(json.dumps(calls[:MAX_CALLS])).ok


@pytest.mark.parametrize("value", [None, 42, b'{"name": "x"}', ["x"], {"name": "x"}])
def test_non_text_input_is_a_format_error(value):
    result = parse_tool_calls(value)
    assert not result.ok and "not text" in result.error


def test_bare_json_whose_text_mentions_fences_or_tags_stays_bare():
    call = ToolCall("email_send_email", {"body": "Use ```json``` and <tool_call> literally", "subject": "x"})
    assert only_call(json.dumps(call.to_json())) == call


def test_prose_starting_with_a_brace_before_a_fence_still_finds_the_fence():
    assert only_call("{thinking} then:\n```json\n" + SEND_JSON + "\n```") == SEND
