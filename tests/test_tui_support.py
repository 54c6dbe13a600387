"""Shared material for the cockpit tests: a populated temporary workspace and recorded engine events.

No tests here; the other test_tui*.py files import it. Timestamps are fixed so
snapshots do not depend on the clock.
"""
from __future__ import annotations

import json
from pathlib import Path

from textual.worker import WorkerCancelled

from appliance.events import (Alarm, CheckpointSaved, EvalFinished, Progress, RolloutScored, RunFinished,
                              RunStarted, StepMetrics)
from tui.app import make_app
from tui.data import StoreData
from tui.engine import FakeEngineClient

TASKS_ROOT = Path(__file__).resolve().parents[1] / "tasks"
T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC
HOST = {"cpu": "Test CPU", "cpus": 2, "ram_total_gib": 24.0, "ram_used_gib": 6.5}
DOCTOR = {"gpu": "none visible (CPU path)", "cpu_cores": 2, "ram_gib": 24.0,
          "generation_backend": "hf (no CUDA GPU: Hugging Face generate on CPU)",
          "train_backend": "cpu (no CUDA GPU)", "version_warnings": ["none"]}

BASE_METRICS = {
    "n_tasks": 4, "n_samples": 8, "k": 2, "valid_json_rate": 0.25, "correct_tool_rate": 0.125,
    "correct_argument_rate": 0.0, "execution_success_rate": 0.0, "unsafe_action_rate": 0.0, "pass@1": 0.0,
    "pass@2": 0.0, "mean_reward": 0.04, "latency_p50_s": 1.2, "latency_p95_s": 2.5, "tokens_per_s": 41.0,
    "buckets": {"format_error": 6, "wrong_tool": 1, "wrong_arguments": 1},
    "recommendation": {"action": "sft", "reason": "SFT first: the format is rarely right (valid JSON 25%)."},
}
SFT_METRICS = {**BASE_METRICS, "valid_json_rate": 0.875, "correct_tool_rate": 0.75, "correct_argument_rate": 0.5,
               "execution_success_rate": 0.5, "pass@1": 0.5, "pass@2": 0.75, "mean_reward": 0.55,
               "buckets": {"format_error": 1, "wrong_arguments": 3, "success": 4},
               "recommendation": {"action": "grpo", "reason": "GRPO: the model sometimes succeeds."}}
SAMPLE_BUCKETS = ("format_error", "format_error", "wrong_tool", "success")


def sample_rows(eval_id: str, buckets: tuple[str, ...] = SAMPLE_BUCKETS) -> list[dict]:
    rows = []
    for index, bucket in enumerate(buckets):
        ok = bucket == "success"
        rows.append({
            "eval_id": eval_id, "task_id": f"task-{index}", "sample_index": 0,
            "trajectory": {"prompt": f"<|im_start|>user\nEmail Nadia about invoice {index}<|im_end|>"},
            "completion": '{"name": "email.send", "arguments": {"to": "nadia"}}' if ok else "Sure! I will do it.",
            "reward": 1.0 if ok else 0.0, "components": {"valid_json": 1.0 if ok else 0.0, "exact": 1.0 if ok else 0.0},
            "bucket": bucket, "v_bucket": bucket, "v_reason": "exact match" if ok else f"{bucket}: not a tool call",
            "created_at": T0,
        })
    return rows


# Ids as the engine makes them (Workspace.new_id): long enough to test that nothing cuts them.
GRPO_RUN = "grpo-20260101-000400-9c1d2e"
GRPO_CHECKPOINT = f"{GRPO_RUN}/step-00004"
FAILED_EVAL = "eval-20260101-000500-f41ed0"
GATE_REASONS = ["held-out success +0.250 (95% interval +0.100 … +0.400, 4 tasks): improves",
                "unsafe-action rate 0.000 → 0.000: ok", "latency p95 2.50s → 2.40s: ok",
                "general function calling: not checked (no BFCL gate split available)"]
GRPO_HELDOUT = {**SFT_METRICS, "heldout_success": 0.75, "execution_success_rate": 0.75}


def grpo_step_metrics(step: int) -> dict:
    return {"reward/mean": 0.2 * step, "reward/valid_json/mean": 0.25 * step, "loss": 1.0 / step,
            "completion/mean_tokens": 30 + step, "kl": 0.02 * step}


def add_grpo_run(data: StoreData) -> None:
    """A finished GRPO run with four stored steps, rollouts and a promoted checkpoint with its gate record."""
    data.append("runs", [{"run_id": GRPO_RUN, "kind": "grpo", "status": "finished", "model": "smollm2-135m",
                          "pack": "workplace-single", "started_at": T0 + 240}])
    events = [{"run_id": GRPO_RUN, "seq": step - 1, "type": "step_metrics", "ts": T0 + 240 + step,
               "payload": {"step": step, "metrics": grpo_step_metrics(step)}} for step in range(1, 5)]
    events.append({"run_id": GRPO_RUN, "seq": 4, "type": "checkpoint_saved", "ts": T0 + 250,
                   "payload": {"step": 4, "path": f"checkpoints/{GRPO_CHECKPOINT}",
                               "metrics": {"heldout/heldout_success": 0.75, "fit/success": 0.5}}})
    data.append("events", events)
    data.append("rollouts", [{"run_id": GRPO_RUN, "step": step, "task_id": f"task-{step}", "sample_index": 0,
                              "completion": '{"name": "email.send"}', "reward": 0.25 * step,
                              "bucket": "success" if step > 2 else "wrong_tool", "created_at": T0 + 240 + step}
                             for step in range(1, 5)])
    record = {"candidate": BASE_METRICS | GRPO_HELDOUT, "baseline": BASE_METRICS, "reasons": GATE_REASONS}
    data.append("checkpoints", [{"id": GRPO_CHECKPOINT, "run_id": GRPO_RUN, "step": 4,
                                 "path": f"checkpoints/{GRPO_CHECKPOINT}", "status": "promoted", "promoted": True,
                                 "metrics": {"heldout": GRPO_HELDOUT}, "note": json.dumps(record),
                                 "created_at": T0 + 250}])


def populate(workspace: Path) -> StoreData:
    """A workspace with a base eval, an SFT run, its checkpoint and its eval, a GRPO run whose checkpoint was
    promoted, and (newest) a base-model eval that failed."""
    data = StoreData(workspace)
    data.append("runs", [{"run_id": "sft-1", "kind": "sft", "status": "finished", "model": "smollm2-135m",
                          "pack": "workplace-single", "started_at": T0 + 60}])
    data.append("evals", [
        {"id": "eval-base", "model": "smollm2-135m", "pack": "workplace-single", "split": "val", "k": 2,
         "status": "finished", "success_rate": 0.0, "metrics": BASE_METRICS, "started_at": T0},
        {"id": "eval-sft", "model": "smollm2-135m", "adapter": "checkpoints/sft-1/step-20", "pack": "workplace-single",
         "split": "val", "k": 2, "status": "finished", "success_rate": 0.5, "metrics": SFT_METRICS,
         "started_at": T0 + 120},
    ])
    data.append("eval_samples", sample_rows("eval-base"))
    data.append("eval_samples", sample_rows("eval-sft", ("success", "wrong_arguments", "success", "format_error")))
    data.append("checkpoints", [{"id": "sft-1/step-20", "run_id": "sft-1", "step": 20,
                                 "path": "checkpoints/sft-1/step-20", "status": "saved", "promoted": False,
                                 "metrics": {"heldout": SFT_METRICS}, "created_at": T0 + 100}])
    add_grpo_run(data)
    data.append("evals", [{"id": FAILED_EVAL, "model": "smollm2-135m", "pack": "workplace-single", "split": "val",
                           "k": 1, "status": "failed", "metrics": {"error": "CUDA out of memory: lower -k"},
                           "started_at": T0 + 300}])
    return data


def eval_script() -> list:
    return [RunStarted(run_id="eval-new", kind="eval", ts=T0),
            *(Progress(run_id="eval-new", stage="eval", done=i, total=4, ts=T0) for i in range(1, 5)),
            EvalFinished(run_id="eval-new", eval_id="eval-base", metrics=BASE_METRICS,
                         recommendation="sft: SFT first: the format is rarely right (valid JSON 25%).", ts=T0),
            RunFinished(run_id="eval-new", ts=T0)]


def train_script() -> list:
    events: list = [RunStarted(run_id="grpo-1", kind="grpo", ts=T0)]
    for step in range(1, 7):
        events.append(StepMetrics(run_id="grpo-1", step=step, ts=T0, metrics={
            "reward/mean": 0.1 * step, "reward/valid_json/mean": min(1.0, 0.2 * step),
            "reward/exact/mean": 0.05 * step, "completion/mean_tokens": 40 - step, "kl": 0.01 * step,
            "time/generate_s": 7.0, "time/update_s": 3.0}))
        events.append(RolloutScored(run_id="grpo-1", step=step, task_id=f"task-{step}", completion='{"name": "x"}',
                                    reward=0.1 * step, bucket="wrong_tool" if step % 2 else "success", ts=T0))
    events.append(CheckpointSaved(run_id="grpo-1", step=6, path="checkpoints/grpo-1/step-6",
                                  metrics={"heldout/execution_success_rate": 0.4}, ts=T0))
    events.append(Alarm(run_id="grpo-1", kind="reward_hacking", step=6, ts=T0,
                        message="train reward rose 0.5 while held-out success fell 0.1"))
    return events


def build_app(tmp_path: Path, hold_open: bool = False, **scripts) -> tuple:
    data = populate(tmp_path / "runs")
    engine = FakeEngineClient(scripts=scripts, doctor_report=DOCTOR, hold_open=hold_open,
                              exit_codes={"promote": 3})
    app = make_app(engine=engine, workspace=str(tmp_path / "runs"), data=data, host_stats=lambda: dict(HOST),
                   tasks_root=str(TASKS_ROOT))
    return app, engine, data


def visible_text(app) -> str:
    """The screen as the user sees it, one line per row (read back from the SVG screenshot)."""
    import html
    import re

    rows: dict[int, list[tuple[float, str]]] = {}
    pattern = r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" clip-path="url\(#[^)]*-line-(\d+)\)">(.*?)</text>'
    for match in re.finditer(pattern, app.export_screenshot()):
        rows.setdefault(int(match.group(2)), []).append((float(match.group(1)), html.unescape(match.group(3))))
    lines = []
    for row in sorted(rows):
        line = ""
        for x, text in sorted(rows[row]):
            line = line.ljust(round(x / 12.2)) + text  # Textual's SVG cells are 12.2 px wide
        lines.append(line.replace("\xa0", " "))
    return "\n".join(lines)


def content_widths(table) -> dict[str, int]:
    """Each DataTable column's width as drawn now, less its padding: what a screenshot would show."""
    return {str(column.label): column.get_render_width(table) - 2 * table.cell_padding
            for column in table.ordered_columns}


async def settle(app, pilot, quiet_rounds: int = 3, max_rounds: int = 60) -> None:
    """Let workers finish and their messages land (no sleeps).

    A handler may start a worker whose message starts another (an eval's result reloads the list, which
    re-selects the eval, which reloads its samples), so a fixed number of rounds is a race on a loaded
    machine. Settle until several rounds in a row find no unfinished worker.
    """
    quiet = 0
    for _ in range(max_rounds):
        try:
            await app.workers.wait_for_complete()
        except WorkerCancelled:  # an exclusive worker replaced by a newer one
            pass
        await pilot.pause()
        busy = any(not worker.is_finished for worker in app.workers)
        quiet = 0 if busy else quiet + 1
        if quiet >= quiet_rounds:
            return
