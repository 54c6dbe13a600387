"""The gate's latency line for stored `make run` workspaces, by the old rule (batch wall time) and the new (tokens).

For each workspace given: the held-out (val) evals of the base model and of every GRPO checkpoint, their stored
metrics plus the per-request token percentiles computed from their stored samples as `summarize` now does, and
the line `promotion._latency_rule` writes for each pair, with and without the token figures. Runs no model.

    .venv/bin/python docs/experiments/s57/latency_rule.py /tmp/r/runs /tmp/r56/runs
"""
from __future__ import annotations

import sys

from appliance.evaluate.metrics import _percentile
from appliance.evaluate.stored import eval_metrics
from appliance.promotion import GateEvidence, GateSettings, _latency_rule
from appliance.store.workspace import Workspace


def with_tokens(ws: Workspace, eval_id: str) -> dict:
    metrics = eval_metrics(ws, eval_id)
    _, rows = ws.query("SELECT completion_tokens FROM eval_samples WHERE eval_id = ?", [eval_id])
    tokens = [row[0] for row in rows]
    return {**metrics, "completion_tokens_p50": _percentile(tokens, 0.50),
            "completion_tokens_p95": _percentile(tokens, 0.95)}


def main(workspaces: list[str]) -> None:
    for path in workspaces:
        ws = Workspace.open(path)
        _, rows = ws.query("SELECT id, coalesce(adapter, '') FROM evals WHERE split = 'val' AND metrics IS NOT NULL "
                           "AND (adapter IS NULL OR adapter LIKE '%grpo-%') ORDER BY started_at")
        base_id = next(eval_id for eval_id, adapter in rows if not adapter)
        base = with_tokens(ws, base_id)
        for eval_id, adapter in rows:
            if not adapter:
                continue
            cand = with_tokens(ws, eval_id)
            old = {k: v for k, v in cand.items() if not k.startswith("completion_tokens_p")}
            print(f"{path} {adapter.split('/checkpoints/')[-1]}")
            print("  old rule:", _latency_rule(GateEvidence(base, old, None), GateSettings())[1])
            print("  new rule:", _latency_rule(GateEvidence(base, cand, None), GateSettings())[1])


if __name__ == "__main__":
    main(sys.argv[1:])
