"""`appliance run --quick` on the tiny model: every stage runs and leaves its evidence in the store."""
from __future__ import annotations

import subprocess
import sys

from appliance.store import Workspace


def test_quick_pipeline_runs_every_stage_and_stores_the_decision(tiny_model_dir, tmp_path):
    ws_path = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "appliance", "run", "--quick", "--model", str(tiny_model_dir),
         "--workspace", str(ws_path), "--checkpoints", str(tmp_path / "checkpoints")],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recommendation: sft" in proc.stdout
    assert "SFT: 4 steps" in proc.stdout and "GRPO: 2 steps" in proc.stdout
    assert "GRPO vs its SFT start:" in proc.stdout and "points on held-out success" in proc.stdout
    assert "PROMOTED" in proc.stdout  # promoted or NOT PROMOTED, with the gate's reasons
    ws = Workspace.open(ws_path)
    _, kinds = ws.query("SELECT kind, status FROM runs ORDER BY started_at")
    assert ("sft", "finished") in kinds and ("grpo", "finished") in kinds
    _, rollouts = ws.query("SELECT count(*), count(DISTINCT step) FROM rollouts")
    assert rollouts[0][0] > 0 and rollouts[0][1] == 2
    _, evals = ws.query("SELECT count(*) FROM evals WHERE status = 'finished'")
    assert evals[0][0] == 5  # baseline, SFT and GRPO held-out checks, two BFCL gate evals (the rest reused)
    _, decision = ws.query("SELECT status, note FROM checkpoints WHERE status IN ('promoted', 'refused')")
    assert decision and "held-out success" in decision[0][1]
