"""Bad input gets one sentence and exit 2, before any model loads, and leaves no `running` row behind.

Every case runs the real CLI as a subprocess with stdin closed (</dev/null) on a fresh workspace. A
case that got as far as loading a model would take minutes; the timeout turns that into a failure.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.store import Workspace
from appliance.store import owner as store_owner

# Seconds a rejection may take: imports and a store open, never a model load (minutes on a CPU).
REJECTION_TIMEOUT_S = 60
REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, workspace: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args, "--workspace", str(workspace)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                          timeout=REJECTION_TIMEOUT_S)


def store_rows(workspace: Path) -> dict[str, list[tuple]]:
    if not workspace.exists():
        return {"evals": [], "runs": []}
    ws = Workspace.open(workspace)
    return {"evals": ws.query("SELECT id, status FROM evals ORDER BY id")[1],
            "runs": ws.query("SELECT run_id, status FROM runs ORDER BY run_id")[1]}


def assert_rejected(proc: subprocess.CompletedProcess, workspace: Path, before: dict[str, list[tuple]]) -> str:
    """Exit 2, one line on stderr, no traceback, and the store exactly as it was (so nothing `running`)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    after = store_rows(workspace)
    assert after == before, after
    assert not [row for rows in after.values() for row in rows if row[1] == "running"]
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    made = {
        "binary": (root / "binary.jsonl", bytes(range(256)) * 8),
        "latin1": (root / "latin1.jsonl", '{"task_id": "café"}\n'.encode("latin-1")),
        "empty": (root / "empty.jsonl", b""),
        "not_json": (root / "not-json.jsonl", b"{broken\n"),
        "unknown_task": (root / "unknown-task.jsonl", b'{"task_id": "no-such-task", "output": "hi"}\n'),
        "bad_json": (root / "bad.json", b"{steps: 3"),
        "json_list": (root / "list.json", b"[1, 2]"),
        "wrong_type": (root / "wrong-type.json", b'{"steps": "ten"}'),
        "not_an_adapter": (root / "not-an-adapter", None),
        "mlp_adapter": (root / "mlp-adapter", None),
        "broken_manifest": (root / "broken-manifest", None),
    }
    paths = {}
    for name, (path, content) in made.items():
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        paths[name] = path
    (paths["mlp_adapter"] / "adapter_config.json").write_text(json.dumps({"target_modules": ["up_proj", "down_proj"]}))
    (paths["broken_manifest"] / "manifest.json").write_text("{broken")
    paths["missing"] = root / "missing.jsonl"
    paths["missing_folder_file"] = root / "no-such-folder" / "out.jsonl"
    paths["folder"] = root
    return paths


# Each case: the arguments, with {name} standing for a path from `files`, and a word the sentence names.
CASES = {
    # eval: every option is checked before the model loads
    "eval k zero": (["eval", "-k", "0"], "-k"),
    "eval k negative": (["eval", "-k", "-2"], "-k"),
    "eval k not a number": (["eval", "-k", "two"], "-k"),
    "eval limit negative": (["eval", "--limit", "-3"], "--limit"),
    "eval limit not a number": (["eval", "--limit", "ten"], "--limit"),
    "eval temperature negative": (["eval", "--temperature", "-0.5"], "--temperature"),
    "eval temperature nan": (["eval", "--temperature", "nan"], "--temperature"),
    "eval max-new-tokens zero": (["eval", "--max-new-tokens", "0"], "--max-new-tokens"),
    "eval batch-size zero": (["eval", "--batch-size", "0"], "--batch-size"),
    "eval batch-size fraction": (["eval", "--batch-size", "1.5"], "--batch-size"),
    "eval seed not a number": (["eval", "--seed", "x"], "--seed"),
    "eval unknown backend": (["eval", "--backend", "tpu"], "--backend"),
    "eval unknown hub model": (["eval", "--model", "no/such-model"], "no/such-model"),
    "eval missing model folder": (["eval", "--model", "./no-such-model-dir"], "no-such-model-dir"),
    "eval missing adapter": (["eval", "--adapter", "{missing}"], "adapter"),
    "eval folder that is no adapter": (["eval", "--adapter", "{not_an_adapter}"], "adapter"),
    "eval adapter with a broken manifest": (["eval", "--adapter", "{broken_manifest}"], "manifest"),
    "eval unknown split": (["eval", "--split", "nosuch"], "nosuch"),
    "eval unknown pack": (["eval", "--pack", "nosuch"], "nosuch"),
    "eval compare one id": (["eval", "compare", "a"], "compare"),
    "eval compare unknown ids": (["eval", "compare", "a", "b"], "'a'"),
    # verify: the outputs file
    "verify missing file": (["verify", "{missing}"], "does not exist"),
    "verify folder": (["verify", "{folder}"], "folder"),
    "verify binary file": (["verify", "{binary}"], "UTF-8"),
    "verify latin-1 file": (["verify", "{latin1}"], "UTF-8"),
    "verify empty file": (["verify", "{empty}"], "no outputs"),
    "verify not json": (["verify", "{not_json}"], "line 1"),
    "verify unknown task": (["verify", "{unknown_task}"], "no-such-task"),
    "verify no file given": (["verify"], "outputs"),
    # sql and audit
    "sql max-rows zero": (["sql", "SELECT 1", "--max-rows", "0"], "--max-rows"),
    "audit n zero": (["audit", "-n", "0"], "-n"),
    "audit missing labels": (["audit", "--labels", "{missing}"], "does not exist"),
    "audit binary labels": (["audit", "--labels", "{binary}"], "UTF-8"),
    "audit export to a missing folder": (["audit", "--export", "{missing_folder_file}"], "does not exist"),
    "audit stdin closed, no evals": (["audit"], "no evals"),  # what to do first, not the closed stdin
    "audit stdin closed, unknown eval": (["audit", "--eval", "no-such-eval"], "no-such-eval"),
    # train: flags map onto TrainConfig, which checks them before anything loads
    "grpo lr negative": (["train", "grpo", "--lr", "-1"], "learning_rate"),
    "grpo lr zero": (["train", "grpo", "--lr", "0"], "learning_rate"),
    "grpo lr not a number": (["train", "grpo", "--lr", "fast"], "--lr"),
    "grpo sgd without a rate": (["train", "grpo", "--optimizer", "sgd"], "--lr"),
    "grpo unknown optimizer": (["train", "grpo", "--optimizer", "lion"], "--optimizer"),
    "grpo both halves' options": (["train", "grpo", "--positive-only", "--negatives-at-divergence"], "choose one"),
    "grpo two negative-half options": (["train", "grpo", "--negatives-at-divergence", "--negatives-without-copies"],
                                       "choose one"),
    "grpo token weights under a per-answer loss": (["train", "grpo", "--preset", "gspo", "--shared-prefixes-once"],
                                                    "choose preset dapo or dr_grpo"),
    "grpo steps zero": (["train", "grpo", "--steps", "0"], "steps"),
    "grpo num-generations one": (["train", "grpo", "--num-generations", "1"], "num_generations"),
    "grpo num-generations negative": (["train", "grpo", "--num-generations", "-4"], "num_generations"),
    "grpo prompts-per-step zero": (["train", "grpo", "--prompts-per-step", "0"], "prompts_per_step"),
    "grpo max-completion-tokens zero": (["train", "grpo", "--max-completion-tokens", "0"], "max_completion_tokens"),
    "grpo temperature zero": (["train", "grpo", "--temperature", "0"], "temperature"),
    "grpo beta negative": (["train", "grpo", "--beta", "-0.1"], "beta"),
    "grpo lora-r zero": (["train", "grpo", "--lora-r", "0"], "lora_r"),
    "grpo lora-layers negative": (["train", "grpo", "--lora-layers", "-1"], "lora_layers"),
    "grpo eval-every zero": (["train", "grpo", "--eval-every", "0"], "eval_every"),
    "grpo eval-limit negative": (["train", "grpo", "--eval-limit", "-3"], "limit"),
    "grpo unknown hub model": (["train", "grpo", "--model", "no/such-model"], "no/such-model"),
    "grpo missing init adapter": (["train", "grpo", "--init-adapter", "{missing}"], "adapter"),
    "grpo targets the init adapter lacks": (["train", "grpo", "--init-adapter", "{mlp_adapter}", "--lora-targets",
                                             "q_proj,up_proj"], "no LoRA on"),
    "grpo missing config": (["train", "grpo", "--config", "{missing}"], "missing.jsonl"),
    "grpo binary config": (["train", "grpo", "--config", "{binary}"], "UTF-8"),
    "grpo config not json": (["train", "grpo", "--config", "{bad_json}"], "JSON"),
    "grpo config not an object": (["train", "grpo", "--config", "{json_list}"], "JSON object"),
    "grpo screen-limit zero": (["train", "grpo", "--screen-limit", "0"], "screen_limit"),
    "grpo no-call share above 1": (["train", "grpo", "--max-no-call-share", "1.5"], "max_no_call_share"),
    "grpo negative sft anchor": (["train", "grpo", "--sft-anchor", "-1"], "sft_anchor"),
    "grpo unknown reward scaling": (["train", "grpo", "--scale-rewards", "max"], "scale-rewards"),
    "grpo sft anchor batch zero": (["train", "grpo", "--sft-anchor-batch", "0"], "sft_anchor_batch"),
    "grpo resume unknown run": (["train", "grpo", "--resume", "no-such-run"], "no-such-run"),
    "grpo config setting of the wrong type": (["train", "grpo", "--config", "{wrong_type}"], "wrong type"),
    "sft epochs zero": (["train", "sft", "--epochs", "0"], "epochs"),
    "sft batch-size zero": (["train", "sft", "--batch-size", "0"], "batch_size"),
    "sft lr negative": (["train", "sft", "--lr=-3e-4"], "learning_rate"),
    "sft successes from an unknown eval": (["train", "sft", "--successes-from", "no-such-eval"], "no-such-eval"),
    "sft successes with policy checks": (["train", "sft", "--successes-from", "e", "--policy-checks"], "successes_from"),
    "sft successes with time checks": (["train", "sft", "--successes-from", "e", "--time-checks"], "successes_from"),
    "dpo listing pairs of another domain on a pack without domains": (
        ["train", "dpo", "--pack", "bfcl", "--pairs-source", "listing", "--missing-tool-listing", "other"],
        "does not list its tools by domain"),
    "dpo listing pairs with stored samples named": (
        ["train", "dpo", "--pairs-source", "listing", "--pairs-from", "e"], "--pairs-source listing"),
    "sft time checks on a pack without meeting hours": (["train", "sft", "--pack", "tracker", "--time-checks"],
                                                         "meeting hours"),
    # promotion, run and the top level
    "promote unknown checkpoint": (["promote", "no-such-checkpoint", "--root", "{folder}"], "no-such-checkpoint"),
    "promote limit zero": (["promote", "no-such-checkpoint", "--limit", "0"], "--limit"),
    "run baseline-k zero": (["run", "--baseline-k", "0"], "--baseline-k"),
    "run eval-limit zero": (["run", "--eval-limit", "0"], "--eval-limit"),
    "run sft-steps negative": (["run", "--sft-steps", "-1"], "--sft-steps"),
    "run sft-passes zero": (["run", "--sft-passes", "0"], "--sft-passes"),
    "run sft-batch-size zero": (["run", "--sft-batch-size", "0"], "--sft-batch-size"),
    "run sft missing-tool share above 1": (["run", "--sft-missing-tool-share", "1.5"], "missing_tool_share"),
    "run sft unknown missing-tool listing": (["run", "--sft-missing-tool-listing", "foreign"],
                                             "missing_tool_listing"),
    "run sft other listing on a pack without domains": (
        ["run", "--pack", "tracker", "--sft-missing-tool-share", "0.2", "--sft-missing-tool-listing", "other"],
        "does not list its tools by domain"),
    "run unknown pack": (["run", "--pack", "no-such-pack"], "no-such-pack"),
    "run unknown hub model": (["run", "--model", "no/such-model"], "no/such-model"),
    "unknown command": (["frobnicate"], "frobnicate"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_sentence_and_exit_2(case, files, tmp_path):
    args, needle = CASES[case]
    workspace = tmp_path / "ws"
    before = store_rows(workspace)
    proc = run_cli(*(arg.format(**files) for arg in args), workspace=workspace)
    line = assert_rejected(proc, workspace, before)
    assert needle in line, line


def test_the_pipeline_refuses_an_unknown_pack_itself_before_any_stage_starts(tmp_path):
    """Not a stage's refusal relayed ("`appliance eval` failed: ..."): no child process ran."""
    proc = run_cli("run", "--pack", "no-such-pack", workspace=tmp_path / "ws")
    line = assert_rejected(proc, tmp_path / "ws", store_rows(tmp_path / "ws"))
    assert line.startswith("error: no task pack 'no-such-pack'") and "failed" not in line, line


@pytest.fixture
def workspace_with_an_eval(tmp_path) -> Path:
    """A workspace holding one scored eval (from a file of outputs: no model needed)."""
    from appliance.packs import load_pack
    from appliance.prompting import render_completion
    from appliance.verify_file import verify_outputs_file

    outputs = tmp_path / "outputs.jsonl"
    tasks = load_pack("workplace-single", root=str(REPO / "tasks")).tasks("val")[:4]
    outputs.write_text("".join(json.dumps({"task_id": t.id, "output": render_completion(t.expected)}) + "\n"
                               for t in tasks))
    workspace = tmp_path / "ws"
    verify_outputs_file(str(outputs), pack_name="workplace-single", split="val", scheme=None,
                        tasks_root=str(REPO / "tasks"), workspace=Workspace.open(workspace))
    return workspace


def test_an_interactive_audit_with_stdin_closed_is_one_sentence(workspace_with_an_eval):
    before = store_rows(workspace_with_an_eval)
    proc = run_cli("audit", "-n", "2", workspace=workspace_with_an_eval)
    assert "stdin" in assert_rejected(proc, workspace_with_an_eval, before)
    _, labels = Workspace.open(workspace_with_an_eval).query("SELECT count(*) FROM audits")
    assert labels == [(0,)]


def test_a_killed_eval_is_marked_failed_on_the_next_start(tmp_path):
    workspace = tmp_path / "ws"
    # A process that starts an eval and a run, then dies the way `kill -9` or the OOM killer ends one.
    killed = subprocess.run([sys.executable, "-c", f"""
import os, signal, types
from appliance.evaluate.storage import EvalWriter
from appliance.store import Workspace
ws = Workspace.open({str(workspace)!r})
settings = types.SimpleNamespace(model="m", adapter=None, split="val", k=1, backend="hf")
EvalWriter(ws, settings, types.SimpleNamespace(name="pack")).write_samples("eval-killed", [], {{}})
ws.writer("grpo-killed").update_run(kind="grpo", status="running")
os.kill(os.getpid(), signal.SIGKILL)
"""], cwd=REPO, capture_output=True, text=True, timeout=REJECTION_TIMEOUT_S)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ws = Workspace.open(workspace)
    ws.append("evals", [{"id": "eval-alive", "status": "running", "owner": store_owner.this_process()}])
    ws.append("evals", [{"id": "eval-before-owners", "status": "running"}])  # written before v2: unknown

    proc = subprocess.run([sys.executable, "-m", "appliance", "sql", "SELECT 1", "--workspace", str(workspace)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                          timeout=REJECTION_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr

    _, evals = ws.query("SELECT id, status, json_extract_string(metrics, '$.error') FROM evals ORDER BY id")
    status = {row[0]: row[1] for row in evals}
    assert status == {"eval-alive": "running", "eval-before-owners": "running", "eval-killed": "failed"}
    assert "ended without finishing" in dict((row[0], row[2]) for row in evals)["eval-killed"]
    _, runs = ws.query("SELECT run_id, status, error FROM runs")
    assert [(r[0], r[1]) for r in runs] == [("grpo-killed", "failed")] and "ended" in runs[0][2]


def test_a_recycled_pid_is_not_taken_for_the_owner():
    host, pid, start = store_owner.this_process().rsplit(":", 2)
    assert not store_owner.has_ended(store_owner.this_process())
    if start:  # Linux: the same pid with another start time is another process
        assert store_owner.has_ended(f"{host}:{pid}:{int(start) + 1}")
    assert not store_owner.has_ended(f"another-host:{pid}:{start}")
    assert not store_owner.has_ended(None) and not store_owner.has_ended("garbage")


def test_an_unknown_hub_model_is_refused_without_the_network(monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.models import require_available

    monkeypatch.setattr("socket.socket.connect", lambda *a: pytest.fail("the network was touched"))
    with pytest.raises(ApplianceError, match="neither in the catalogue, a local folder nor the local hub cache"):
        require_available("no/such-model")
    assert require_available("smollm2-135m").source == "embedded"
