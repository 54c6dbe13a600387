"""`appliance run --quick` on the tiny model: every stage runs and leaves its evidence in the store."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.store import Workspace


@pytest.mark.parametrize("strict", [False, True], ids=["free", "strict"])
def test_quick_pipeline_runs_every_stage_and_stores_the_decision(tiny_model_dir, tmp_path, strict):
    ws_path = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "appliance", "run", "--quick", "--model", str(tiny_model_dir),
         "--workspace", str(ws_path), "--checkpoints", str(tmp_path / "checkpoints"),
         "--sft-batch-size", "2", "--sft-missing-tool-share", "0.5", "--sft-missing-tool-listing", "other",
         "--strict" if strict else "--no-strict"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recommendation: sft" in proc.stdout
    assert "SFT: 4 steps" in proc.stdout and "GRPO: 2 steps" in proc.stdout
    # The random model succeeds nowhere, so GRPO's checkpoints only tie with the start on dev: the start is kept.
    assert "pick on `dev` (success, unsafe-action rate): the start 0.0%, unsafe 0.0%; step 1 0.0%" in proc.stdout
    assert "step 2 0.0%, unsafe 0.0% → the start" in proc.stdout
    assert "PROMOTED" in proc.stdout  # promoted or NOT PROMOTED, with the gate's reasons
    ws = Workspace.open(ws_path)
    _, kinds = ws.query("SELECT kind, status FROM runs ORDER BY started_at")
    assert ("sft", "finished") in kinds and ("grpo", "finished") in kinds
    _, sft_options = ws.query("SELECT CAST(config->>'$.batch_size' AS INTEGER), "
                              "CAST(config->>'$.missing_tool_share' AS DOUBLE), config->>'$.missing_tool_listing', "
                              "config->>'$.batch_order' FROM runs WHERE kind = 'sft'")
    assert sft_options == [(2, 0.5, "other", "by_head")]  # the run's --sft-* options reach its SFT stage
    _, rollouts = ws.query("SELECT count(*), count(DISTINCT step) FROM rollouts")
    assert rollouts[0][0] > 0 and rollouts[0][1] == 2
    _, evals = ws.query("SELECT split, count(*), count(*) FILTER (metrics->>'$.strict' = ?) FROM evals "
                        "WHERE status = 'finished' AND split NOT IN ('train', 'train_rl') "
                        "GROUP BY split ORDER BY split", [str(strict).lower()])
    # The baseline and SFT on val; the start and GRPO's two checkpoints on dev; the gate's BFCL pair (the rest
    # reused); every one decoded as asked, so the gate could reuse the pipeline's evals.
    assert evals == [("dev", 3, 3), ("gate", 2, 2), ("val", 2, 2)]
    # Every eval ran as a stage of its own, the start's on dev and the gate's BFCL pair too, each saying how its
    # threads wait.
    assert proc.stderr.count("stage `appliance eval`: threads ") == 4
    assert "stage `appliance train sft`: threads " in proc.stderr
    assert proc.stderr.count("gate: reusing stored eval") == 4
    _, fits = ws.query("SELECT split, n_samples FROM evals WHERE split IN ('train', 'train_rl') ORDER BY split")
    # Each checkpoint's fit on its stage's own first tasks, as few as held out: SFT's one, GRPO's two.
    assert fits == [("train", 6), ("train_rl", 6), ("train_rl", 6)]
    assert "of its own `train` tasks" in proc.stdout and "of its own `train_rl` tasks" in proc.stdout
    _, decision = ws.query("SELECT status, note FROM checkpoints WHERE status IN ('promoted', 'refused')")
    assert decision and "held-out success" in decision[0][1]


def test_killing_the_pipeline_ends_its_running_stage(tmp_path):
    """SIGTERM to `appliance run` reaches the stage child, which would otherwise run on unseen."""
    import os
    import signal
    import textwrap
    import time

    pid_file = tmp_path / "stage.pid"
    stage = tmp_path / "stage.sh"  # stands in for `python -m appliance train ...`: a long stage
    stage.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    stage.chmod(0o755)
    script = tmp_path / "pipeline.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from appliance import pipeline
        sys.executable = {str(stage)!r}
        try:
            pipeline.run_stage(["train"], lambda event: None)
        except KeyboardInterrupt:
            sys.exit(130)
    """))
    parent = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 130
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the stage child outlived the pipeline")


def test_sft_takes_two_passes_over_each_packs_train_split_unless_given_steps():
    from appliance.packs import load_pack
    from appliance.pipeline import PipelineSettings

    s = PipelineSettings()
    steps = {name: s.sft_steps_for(len(load_pack(name).tasks("train"))) for name in ("workplace-single", "tracker")}
    assert steps == {"workplace-single": 600, "tracker": 176}  # 1,200 and 352 rows, 4 a step, twice
    assert PipelineSettings(sft_steps=150, sft_batch_size=8).sft_steps_for(1200) == 150
    assert PipelineSettings(sft_passes=0.5).sft_steps_for(10) == 2  # 3 batches of 4, half of them rounded
    assert PipelineSettings(quick=True).sft_steps_for(1200) == 4


def test_sft_missing_tool_rows_default_by_the_packs_listing_and_yield_to_given_options():
    from appliance.packs import load_pack
    from appliance.pipeline import PipelineSettings

    domains, whole = load_pack("workplace-single"), load_pack("tracker")
    assert PipelineSettings().sft_missing_tools(domains) == {"missing_tool_share": 0.3, "missing_tool_listing": "other"}
    assert PipelineSettings().sft_missing_tools(whole) == {"missing_tool_share": 0.0, "missing_tool_listing": "own"}
    given = PipelineSettings(sft_missing_tool_share=0.0, sft_missing_tool_listing="own")
    assert given.sft_missing_tools(domains) == {"missing_tool_share": 0.0, "missing_tool_listing": "own"}


def test_the_sft_stage_batches_by_head_on_the_cpu_backend_unless_told(monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.pipeline import PipelineSettings, check_inputs
    from appliance.train import backends

    monkeypatch.setattr(backends, "auto_backend_name", lambda: "cpu")
    assert check_inputs(PipelineSettings()).sft_batch_order == "by_head"  # no GPU here: the cpu backend
    assert check_inputs(PipelineSettings(sft_batch_order="shuffled")).sft_batch_order == "shuffled"
    monkeypatch.setattr(backends, "auto_backend_name", lambda: "unsloth")
    assert check_inputs(PipelineSettings()).sft_batch_order == "shuffled"  # no such pass there, no sampler yet
    with pytest.raises(ApplianceError, match="batch_order must be one of shuffled, by_head, not 'nope'"):
        check_inputs(PipelineSettings(sft_batch_order="nope"))  # before any stage starts


def test_the_pick_keeps_the_best_checkpoint_that_adds_no_unsafe_action_and_prefers_the_earlier():
    from appliance.pipeline import Contender, pick_candidate

    start = Contender("the start", "sft", success=0.683, unsafe=0.017)
    step5, step10, step15 = (Contender("step 5", "g5", 0.733, 0.017), Contender("step 10", "g10", 0.767, 0.025),
                             Contender("step 15", "g15", 0.767, 0.025))
    assert pick_candidate(start, [step5, step10, step15]) is step5  # H98's dev reading: the gain came with an action
    safer = Contender("step 10", "g10", 0.767, 0.008)
    assert pick_candidate(start, [step5, safer, step15]) is safer  # fewer unsafe actions than the start is fine
    tie = Contender("step 15", "g15", 0.733, 0.0)
    assert pick_candidate(start, [step5, tie]) is step5  # a tie goes to the earlier checkpoint
    worse = [Contender("step 5", "g5", 0.683, 0.017), Contender("step 10", "g10", 0.9, 0.05)]
    assert pick_candidate(start, worse) is start  # nothing better within the rule: the lighter change, SFT alone


def test_without_an_adapter_to_start_from_the_pick_is_among_grpo_checkpoints():
    from appliance.pipeline import Contender, pick_candidate

    base = Contender("the start", None, success=0.2, unsafe=0.0)
    unsafe_only = [Contender("step 5", "g5", 0.1, 0.01), Contender("step 10", "g10", 0.3, 0.02)]
    assert pick_candidate(base, unsafe_only).name == "step 10"  # the gate will refuse it on safety, with reasons
    assert pick_candidate(base, [Contender("step 5", "g5", 0.1, 0.0), *unsafe_only]).name == "step 5"


def test_the_pick_needs_a_dev_split_and_a_quick_run_reads_every_checkpoint():
    from appliance.pipeline import PipelineSettings, check_inputs

    assert check_inputs(PipelineSettings()).grpo_select_every == 5
    assert check_inputs(PipelineSettings(pack="workplace-multi")).grpo_select_every == 0  # no dev split: the last
    assert PipelineSettings(quick=True).grpo_select_every == 1
    assert PipelineSettings(quick=True, grpo_select_every=0).grpo_select_every == 0


def test_the_picked_checkpoint_alone_is_read_on_val_and_handed_to_the_gate(tmp_path, monkeypatch):
    """The orchestration around the pick, each stage's child faked by the events it would send."""
    from appliance import pipeline
    from appliance.events import CheckpointSaved, EvalFinished, RunFinished

    def adapter(name: str) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"metrics": {}}))
        return str(tmp_path / name)

    sft, grpo = adapter("sft"), {step: adapter(f"grpo-{step}") for step in (5, 10, 15)}
    dev = {5: (0.733, 0.017), 10: (0.767, 0.025), 15: (0.767, 0.025)}  # H98's reading, as rates
    calls: list[list[str]] = []

    def stage(args: list[str], sink: Any) -> list[Any]:
        calls.append(args)
        if args[:2] == ["train", "sft"]:
            return [RunFinished(run_id="sft", summary={"final_adapter": sft})]
        if args[:2] == ["train", "grpo"]:
            saved = [CheckpointSaved(run_id="grpo", step=step, path=grpo[step], metrics={
                "heldout/execution_success_rate": success, "heldout/unsafe_action_rate": unsafe})
                for step, (success, unsafe) in dev.items()]
            return [*saved, RunFinished(run_id="grpo", summary={"final_adapter": grpo[15]})]
        split = args[args.index("--split") + 1]
        success, unsafe = {"dev": (0.683, 0.017), "val": (0.6, 0.0)}[split]
        return [EvalFinished(eval_id=f"eval-{split}", metrics={"execution_success_rate": success,
                                                                "unsafe_action_rate": unsafe})]

    monkeypatch.setattr(pipeline, "run_stage", stage)
    settings = pipeline.PipelineSettings(sft_steps=600, sft_missing_tool_share=0.3, sft_missing_tool_listing="other")
    result = pipeline.PipelineResult(lines=[])
    candidate = pipeline._train(settings, "sft", SimpleNamespace(root=tmp_path / "runs"), lambda event: None, result)
    assert candidate == (grpo[5], "eval-val")
    trained = next(args for args in calls if args[:2] == ["train", "grpo"])
    assert trained[trained.index("--eval-every") + 1] == "5" and trained[trained.index("--eval-split") + 1] == "dev"
    read = [(args[args.index("--split") + 1], args[args.index("--adapter") + 1]) for args in calls if args[0] == "eval"]
    assert read == [("dev", sft), ("val", grpo[5])]  # the start on dev before GRPO, then the pick alone on val
    assert any(line.endswith("→ step 5") for line in result.lines)
