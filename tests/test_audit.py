"""Reward audit: stratified sample, labels from a file or a person, agreement per bucket, export."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from appliance import audit
from appliance.errors import ApplianceError
from appliance.evaluate import EvalSettings, run_eval
from appliance.packs import load_pack
from appliance.store import Workspace
from eval_support import ScriptedGenerator, expected_answer_for


@pytest.fixture(scope="module")
def stored_eval(tiny_model_dir, tmp_path_factory):
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("audit") / "runs"
    ws = Workspace.open(root)
    right = expected_answer_for(load_pack("workplace-single"), "val")
    # Half right, half prose: two buckets with different rewards to stratify over.
    answer = lambda prompt, i: right(prompt, i) if i == 0 else "I would rather not."  # noqa: E731
    report = run_eval(EvalSettings(pack="workplace-single", limit=24, k=2), workspace=ws,
                      generator=ScriptedGenerator(AutoTokenizer.from_pretrained(tiny_model_dir), answer))
    return root, report.eval_id


def test_sample_is_stratified_over_buckets(stored_eval):
    root, eval_id = stored_eval
    sample = audit.draw_sample(Workspace.open(root), eval_id, n=8)
    assert len(sample) == 8
    assert len({row["bucket"] for row in sample}) >= 2
    assert all(row["request"] and "reason" in row for row in sample)


def test_labels_from_a_file_give_agreement_per_bucket_and_an_export(stored_eval, tmp_path):
    root, eval_id = stored_eval
    ws = Workspace.open(root)
    sample = audit.draw_sample(ws, eval_id, n=6)
    labels_file = tmp_path / "labels.jsonl"
    labels_file.write_text("\n".join(json.dumps({
        "task_id": r["task_id"], "sample_index": r["sample_index"],
        "label": "agree" if r["bucket"] == "success" else "disagree", "note": "too strict?"}) for r in sample))
    labels = audit.read_labels_file(str(labels_file))
    assert audit.record_labels(ws, eval_id, sample, labels) == 6
    result = audit.agreement(ws, eval_id)
    assert result["n"] == 6
    assert result["by_bucket"]["success"]["rate"] == 1.0
    assert all(v["rate"] == 0.0 for b, v in result["by_bucket"].items() if b != "success")
    out = tmp_path / "disagreements.jsonl"
    exported = audit.export_disagreements(ws, eval_id, str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert exported == len(rows) == sum(1 for r in sample if r["bucket"] != "success")
    assert all(r["note"] == "too strict?" and r["verifier_bucket"] != "success" for r in rows)


def test_bad_label_files_are_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x", "sample_index": 0, "label": "maybe"}\n')
    with pytest.raises(ApplianceError, match="line 1"):
        audit.read_labels_file(str(bad))


def test_interactive_audit_through_the_cli(stored_eval):
    root, eval_id = stored_eval
    proc = subprocess.run(
        [sys.executable, "-m", "appliance", "audit", "--eval", eval_id, "-n", "3", "--workspace", str(root)],
        input="a\n\nd\nwrong bucket\nq\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "agreement" in proc.stdout
    _, rows = Workspace.open(root).query(
        "SELECT label, note FROM audits WHERE eval_id = ? AND auditor = 'human' ORDER BY created_at", [eval_id])
    assert ("disagree", "wrong bucket") in rows and any(label == "agree" for label, _ in rows)


def test_the_audit_shows_the_request_without_chat_template_tokens():
    from appliance.audit import _request_from_prompt

    chatml = ("<|im_start|>system\nYou are a workplace assistant.<|im_end|>\n<|im_start|>user\n"
              "Delete task 00000012<|im_end|>\n<|im_start|>assistant\n")
    assert _request_from_prompt(chatml) == "Delete task 00000012"
    llama = "<s>[INST] <<SYS>>tools<</SYS>> user: Cancel event 00000123 [/INST]"
    assert "Cancel event 00000123" in _request_from_prompt(llama)
