"""`run_eval` end to end: generation → verification → store → metrics → recommendation.

Most tests inject a scripted generator (the engine path is real: packs, verifier,
world, store); one runs the tiny random model through the real hf backend, and
one (slow) runs the real embedded model.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

from appliance.evaluate import EvalSettings, run_eval
from appliance.evaluate.stored import compare_stored
from appliance.packs import load_pack
from appliance.prompting import render_completion
from appliance.store import Workspace
from eval_support import ScriptedGenerator, expected_answer_for


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def ws(tmp_path):
    return Workspace.open(tmp_path / "runs")


def test_perfect_answers_score_full_marks_and_land_in_the_store(tokenizer, ws):
    pack = load_pack("workplace-single")
    gen = ScriptedGenerator(tokenizer, expected_answer_for(pack, "val"))
    report = run_eval(EvalSettings(pack="workplace-single", split="val", k=2, limit=20), workspace=ws, generator=gen)
    m = report.metrics
    assert m["n_tasks"] == 20 and m["n_samples"] == 40
    assert m["execution_success_rate"] == 1.0 and m["pass@1"] == 1.0 and m["pass@2"] == 1.0
    assert m["valid_json_rate"] == 1.0 and m["unsafe_action_rate"] == 0.0
    assert report.recommendation.action == "promote"
    _, rows = ws.query("SELECT count(*), count(DISTINCT task_id), min(reward) FROM eval_samples WHERE eval_id = ?",
                       [report.eval_id])
    assert rows[0] == (40, 20, 1.2)  # workplace-single's `attempt` scheme: 1 for success + 0.2 for the right decision
    _, evals = ws.query("SELECT status, success_rate, metrics->>'$.recommendation.action' FROM evals WHERE id = ?",
                        [report.eval_id])
    assert evals[0] == ("finished", 1.0, "promote")


@pytest.mark.parametrize("garbage", ["", "{{{{", "\x00\x01", '{"name": 5}', "[" * 5000, "🙂" * 300])
def test_a_broken_output_stream_completes_as_format_errors(tokenizer, ws, garbage):
    gen = ScriptedGenerator(tokenizer, lambda prompt, i: garbage)
    report = run_eval(EvalSettings(pack="workplace-single", split="val", limit=12), workspace=ws, generator=gen)
    assert report.metrics["buckets"]["format_error"] == 12
    assert report.metrics["valid_json_rate"] == 0.0
    assert report.recommendation.action == "sft"


def test_multi_step_agent_loop_looks_up_then_acts(tokenizer, ws):
    pack = load_pack("workplace-multi")
    task = pack.task("wm-val-0001")  # "The newest email from kofi can go; please delete it."
    script = [
        json.dumps({"name": "email_search_emails", "arguments": {"query": "kofi"}}),
        render_completion(task.expected),
        "No action is needed.",
    ]
    turns: dict[str, int] = {}

    def answer(prompt: str, index: int) -> str:
        turn = prompt.count("<|im_start|>tool")
        turns[prompt[:50]] = turn
        return script[min(turn, 2)] if task.request in prompt else "No action is needed."

    gen = ScriptedGenerator(tokenizer, answer)
    report = run_eval(EvalSettings(pack="workplace-multi", split="val", limit=2), workspace=ws, generator=gen)
    sample = next(s for s in report.samples if s.task_id == task.id)
    assert sample.verdict.success, sample.verdict.reason
    assert sample.turns == 3 and sample.trajectory[0]["calls"][0]["name"] == "email_search_emails"
    assert "kofi" in sample.trajectory[0]["observations"][0].lower()
    _, rows = ws.query("SELECT json_extract(trajectory, '$.n_turns') FROM eval_samples WHERE task_id = ?", [task.id])
    assert int(rows[0][0]) == 3


def test_a_looping_agent_is_labelled_and_stopped(tokenizer, ws):
    loop = json.dumps({"name": "email_search_emails", "arguments": {"query": "kofi"}})
    gen = ScriptedGenerator(tokenizer, lambda prompt, i: loop)
    report = run_eval(EvalSettings(pack="workplace-multi", split="val", limit=1), workspace=ws, generator=gen)
    (sample,) = report.samples
    assert sample.horizon == "looped" and sample.turns == 3 and not sample.verdict.success


def test_compare_two_stored_evals(tokenizer, ws):
    pack = load_pack("workplace-single")
    bad = run_eval(EvalSettings(pack="workplace-single", limit=30), workspace=ws,
                   generator=ScriptedGenerator(tokenizer, lambda p, i: "No action is needed."))
    good = run_eval(EvalSettings(pack="workplace-single", limit=30), workspace=ws,
                    generator=ScriptedGenerator(tokenizer, expected_answer_for(pack, "val")))
    cmp = compare_stored(ws, bad.eval_id, good.eval_id)
    assert cmp["success"].significant_improvement
    failed_before = {s.task_id: s.verdict.bucket for s in bad.samples if not s.verdict.success}
    assert all(after == "success" for _, after, _, _ in cmp["moved"])  # every answer of `good` is right
    assert {before: n for before, _, n, _ in cmp["moved"]} == dict(Counter(failed_before.values()))
    assert all(set(ids) <= set(failed_before) and 0 < len(ids) <= min(n, 3) for _, _, n, ids in cmp["moved"])
    assert compare_stored(ws, good.eval_id, good.eval_id)["moved"] == []
    assert dict((n, d) for n, _, _, d in cmp["deltas"])["execution_success_rate"] > 0.5
    # By template: every template with a task the declines failed went up to all its tasks right, and only those.
    tasks = pack.tasks("val")[:30]
    failed_by_template = Counter(t.tags["template"] for t in tasks if t.id in failed_before)
    assert {name: (n - in_a, in_b - in_a) for name, n, in_a, in_b in cmp["templates"]} == {
        name: (failed, failed) for name, failed in failed_by_template.items()}
    changes = [in_b - in_a for _, _, in_a, in_b in cmp["templates"]]
    assert changes == sorted(changes, reverse=True)  # the largest change first
    assert compare_stored(ws, good.eval_id, good.eval_id)["templates"] == []


def test_bfcl_pack_is_scored_by_its_ast_rules(tokenizer, ws):
    from appliance.bfcl import gold_calls

    pack = load_pack("bfcl")
    rows = {t.request: t for t in pack.tasks("gate")}

    def answer(prompt: str, index: int) -> str:
        task = next(t for request, t in rows.items() if request in prompt)
        return render_completion(gold_calls({"bfcl": task.meta["bfcl"], "tools": list(task.tools)}))

    report = run_eval(EvalSettings(pack="bfcl", split="gate", limit=40), workspace=ws,
                      generator=ScriptedGenerator(tokenizer, answer))
    assert report.metrics["execution_success_rate"] == 1.0
    assert report.metrics["bfcl"]["simple_python"] == 1.0 and report.metrics["bfcl"]["overall"] == 1.0


def test_tiny_model_through_the_real_hf_backend(tiny_model_dir, ws):
    report = run_eval(EvalSettings(model=str(tiny_model_dir), pack="workplace-single", limit=4, k=2,
                                   max_new_tokens=8, backend="hf"), workspace=ws)
    assert report.metrics["n_samples"] == 8
    assert "transformers" in report.backend_reason
    _, rows = ws.query("SELECT count(*) FROM eval_samples WHERE eval_id = ?", [report.eval_id])
    assert rows[0][0] == 8


@pytest.mark.slow
def test_real_embedded_model_on_a_few_val_tasks(ws):
    report = run_eval(EvalSettings(pack="workplace-single", limit=4, max_new_tokens=64), workspace=ws)
    assert report.metrics["n_samples"] == 4
    _, rows = ws.query("SELECT count(*), count(completion) FILTER (WHERE length(completion) > 0) "
                       "FROM eval_samples WHERE eval_id = ?", [report.eval_id])
    assert rows[0][0] == 4 and rows[0][1] >= 1  # the real model says something


def test_ctrl_c_keeps_the_finished_batches(tokenizer, ws):
    pack = load_pack("workplace-single")
    right = expected_answer_for(pack, "val")
    calls = {"n": 0}

    class InterruptedGenerator(ScriptedGenerator):
        def generate(self, prompts, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return super().generate(prompts, **kwargs)

    settings = EvalSettings(pack="workplace-single", limit=24, batch_size=8)
    with pytest.raises(KeyboardInterrupt):  # a caller that did not opt in (a gate) must not see half an eval
        run_eval(settings, workspace=ws, generator=InterruptedGenerator(tokenizer, right))
    calls["n"] = 0
    report = run_eval(settings, workspace=ws, generator=InterruptedGenerator(tokenizer, right), allow_interrupt=True)
    assert report.interrupted and report.metrics["n_samples"] == 8
    _, rows = ws.query("SELECT status, n_samples FROM evals WHERE id = ?", [report.eval_id])
    assert rows == [("interrupted", 8)]


def test_an_engine_crash_marks_the_eval_failed(tokenizer, ws):
    def crash(prompt, index):
        raise RuntimeError("CUDA error: device-side assert")

    with pytest.raises(RuntimeError):
        run_eval(EvalSettings(pack="workplace-single", limit=4), workspace=ws,
                 generator=ScriptedGenerator(tokenizer, crash))
    _, rows = ws.query("SELECT status, metrics->>'$.error' FROM evals")
    assert rows[0][0] == "failed" and "device-side assert" in rows[0][1]


def test_a_checkpoint_eval_also_answers_the_first_tasks_of_its_own_training_split(tiny_model_dir, ws, tmp_path,
                                                                                  monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from appliance.evaluate import runner
    from appliance.evaluate.heldout import make_heldout_eval

    loads, load = [], runner._make_generator
    monkeypatch.setattr(runner, "_make_generator", lambda settings: loads.append(settings.adapter) or load(settings))

    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                   LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(str(adapter))
    on_eval = make_heldout_eval(model=str(tiny_model_dir), pack="workplace-single", workspace=ws, split="val",
                                limit=2, max_new_tokens=4, fit_split="train", fit_limit=3)
    metrics = on_eval(str(adapter), 1)
    fit = metrics["fit"]
    assert fit["split"] == "train" and fit["n_tasks"] == 3 and 0.0 <= fit["success"] <= 1.0
    first_train = [task.id for task in load_pack("workplace-single").tasks("train")[:3]]
    _, rows = ws.query("SELECT DISTINCT task_id FROM eval_samples WHERE eval_id = ? ORDER BY task_id", [fit["eval_id"]])
    assert [r[0] for r in rows] == sorted(first_train)
    _, rows = ws.query("SELECT split, n_samples FROM evals WHERE id = ?", [metrics["eval_id"]])
    assert rows == [("val", 2)] and fit["eval_id"] != metrics["eval_id"]
    assert loads == [str(adapter)]  # the held-out eval and the fit check answer with one loaded checkpoint
