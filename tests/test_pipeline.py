"""`appliance run --quick` on the tiny model: every stage runs and leaves its evidence in the store."""
from __future__ import annotations

import subprocess
import sys

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
    assert "GRPO vs its SFT start:" in proc.stdout and "points on held-out success" in proc.stdout
    assert "PROMOTED" in proc.stdout  # promoted or NOT PROMOTED, with the gate's reasons
    ws = Workspace.open(ws_path)
    _, kinds = ws.query("SELECT kind, status FROM runs ORDER BY started_at")
    assert ("sft", "finished") in kinds and ("grpo", "finished") in kinds
    _, sft_options = ws.query("SELECT CAST(config->>'$.batch_size' AS INTEGER), "
                              "CAST(config->>'$.missing_tool_share' AS DOUBLE), config->>'$.missing_tool_listing' "
                              "FROM runs WHERE kind = 'sft'")
    assert sft_options == [(2, 0.5, "other")]  # the run's --sft-* options reach its SFT stage
    _, rollouts = ws.query("SELECT count(*), count(DISTINCT step) FROM rollouts")
    assert rollouts[0][0] > 0 and rollouts[0][1] == 2
    _, evals = ws.query("SELECT count(*), count(*) FILTER (metrics->>'$.strict' = ?) FROM evals "
                        "WHERE status = 'finished' AND split NOT IN ('train', 'train_rl')", [str(strict).lower()])
    assert evals[0][0] == 5  # baseline, SFT and GRPO held-out checks, two BFCL gate evals (the rest reused)
    assert evals[0][1] == 5  # every stage decoded as asked, so the gate could reuse the pipeline's evals
    # Every eval ran as a stage of its own, the gate's BFCL pair too, each saying how its threads wait.
    assert proc.stderr.count("stage `appliance eval`: threads ") == 3
    assert "stage `appliance train sft`: threads " in proc.stderr
    assert proc.stderr.count("gate: reusing stored eval") == 4
    _, fits = ws.query("SELECT split, n_samples FROM evals WHERE split IN ('train', 'train_rl') ORDER BY split")
    assert fits == [("train", 6), ("train_rl", 6)]  # each stage's fit on its own first tasks, as few as held out
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
