"""Strict decoding: the answer grammar takes every right answer and no schema-breaking one; generation obeys it."""
from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from appliance.evaluate import EvalSettings, run_eval
from appliance.evaluate.stored import compare_stored
from appliance.generate.hf import HFGenerator
from appliance.generate.strict import answer_grammar, call_arguments_schema
from appliance.models import load_model
from appliance.packs import load_pack
from appliance.parsing import parse_tool_calls
from appliance.prompting import reference_answer, render_prompt
from appliance.store import Workspace
from appliance.tiny import build_tiny_tokenizer
from appliance.verify import is_schema_failure
from eval_support import ScriptedGenerator, expected_answer_for

TASKS_ROOT = Path(__file__).resolve().parents[1] / "tasks"

TOOLS = [
    {"type": "function", "function": {
        "name": "calendar_delete_event", "description": "Delete an event.",
        "parameters": {"type": "object", "properties": {"event_id": {"type": "string"}},
                       "required": ["event_id"]}}},  # no additionalProperties: closed, as the verifier reads it
    {"type": "function", "function": {
        "name": "calendar_update_event", "description": "Change one field of an event.",
        "parameters": {"type": "object", "properties": {
            "event_id": {"type": "string"},
            "field": {"type": "string", "enum": ["event_name", "event_start"]},
            "new_value": {"type": "string"}},
            "required": ["event_id", "field", "new_value"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "log_note", "description": "Any extra fields are kept.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                       "required": ["text"], "additionalProperties": True}}},
]


@pytest.fixture(scope="module")
def compiler():
    import xgrammar as xgr

    tokenizer = build_tiny_tokenizer()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[2])
    return xgr.GrammarCompiler(info)


def takes(compiler, tools, text: str) -> bool:
    """Whether the grammar takes `text` as a whole answer (the end-of-turn token must be allowed after it)."""
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(compiler.compile_grammar(answer_grammar(tools)))
    return matcher.accept_string(text) and matcher.accept_token(2)


@pytest.mark.parametrize("text", [
    '{"name": "calendar_delete_event", "arguments": {"event_id": "00000109"}}',
    '{"name": "calendar_update_event", "arguments": {"event_id": "7", "field": "event_name", "new_value": "x"}}',
    '[{"name": "calendar_delete_event", "arguments": {"event_id": "1"}}, '
    '{"name": "log_note", "arguments": {"text": "done"}}]',
    '{"name": "log_note", "arguments": {"text": "a", "extra": 3}}',  # an open schema keeps other arguments
    "No action is needed.",
    "I can't send that to a personal address.",
    '```json\n{"name": "calendar_delete_event", "arguments": {"event_id": "1"}}\n```',
    '<tool_call>\n{"name": "calendar_delete_event", "arguments": {"event_id": "1"}}\n</tool_call>',
])
def test_the_grammar_takes_valid_answers(compiler, text):
    assert takes(compiler, TOOLS, text)


@pytest.mark.parametrize("text", [
    # the arguments of the update tools copied onto a delete (session 20's GRPO losses)
    '{"name": "calendar_delete_event", "arguments": {"event_id": "1", "field": "event_name", "new_value": "1"}}',
    '{"name": "Mentoring session", "arguments": {"event_id": "1"}}',  # not a tool
    '{"name": "calendar_update_event", "arguments": {"event_id": "7", "field": "location", "new_value": "x"}}',
    '{"name": "calendar_update_event", "arguments": {"event_id": "7", "field": "event_name"}}',  # required missing
    '{"name": "calendar_delete_event", "arguments": {"event_id": 109}}',  # wrong type
    '{"name": "calendar_delete_event", "arguments": {"event_id": "00000000',  # unfinished
    "Sure: {\"name\": \"calendar_delete_event\"}",  # prose holding a call attempt is a format error, not a reply
    "[]x",
    "1.", "...", "ok\x01 fine",  # prose without a word, or with a control character, is a format error
    '<tool_call>\n{"name": "calendar_delete_event", "arguments": {"event_id": "1", "x": "2"}}\n</tool_call>',
])
def test_the_grammar_refuses_schema_breaking_answers(compiler, text):
    assert not takes(compiler, TOOLS, text)


def test_the_grammar_is_ebnf_that_vllm_reads_as_ebnf():
    """vLLM 0.33.0 reads a `grammar` as EBNF when a line holds `::=` (v1/structured_output/utils.py:409-438) and
    validates it with xgrammar's `Grammar.from_ebnf` (backend_xgrammar.py:552-560)."""
    import xgrammar as xgr

    text = answer_grammar(TOOLS)
    assert any("::=" in line for line in text.splitlines()) and text.startswith("root ::=")
    assert str(xgr.Grammar.from_ebnf(text)) == text


def test_the_grammar_takes_every_reference_answer_of_every_pack(compiler):
    """Strict decoding must never forbid a right answer: every task's reference answer, in every split."""
    checked = 0
    for name in ("workplace-single", "workplace-multi", "tracker"):
        pack = load_pack(name, root=TASKS_ROOT)
        for split in pack.splits:
            for task in pack.tasks(split):
                if task.kind != "single_step":
                    continue
                assert takes(compiler, pack.tools_for(task), reference_answer(task)), (name, task.id)
                checked += 1
    assert checked > 1000


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture
def opens_calls(loaded):
    """The random model, made to open its answer with `{` (its first token follows the prompt's last, a newline)."""
    model, tokenizer = loaded
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"][-1]
    brace = tokenizer("{", add_special_tokens=False)["input_ids"][0]

    def prefer_a_brace(module, args, kwargs, output):
        ids = kwargs.get("input_ids")
        if ids is not None:
            output.logits[ids[:, -1] == newline, -1, brace] += 50.0

    handle = model.register_forward_hook(prefer_a_brace, with_kwargs=True)
    yield model, tokenizer
    handle.remove()


def test_strict_generation_answers_only_in_the_tools_schemas(opens_calls):
    """A random model's free answers break every rule; held to the grammar, each finished one is valid."""
    model, tokenizer = opens_calls
    prompts = [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": f"Task {i}."}], TOOLS)
               for i in range(6)]
    generator = HFGenerator(model, tokenizer, batch_size=24)
    held = generator.generate(prompts, n=4, temperature=1.0, max_new_tokens=96, seed=0,
                              strict_tools=[TOOLS] * len(prompts))
    free = generator.generate(prompts, n=4, temperature=1.0, max_new_tokens=96, seed=0)
    schemas = {t["function"]["name"]: call_arguments_schema(t["function"]["parameters"]) for t in TOOLS}
    finished = [s for samples in held for s in samples if s.finish_reason == "stop"]
    calls = [s for s in finished if s.text.lstrip()[:1] in "{["]
    assert calls, "the grammar's call branch was never taken"
    for sample in finished:
        parsed = parse_tool_calls(sample.text)
        assert parsed.ok, sample.text
        for call in parsed.calls:
            jsonschema.validate(call.arguments, schemas[call.name])
    assert not any(s.finish_reason == "stop" and s.text.lstrip()[:1] == "{" and parse_tool_calls(s.text).ok
                   for samples in free for s in samples)  # without the grammar the same model makes no call


def test_strict_top_p_sampling_draws_only_allowed_tokens(opens_calls):
    """transformers 5.17 runs the grammar's mask before temperature and top-p, so a tight nucleus still holds only
    allowed tokens (were top-p cut first, a row could be left with none: NaNs, or a forbidden token)."""
    model, tokenizer = opens_calls
    prompts = [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": "Delete it."}], TOOLS)]
    samples = HFGenerator(model, tokenizer).generate(prompts, n=8, temperature=2.0, top_p=0.3, max_new_tokens=96,
                                                     seed=1, strict_tools=[TOOLS])[0]
    finished = [s for s in samples if s.finish_reason == "stop"]
    assert finished and all(parse_tool_calls(s.text).ok for s in finished)


def test_each_prompt_is_held_to_its_own_tools_whatever_order_the_batch_takes(opens_calls):
    """Prompts are re-sorted by their tokens and repeated n times per row; each row must keep its prompt's tools."""
    model, tokenizer = opens_calls
    names = ["zeta_tool", "alpha_tool", "mid_tool", "beta_tool", "omega_tool"]
    lists = [[{"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"id": {"type": "string", "enum": ["1", "2"]}}, "required": ["id"]}}}]
        for name in names]
    # A longer user turn for earlier prompts, so sorting by tokens reverses the order.
    prompts = [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": "Go. " * (5 - i)}], tools)
               for i, tools in enumerate(lists)]
    results = HFGenerator(model, tokenizer, batch_size=4).generate(prompts, n=2, temperature=1.0, max_new_tokens=48,
                                                                   seed=0, strict_tools=lists)
    called = 0
    for name, samples in zip(names, results):
        for sample in samples:
            parsed = parse_tool_calls(sample.text)
            if sample.finish_reason == "stop" and parsed.calls:
                assert [call.name for call in parsed.calls] == [name] * len(parsed.calls), (name, sample.text)
                called += 1
    assert called >= 5


def test_a_strict_eval_has_no_schema_breaking_answers_and_says_so(opens_calls, tiny_model_dir, tmp_path):
    """The same model and seed: decoded freely its calls do not even parse; held, they parse and fit the schemas."""
    model, tokenizer = opens_calls
    ws = Workspace.open(tmp_path / "ws")
    settings = dict(model=str(tiny_model_dir), pack="workplace-single", split="dev", limit=8, k=2,
                    temperature=1.0, max_new_tokens=96, backend="hf", tasks_root=str(TASKS_ROOT))
    found, format_errors, calls = {}, {}, {}
    for strict in (False, True):
        report = run_eval(EvalSettings(**settings, strict=strict), workspace=ws,
                          generator=HFGenerator(model, tokenizer, batch_size=16))
        _, rows = ws.query("SELECT v_reason, v_bucket FROM eval_samples WHERE eval_id = ?", [report.eval_id])
        assert len(rows) == 16
        found[strict] = [reason for reason, _ in rows if is_schema_failure(reason)]
        format_errors[strict] = sum(bucket == "format_error" for _, bucket in rows)
        calls[strict] = sum(bucket in ("wrong_tool", "wrong_arguments", "success", "unsafe_action",
                                       "called_when_none_expected") for _, bucket in rows)
        _, stored = ws.query("SELECT metrics->>'$.strict' FROM evals WHERE id = ?", [report.eval_id])
        assert stored[0][0] == str(strict).lower()
    assert not found[True], found
    assert format_errors[True] < format_errors[False] and calls[True] > calls[False], (format_errors, calls)


def test_comparing_a_strict_eval_with_a_free_one_says_the_decoders_differ(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    ws = Workspace.open(tmp_path / "ws")
    pack = load_pack("workplace-single", root=TASKS_ROOT)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = {}
    for strict in (False, True, True):
        settings = EvalSettings(pack="workplace-single", split="dev", limit=4, strict=strict,
                                tasks_root=str(TASKS_ROOT))
        generator = ScriptedGenerator(tokenizer, expected_answer_for(pack, "dev"))
        ids.setdefault(strict, []).append(run_eval(settings, workspace=ws, generator=generator).eval_id)
    mixed = compare_stored(ws, ids[False][0], ids[True][0])
    assert mixed["decoding"].startswith("a was decoded freely and b strictly")
    assert compare_stored(ws, ids[True][0], ids[True][1])["decoding"] == ""


def test_a_schema_xgrammar_cannot_convert_keeps_the_tool_name_held_and_its_arguments_free(compiler):
    odd = [{"type": "function", "function": {"name": "odd_tool", "parameters": {
        "type": "object", "properties": {"code": {"type": "string", "pattern": "(?<=a)b"}}}}}]
    assert takes(compiler, odd, '{"name": "odd_tool", "arguments": {"code": "b", "more": 1}}')
    assert not takes(compiler, odd, '{"name": "other_tool", "arguments": {}}')
