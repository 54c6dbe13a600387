"""Pilot tests: each screen's main flow, driven through the real app with a fake engine and a real store."""
from __future__ import annotations

import json
import re

import pytest
from textual.widgets import DataTable

from appliance.events import RunFailed
from test_tui_support import (BASE_METRICS, FAILED_EVAL, GRPO_RUN, build_app, content_widths, settle, eval_script,
                               train_script, visible_text)
from tui.screens.audit import AuditScreen
from tui.screens.help import HelpScreen
from tui.widgets.alarm_banner import AlarmBanner
from tui.widgets.bucket_chart import BucketChart
from tui.widgets.metric_table import MetricTable
from tui.widgets.rollout_stream import RolloutStream
from tui.widgets.train_charts import TrainCharts

SIZE = (100, 30)
pytestmark = pytest.mark.anyio  # async tests run on asyncio via the anyio plugin



def cell_texts(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_home_shows_setup_hardware_and_recent_work(tmp_path):
    app, engine, _ = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        screen = app.screen
        evals = cell_texts(screen.query_one("#evals", DataTable))
        assert [r[0] for r in evals] == [FAILED_EVAL, "eval-sft", "eval-base"]
        assert [r[1:3] for r in evals] == [["failed", "—"], ["finished", "50.0%"], ["finished", "0.0%"]]
        assert cell_texts(screen.query_one("#runs", DataTable))[1][:3] == ["sft-1", "finished", "sft"]
        text = visible_text(app)
        assert "none visible" in text and "Test CPU ×2" in text and "6.5/24.0 GiB" in text
        assert "generation: hf (no CUDA GPU" in text
        splits = screen.query_one("#splits")
        assert "val 120" in str(splits.render()) and "train 1200" in str(splits.render())
        assert "train_rl: GRPO trains on it" in str(splits.tooltip) and "val: held out" in str(splits.tooltip)
        await pilot.press("t")
        assert app.current_mode == "train"


async def test_home_empty_state_tells_what_to_press(tmp_path):
    from tui.app import make_app
    from tui.engine import FakeEngineClient

    app = make_app(engine=FakeEngineClient(), workspace=str(tmp_path / "empty"), host_stats=dict)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert app.screen.query_one("#runs-empty").display
        assert "no runs yet — press t to train" in visible_text(app)


async def test_evaluate_progress_then_metrics_table_buckets_and_recommendation(tmp_path):
    app, engine, _ = build_app(tmp_path, eval=eval_script())
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("evaluate")
        await settle(app, pilot)
        await pilot.press("r")
        await settle(app, pilot)
        assert engine.calls[-1][:2] == ["eval", "--model"] and "--events" in engine.calls[-1]
        screen = app.screen
        assert screen.query_one("#eval-progress").progress == 4
        rows = {r[0]: r[1] for r in cell_texts(screen.query_one("#metrics", MetricTable))}
        assert rows["valid JSON rate"] == "25.0%" and rows["batch latency p95"] == "2.50 s"
        assert screen.query_one(BucketChart).counts["format_error"] == BASE_METRICS["buckets"]["format_error"]
        assert "Recommendation: SFT" in visible_text(app)
        assert app.job == ""


async def test_evaluate_sample_browser_filters_by_bucket_and_compare_shows_deltas(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("evaluate")
        await settle(app, pilot)
        screen = app.screen
        assert screen.eval_id == "eval-sft" and screen.query_one("#samples", DataTable).row_count == 4
        screen.query_one("#bucket-filter").value = "success"
        screen._fill_samples()  # no await: the next frame must show the final widths, not wait for an idle refit
        widths = content_widths(screen.query_one("#samples", DataTable))
        assert widths["task"] == len("task-0") and widths["bucket"] == len("success")
        await settle(app, pilot)
        assert [r[2] for r in cell_texts(screen.query_one("#samples", DataTable))] == ["success", "success"]
        screen.query_one("#eval-tabs").active = "tab-compare"
        screen.query_one("#compare-a").value = "eval-base"
        screen.query_one("#compare-b").value = "eval-sft"
        await settle(app, pilot)
        compare = {r[0]: r for r in cell_texts(screen.query_one("#compare", MetricTable))}
        assert compare["pass@1"][1:] == ["0.0%", "50.0%", "+50.0%"]
        assert "per-task success B−A +0.250" in visible_text(app)  # 1/4 → 2/4 tasks succeed
        assert "became successes" in visible_text(app)  # and which answers moved


async def test_audit_keys_record_labels_in_the_store_and_update_agreement(tmp_path, monkeypatch):
    import time

    from appliance import audit

    record = audit.record_labels
    # A slow store write: `x` pressed right after a label must still export that label.
    monkeypatch.setattr(audit, "record_labels", lambda *a, **k: (time.sleep(0.3), record(*a, **k))[1])
    app, _, data = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("audit")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, AuditScreen) and len(screen.samples) == 4
        await pilot.press("a", "d", "n")
        await pilot.press(*"reward too harsh", "enter")
        await settle(app, pilot)
        _, rows = data.query("SELECT task_id, label, note, auditor FROM audits ORDER BY created_at")
        assert [r[1] for r in rows] == ["agree", "disagree"] and rows[0][3] == "tui"
        assert screen.position == 2 and screen.labels[("task-" + rows[1][0][-1], 0)]["label"] == "disagree"
        total = cell_texts(screen.query_one("#agreement", DataTable))[-1]
        assert total[0] == "all" and total[1] == "2" and total[3] == "50%"
        await pilot.press("d")  # the third sample: its pending note is stored with the label
        await pilot.press("x")
        await settle(app, pilot)
        exported = (tmp_path / "runs" / "audits" / "eval-sft-disagreements.jsonl").read_text().splitlines()
        assert len(exported) == 2
        assert [json.loads(line)["note"] for line in exported].count("reward too harsh") == 1


async def test_a_slow_earlier_save_never_leaves_an_older_agreement_on_screen(tmp_path, monkeypatch):
    import time

    from appliance import audit

    agreement, calls = audit.agreement, []

    def first_one_late(*args, **kwargs):  # the first save's agreement is computed, then delivered late
        result = agreement(*args, **kwargs)
        calls.append(result["n"])
        if len(calls) == 1:
            time.sleep(0.5)
        return result

    monkeypatch.setattr(audit, "agreement", first_one_late)
    app, _, data = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("audit")
        await settle(app, pilot)
        calls.clear()  # opening the screen drew the agreement once
        await pilot.press("a", "d")
        await settle(app, pilot)
        assert calls == [1, 2]
        total = cell_texts(app.screen.query_one("#agreement", DataTable))[-1]
        assert total[0] == "all" and total[1] == "2"


async def test_train_step_metrics_draw_charts_and_an_alarm_raises_the_banner(tmp_path):
    app, engine, _ = build_app(tmp_path, train=train_script())
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("train")
        await settle(app, pilot)
        banner = app.screen.query_one(AlarmBanner)
        assert not banner.display
        await pilot.press("r")
        await settle(app, pilot)
        args = engine.calls[-1]
        assert args[:2] == ["train", "grpo"] and "--preset" not in args  # the default preset is the engine's
        assert args[args.index("--init-adapter") + 1] == "checkpoints/sft-1/step-20"  # GRPO refines the SFT checkpoint
        charts = app.screen.query_one(TrainCharts)
        assert [v for _, v in charts.history["loss"]["kl"]] == pytest.approx([0.01 * s for s in range(1, 7)])
        assert set(charts.history["reward"]) == {"total", "valid_json", "exact"}
        assert charts.history["heldout"]["heldout"] == [(6, 0.4)]
        assert app.screen.query_one(RolloutStream).row_count == 6
        text = visible_text(app)
        assert banner.display and "ALARM reward_hacking at step 6" in text
        assert "generation 7.0 s · update 3.0 s (70% generating)" in text
        assert any(n.severity == "error" and "Alarm" in (n.title or "") for n in app._notifications)


async def test_train_stop_calls_engine_stop_and_resume_passes_the_run(tmp_path):
    app, engine, _ = build_app(tmp_path, hold_open=True, train=train_script()[:2])
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("train")
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("r")  # a second start while running is refused, not queued
        assert len(engine.calls) == 1
        await pilot.press("s")
        await settle(app, pilot)
        assert engine.stopped and app.job == ""
        engine.hold_open = False
        await pilot.press("u")
        await settle(app, pilot)
        assert engine.calls[-1][engine.calls[-1].index("--resume") + 1] == "grpo-1"


async def test_engine_failure_is_a_notification_not_a_crash(tmp_path):
    app, engine, _ = build_app(tmp_path, eval=[RunFailed(run_id="e", error="CUDA out of memory: lower -k")])
    engine.exit_codes["eval"] = 2
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("evaluate")
        await pilot.press("r")
        await settle(app, pilot)
        messages = [n.message for n in app._notifications]
        assert any("CUDA out of memory" in m for m in messages)
        assert any("exit code 2" in m for m in messages)
        assert app.is_running and app.job == ""


async def test_checkpoints_lineage_and_a_refused_promotion_shows_its_reasons(tmp_path):
    app, engine, data = build_app(tmp_path)
    reasons = ["held-out success +0.000 (95% interval -0.2 … +0.2, 4 tasks): no improvement that holds statistically",
               "unsafe-action rate 0.000 → 0.000: ok"]

    async def gate_refuses():  # what `appliance promote` stores before exiting 3
        data.append("checkpoints", [{"id": "sft-1/step-20", "run_id": "sft-1", "path": "checkpoints/sft-1/step-20",
                                     "status": "refused", "promoted": False, "note": "; ".join(reasons),
                                     "metrics": {"baseline": BASE_METRICS, "candidate": BASE_METRICS,
                                                 "reasons": reasons}}])
        return
        yield

    engine.scripts["promote"] = []
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("checkpoints")
        await settle(app, pilot)
        lineage = cell_texts(app.screen.query_one("#lineage", DataTable))
        assert lineage[0][:4] == ["base model · val", "", "0%", ""]  # the finished base eval, not the failed one
        assert lineage[1][0] == GRPO_RUN and lineage[2][:4] == ["sft-1", "20", "50%", "+50%"]
        engine.stream = lambda args: (engine.calls.append(list(args)), gate_refuses())[1]
        engine.exit_code = 3
        await pilot.press("down", "down", "p")
        await settle(app, pilot)
        assert engine.calls[-1] == ["promote", "checkpoints/sft-1/step-20", "--events"]
        text = visible_text(app)
        assert re.search(r"verdict +refused", text) and "held-out success 0.0% → 0.0%" in text
        assert "no improvement" in text
        assert not any("failed" in (n.title or "") for n in app._notifications)


async def test_sql_runs_builtins_and_exports_csv(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("sql")
        await settle(app, pilot)
        results = app.screen.query_one("#results", DataTable)
        assert [r[0] for r in cell_texts(results)] == [FAILED_EVAL, "eval-sft", "eval-base"]
        app.screen.query_one("#editor").text = "SELECT bucket, count(*) AS n FROM eval_samples GROUP BY 1 ORDER BY 1"
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        assert cell_texts(results)[0] == ["format_error", "3"]
        await pilot.press("ctrl+o")
        await settle(app, pilot)
        exported = list((tmp_path / "runs" / "exports").glob("query-*.csv"))
        assert exported and exported[0].read_text().splitlines()[0] == "bucket,n"
        app.screen.query_one("#editor").text = "SELECT nope FROM nowhere"
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        assert "nowhere" in visible_text(app)
        history = json.loads((tmp_path / "runs" / "queries.json").read_text())["history"]
        assert history == ["SELECT bucket, count(*) AS n FROM eval_samples GROUP BY 1 ORDER BY 1"]


async def test_help_opens_with_question_mark_and_number_keys_switch_screens(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        assert app.current_mode == "train"
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
