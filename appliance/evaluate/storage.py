"""Writing evals and their samples to the run store (appliance.store)."""
from __future__ import annotations

import time
from typing import Any, Sequence

from appliance.evaluate.decision import Recommendation
from appliance.evaluate.metrics import ScoredSample
from appliance.store import owner


class EvalWriter:
    """Appends one eval's rows; every batch is durable (and queryable) when the call returns."""

    def __init__(self, workspace: Any, settings: Any, pack: Any, *, backend: str = "", run_id: str | None = None) -> None:
        self.ws, self.settings, self.pack = workspace, settings, pack
        self.backend, self.run_id = backend or settings.backend, run_id
        self.started_at = time.time()
        self._opened: set[str] = set()

    def _open(self, eval_id: str) -> None:
        if eval_id in self._opened:
            return
        self._opened.add(eval_id)
        s = self.settings
        self.ws.append("evals", [{
            "id": eval_id, "run_id": self.run_id, "model": s.model, "adapter": s.adapter, "pack": self.pack.name,
            "split": s.split, "k": s.k, "backend": self.backend, "status": "running",
            "owner": owner.this_process(), "started_at": self.started_at,
        }])

    def write_failed(self, eval_id: str, error: str) -> None:
        self._open(eval_id)
        self.ws.append("evals", [{"id": eval_id, "status": "failed", "metrics": {"error": error},
                                  "finished_at": time.time()}])

    def write_samples(self, eval_id: str, samples: Sequence[ScoredSample], prompts: dict[str, str]) -> None:
        self._open(eval_id)
        rows = []
        for s in samples:
            trajectory = {"prompt": prompts.get(s.task_id, ""), "turns": s.trajectory,
                          "horizon": s.horizon, "n_turns": s.turns}
            rows.append({
                "eval_id": eval_id, "task_id": s.task_id, "sample_index": s.sample_index,
                "trajectory": trajectory, "completion": s.completion, "reward": s.reward,
                "components": s.components, **s.verdict.to_row(), "bucket": s.verdict.bucket,
                "latency_s": s.latency_s, "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
            })
        if rows:
            self.ws.append("eval_samples", rows)

    def write_eval(self, eval_id: str, metrics: dict[str, Any], rec: Recommendation, backend_reason: str,
                   interrupted: bool) -> None:
        self._open(eval_id)
        self.ws.append("evals", [{
            "id": eval_id, "status": "interrupted" if interrupted else "finished",
            "n_samples": metrics["n_samples"], "success_rate": metrics["execution_success_rate"],
            "metrics": {**metrics, "recommendation": {"action": rec.action, "reason": rec.reason,
                                                  "fix": rec.fix.to_json() if rec.fix else None},
                        "backend_reason": backend_reason,
                        # A file's answers (appliance verify-file) were not decoded here: not strict.
                        "strict": bool(getattr(self.settings, "strict", False))},
            "finished_at": time.time(),
        }])
