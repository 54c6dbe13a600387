"""What the CLI prints: one set of formats everywhere, nothing cut when piped, the pipeline report in stage
order, one explanation per confusing training metric, exports that keep a person's files, audits that keep
their answers."""
from __future__ import annotations

import builtins
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance import checkpoints, report
from appliance.cli import build_parser, main
from appliance.events import EvalFinished, Log, StepMetrics
from appliance.store import Workspace

REPO = Path(__file__).resolve().parents[1]
# Longer than any column a narrow table would leave it, and than rich's 80-column default for a pipe.
LONG_RUN_ID = "grpo-20261201-125215-94e551-with-a-long-name"
RECORD_COMMANDS = (("checkpoints", "list"), ("checkpoints", "show"), ("checkpoints", "diff"), ("tasks", "list"),
                   ("tasks", "stats"), ("verify",), ("eval",), ("sql",))


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The real CLI with stdout a pipe, on a narrow 'terminal' (COLUMNS=40) that must not matter."""
    return subprocess.run([sys.executable, "-m", "appliance", *args], input=stdin,
                          stdin=None if stdin is not None else subprocess.DEVNULL, capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, "COLUMNS": "40"})


def _subparser(path: tuple[str, ...]):
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if getattr(a, "choices", None) and name in a.choices)
        parser = action.choices[name]
    return parser


@pytest.fixture
def registry(tmp_path) -> Path:
    """A checkpoint registry with two checkpoints of a run whose id is long (the adapter files are stand-ins)."""
    root = tmp_path / "checkpoints"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for name in checkpoints.ADAPTER_FILES:
        (adapter / name).write_text("{}")
    for step, success in ((1, 0.25), (2, 0.5)):
        checkpoints.save_checkpoint(root, adapter, {
            "run_id": LONG_RUN_ID, "step": step, "stage": "grpo", "base_model": {"id": "tiny"},
            "parent": None if step == 1 else f"{LONG_RUN_ID}/step-00001",
            "metrics": {"heldout": {"heldout_success": success}}})
    return root


@pytest.fixture
def workspace_with_two_evals(tmp_path) -> tuple[Path, str, str]:
    return two_scored_evals(tmp_path)


def two_scored_evals(tmp_path: Path) -> tuple[Path, str, str]:
    """Two evals scored from files (no model): all right, then half right."""
    from appliance.packs import load_pack
    from appliance.prompting import render_completion
    from appliance.verify_file import verify_outputs_file

    tasks = load_pack("workplace-single", root=str(REPO / "tasks")).tasks("val")[:4]
    ws = Workspace.open(tmp_path / "ws")
    ids = []
    for name, right in (("all", 4), ("half", 2)):
        outputs = tmp_path / f"{name}.jsonl"
        outputs.write_text("".join(json.dumps({"task_id": t.id, "output": render_completion(t.expected)
                                               if i < right else "{broken"}) + "\n" for i, t in enumerate(tasks)))
        ids.append(verify_outputs_file(str(outputs), pack_name="workplace-single", split="val", scheme=None,
                                       tasks_root=str(REPO / "tasks"), workspace=ws)["eval_id"])
    return tmp_path / "ws", ids[0], ids[1]


# ---------------------------------------------------------------- formats

def test_every_record_command_offers_the_same_formats():
    for path in RECORD_COMMANDS:
        option = next(a for a in _subparser(path)._actions if "--format" in a.option_strings)
        assert tuple(option.choices) == report.FORMATS and option.default == "table", path


def test_checkpoints_list_piped_prints_whole_ids(registry):
    table = run_cli("checkpoints", "list", "--root", str(registry))
    assert table.returncode == 0, table.stderr
    assert f"{LONG_RUN_ID}/step-00002" in table.stdout and "…" not in table.stdout
    rows = list(csv.DictReader(io.StringIO(run_cli("checkpoints", "list", "--root", str(registry),
                                                   "--format", "csv").stdout)))
    assert [r["checkpoint"] for r in rows] == [f"{LONG_RUN_ID}/step-00001", f"{LONG_RUN_ID}/step-00002"]
    assert [float(r["heldout_success"]) for r in rows] == [0.25, 0.5]


def test_sql_piped_prints_whole_values(tmp_path):
    value = "x" * 30 + "-the-end"
    proc = run_cli("sql", f"SELECT '{value}' AS id, 1 AS n", "--workspace", str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    assert value in proc.stdout and "…" not in proc.stdout


def test_checkpoint_show_and_diff_speak_json_and_csv(registry, capsys):
    first, second = f"{LONG_RUN_ID}/step-00001", f"{LONG_RUN_ID}/step-00002"
    assert main(["checkpoints", "show", second, "--root", str(registry), "--format", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["step"] == 2 and shown["metrics"]["heldout"]["heldout_success"] == 0.5
    assert main(["checkpoints", "diff", first, second, "--root", str(registry), "--format", "csv"]) == 0
    changed = {r["field"]: (r["a"], r["b"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert changed == {"step": ("1", "2"), "parent": ("", f"{LONG_RUN_ID}/step-00001"),
                       "metrics.heldout.heldout_success": ("0.25", "0.5")}
    assert main(["checkpoints", "diff", first, second, "--root", str(registry)]) == 0
    table = capsys.readouterr().out
    assert "metrics.heldout.heldout_success" in table and "{" not in table  # a table, not raw JSON


def test_tasks_and_verify_print_records_in_every_format(tmp_path, capsys):
    assert main(["tasks", "stats", "workplace-single", "--tasks-root", str(REPO / "tasks"), "--format", "json"]) == 0
    splits = {row["split"]: row for row in json.loads(capsys.readouterr().out)}
    assert splits["val"]["tasks"] == 120 and sum(splits["val"]["kinds"].values()) == 120
    assert main(["tasks", "stats", "workplace-single", "--tasks-root", str(REPO / "tasks")]) == 0
    assert "val" in capsys.readouterr().out
    assert main(["tasks", "list", "--tasks-root", str(REPO / "tasks"), "--format", "csv"]) == 0
    packs = {r["pack"]: json.loads(r["splits"]) for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert packs["workplace-single"]["val"] == 120

    from appliance.packs import load_pack
    from appliance.prompting import render_completion

    task = load_pack("workplace-single", root=str(REPO / "tasks")).tasks("val")[0]
    outputs = tmp_path / "out.jsonl"
    outputs.write_text(json.dumps({"task_id": task.id, "output": render_completion(task.expected)}) + "\n")
    args = ["verify", str(outputs), "--workspace", str(tmp_path / "ws"), "--tasks-root", str(REPO / "tasks")]
    assert main([*args, "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_outputs"] == 1 and summary["buckets"]["success"] == 1
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "buckets.success" in table and "execution_success_rate" in table and "{" not in table


def test_eval_compare_has_the_paired_difference_in_every_format(workspace_with_two_evals, capsys):
    ws, a, b = workspace_with_two_evals
    assert main(["eval", "compare", a, b, "--workspace", str(ws), "--format", "json"]) == 0
    rows = {row["metric"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["execution_success_rate"]["delta"] == pytest.approx(-0.5)
    [paired] = [row for metric, row in rows.items() if metric.startswith("success, paired over 4 tasks in ")]
    assert paired["delta"] == pytest.approx(-0.5) and paired["low"] <= paired["delta"] <= paired["high"]
    assert main(["eval", "compare", a, b, "--workspace", str(ws)]) == 0
    table = capsys.readouterr().out
    assert "paired-bootstrap interval" in table and "changed bucket (first samples)" in table
    assert "templates changed (first samples)" in table


def test_evals_stored_before_they_kept_templates_are_compared_by_the_packs_templates(tmp_path, monkeypatch):
    """An older eval has no `task_templates`: the pack it names supplies them, or tasks are resampled alone."""
    from appliance.evaluate import metrics
    from appliance.evaluate.stored import compare_stored
    from appliance.packs import load_pack

    monkeypatch.setattr(metrics, "templates_of", lambda tasks: {})  # summarize as it was before
    ws_path, a, b = two_scored_evals(tmp_path)
    ws = Workspace.open(ws_path)
    assert compare_stored(ws, a, b)["success"].unit == "task"
    templates = {t.tags["template"] for t in load_pack("workplace-single", root=str(REPO / "tasks")).tasks("val")[:4]}
    success = compare_stored(ws, a, b, tasks_root=str(REPO / "tasks"))["success"]
    assert (success.unit, success.n_units) == ("template", len(templates))
    assert compare_stored(ws, a, b, tasks_root=str(tmp_path / "nowhere"))["success"].unit == "task"


# ---------------------------------------------------------------- the pipeline report

def test_the_pipeline_report_reads_in_stage_order(monkeypatch, capsys, tmp_path):
    """The baseline's tables come as the baseline finishes, before training prints a step; the gate is last."""
    from appliance import pipeline

    def fake_pipeline(settings, *, workspace, sink):
        metrics = {"valid_json_rate": 0.5, "latency_p50_s": 1.0, "latency_p95_s": 2.0,
                   "buckets": {"success": 1, "format_error": 1}}
        sink(EvalFinished(eval_id="eval-base", metrics=metrics, recommendation="sft: teach the format"))
        sink(StepMetrics(run_id="sft-1", step=1, metrics={"loss": 7.0}))
        sink(Log(message="gate eval: candidate on bfcl/gate"))
        return pipeline.PipelineResult(
            lines=["baseline eval-base: valid JSON 50.0%", "recommendation: sft", "SFT: 4 steps → a",
                   "GRPO: 2 steps → b", "NOT PROMOTED: b was not promoted", "  - held-out success: no gain",
                   "  - latency p95 2.00s → 1.00s: ok"],
            baseline=EvalFinished(eval_id="eval-base", metrics=metrics))

    monkeypatch.setattr(pipeline, "run_pipeline", fake_pipeline)
    assert main(["run", "--workspace", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert out.count("failure bucket") == 1  # the baseline's tables once, not again in the report
    order = [out.index(text) for text in ("baseline eval-base", "batch latency p50 / p95", "pipeline report",
                                          "SFT: 4 steps", "GRPO: 2 steps", "NOT PROMOTED", "held-out success",
                                          "latency p95 2.00s")]
    assert order == sorted(order)


# ---------------------------------------------------------------- training lines

def test_confusing_grpo_metrics_are_explained_once_per_run(capsys):
    sink = report.HumanSink()
    for step in (1, 2, 3):
        sink(StepMetrics(run_id="grpo-1", step=step, metrics={"loss": 0.0, "frac_reward_zero_std": 0.75}))
    sink(StepMetrics(run_id="sft-1", step=1, metrics={"loss": 0.0}))  # SFT: a zero loss is not explained away
    sink(StepMetrics(run_id="grpo-kl", step=1, metrics={"loss": 0.0, "kl": 0.2, "frac_reward_zero_std": 0.0}))
    err = capsys.readouterr().err
    assert err.count("step ") == 5
    assert err.count("loss is ~0 by construction") == 1
    assert err.count("flat groups = the share") == 2  # once for each GRPO run
    assert err.index("loss is ~0") > err.index("step 1:") and err.index("loss is ~0") < err.index("step 2:")


# ---------------------------------------------------------------- export

def test_export_refuses_a_folder_that_holds_files(registry, tmp_path):
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_cli("export", f"{LONG_RUN_ID}/step-00002", "--merged", str(out), "--root", str(registry))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--force" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("tty,answer,force,exported", [
    (False, None, True, True),   # --force: written without asking
    (True, "y", False, True),    # a person said yes
    (True, "", False, False),    # a person pressed Enter: no
])
def test_export_into_a_full_folder_needs_force_or_a_yes(registry, tmp_path, monkeypatch, capsys,
                                                        tty, answer, force, exported):
    out = tmp_path / "merged"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    calls = []
    monkeypatch.setattr(checkpoints, "export_merged", lambda ckpt, folder: calls.append(folder) or Path(folder))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: tty, raising=False)
    monkeypatch.setattr(builtins, "input", lambda prompt="": answer)
    code = main(["export", LONG_RUN_ID, "--merged", str(out), "--root", str(registry), *(["--force"] * force)])
    assert (code, calls) == ((0, [str(out)]) if exported else (2, []))
    if not exported:
        assert "left as it was" in capsys.readouterr().err


def test_export_into_a_new_or_empty_folder_goes_ahead(registry, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(checkpoints, "export_merged", lambda ckpt, folder: calls.append(folder) or Path(folder))
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "new", tmp_path / "empty"):
        assert main(["export", LONG_RUN_ID, "--merged", str(folder), "--root", str(registry)]) == 0
    assert calls == [str(tmp_path / "new"), str(tmp_path / "empty")]


# ---------------------------------------------------------------- audit

def _audit_labels(ws: Path) -> list[tuple]:
    return Workspace.open(ws).query("SELECT label, note FROM audits ORDER BY created_at")[1]


def test_an_audit_whose_stdin_ends_keeps_the_answers_given(workspace_with_two_evals):
    ws, _, half = workspace_with_two_evals
    # Two answers, the second one's note cut off by the end of input.
    proc = run_cli("audit", "--eval", half, "-n", "4", "--workspace", str(ws), stdin="a\nfine\nd\n")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "2 of 4 answers" in lines[0] and "stored" in lines[0]
    assert _audit_labels(ws) == [("agree", "fine"), ("disagree", "")]


def test_an_interrupted_audit_keeps_the_answers_given(workspace_with_two_evals, monkeypatch):
    ws, _, half = workspace_with_two_evals
    answers = iter(["d", "too strict"])

    def person(prompt=""):
        try:
            return next(answers)
        except StopIteration:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(builtins, "input", person)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    assert main(["audit", "--eval", half, "-n", "4", "--workspace", str(ws)]) == 130
    assert _audit_labels(ws) == [("disagree", "too strict")]


def test_checkpoints_are_listed_oldest_first_even_when_a_manifest_was_rewritten(tmp_path):
    """Training rewrites a manifest with its held-out eval; the time it was saved must survive that."""
    import os

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for name in checkpoints.ADAPTER_FILES:
        (adapter / name).write_text("{}")
    manifest = {"run_id": "sft-b", "step": 1}
    saved = checkpoints.save_checkpoint(tmp_path / "ck", adapter, manifest)
    assert manifest["created_at"] == saved.manifest["created_at"]  # a caller's later rewrite keeps it
    later = checkpoints.save_checkpoint(tmp_path / "ck", adapter, {"run_id": "grpo-a", "step": 1})
    for ckpt, stamp in ((saved, 1_000), (later, 2_000)):  # manifests written before created_at was kept
        path = ckpt.path / checkpoints.MANIFEST
        path.write_text(json.dumps({k: v for k, v in ckpt.manifest.items() if k != "created_at"}))
        os.utime(path, (stamp, stamp))
    assert [c.id for c in checkpoints.list_checkpoints(tmp_path / "ck")] == ["sft-b/step-00001", "grpo-a/step-00001"]


def test_a_checkpoints_scores_line_keeps_the_fit_apart_from_held_out_success():
    from appliance.report import scores_line

    manifest = {"metrics": {"heldout": {"heldout_success": 0.4},
                            "fit": {"split": "train", "n_tasks": 32, "success": 0.25, "eval_id": "e"}}}
    assert scores_line(manifest) == "; held-out success 40.0%; on 32 of its own `train` tasks 25.0%"
    assert scores_line({"metrics": {"heldout": {"heldout_success": 0.4}}}) == "; held-out success 40.0%"
    assert scores_line({}) == ""
