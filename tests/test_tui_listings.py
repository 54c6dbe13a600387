"""The cockpit lists what the store holds as the CLI would: every eval with its status and success, a picker
that opens on the newest finished eval, keys for every tab, full run ids, the gate's stored evidence for the
selected checkpoint, the baseline from the base model's eval, and stored runs' training curves."""
from __future__ import annotations

import json

import pytest
from textual.widgets import DataTable, Select

from test_tui_support import (FAILED_EVAL, GATE_REASONS, GRPO_CHECKPOINT, GRPO_RUN, T0, build_app,
                              content_widths, grpo_step_metrics, settle, train_script, visible_text)
from tui.data import gate_record
from tui.widgets.metric_table import MetricTable
from tui.widgets.rollout_stream import RolloutStream
from tui.widgets.status import success_text
from tui.widgets.tables import fitting
from tui.widgets.train_charts import TrainCharts

NARROW = (80, 24)
pytestmark = pytest.mark.anyio


def line_with(text: str, needle: str) -> str:
    """The one screen line holding `needle`."""
    lines = [line for line in text.splitlines() if needle in line]
    assert lines, f"{needle!r} is not on screen:\n{text}"
    return lines[0]


def column(table: DataTable, index: int) -> list[str]:
    return [str(table.get_row_at(i)[index]) for i in range(table.row_count)]


async def test_a_failed_eval_reads_failed_and_is_never_the_default_at_80x24(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=NARROW) as pilot:
        await settle(app, pilot)
        row = line_with(visible_text(app), FAILED_EVAL)
        assert " failed " in row and "%" not in row  # no success rate for an eval that did not finish
        assert "finished" in line_with(visible_text(app), "eval-sft ") and "50.0%" in line_with(
            visible_text(app), "eval-sft ")

        await app.switch_mode("evaluate")
        await settle(app, pilot)
        screen = app.screen
        assert screen.eval_id == "eval-sft" and screen.query_one("#eval-pick", Select).value == "eval-sft"
        await pilot.press("e")  # the picker opens and lists each eval with its status and success
        await settle(app, pilot)
        text = visible_text(app)
        assert "failed" in line_with(text, FAILED_EVAL) and "0.0%" in line_with(text, "eval-base ")
        await pilot.press("escape")

        await app.switch_mode("audit")
        await settle(app, pilot)
        assert app.screen.query_one("#audit-eval", Select).value == "eval-sft" and app.screen.eval_id == "eval-sft"
        assert "finished" in line_with(visible_text(app), "eval-sft")


async def test_the_evaluate_picker_switches_the_shown_eval(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=NARROW) as pilot:
        await app.switch_mode("evaluate")
        await settle(app, pilot)
        screen = app.screen
        screen.query_one("#eval-pick", Select).value = "eval-base"
        await settle(app, pilot)
        metrics = screen.query_one("#metrics", MetricTable)
        assert screen.eval_id == "eval-base" and str(metrics.ordered_columns[1].label) == "eval-base"
        assert dict(zip(column(metrics, 0), column(metrics, 1)))["valid JSON rate"] == "25.0%"
        assert "Recommendation: SFT" in visible_text(app)
        assert sorted(sample["bucket"] for sample in screen.samples) == sorted(
            ["format_error", "format_error", "wrong_tool", "success"])  # eval-base's own samples

        screen.query_one("#eval-pick", Select).value = FAILED_EVAL
        await settle(app, pilot)
        text = visible_text(app)
        assert "FAILED — this eval did not finish: CUDA out of memory" in text and "Recommendation" not in text
        assert set(column(metrics, 1)) == {"—"}


async def test_every_evaluate_tab_has_a_key_shown_in_the_footer(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=NARROW) as pilot:
        await app.switch_mode("evaluate")
        await settle(app, pilot)
        footer = visible_text(app).splitlines()[-1]
        assert all(hint in footer for hint in ("m Metrics", "v Samples", "c Compare", "e Eval"))
        tabs = app.screen.query_one("#eval-tabs")
        for key, tab in (("v", "tab-samples"), ("c", "tab-compare"), ("m", "tab-metrics")):
            await pilot.press(key)
            await pilot.pause()
            assert tabs.active == tab


async def test_checkpoints_show_full_ids_the_baseline_and_the_selected_rows_gate_evidence(tmp_path):
    app, _, data = build_app(tmp_path)
    async with app.run_test(size=NARROW) as pilot:
        await app.switch_mode("checkpoints")
        await settle(app, pilot)
        text = visible_text(app)
        base = line_with(text, "base model · val")
        assert "0%" in base and "baseline" in base  # eval-base, though the newest base-model eval failed
        assert "★ promoted" in line_with(text, GRPO_RUN) and "+75%" in line_with(text, GRPO_RUN)
        assert "saved" in line_with(text, "sft-1")
        assert "baseline eval eval-base of the base model" in text  # the base row is selected first
        lineage = app.screen.query_one("#lineage", DataTable)
        assert [str(c.label) for c in lineage.ordered_columns][:5] == ["run", "step", "held-out", "Δ base", "status"]
        assert "unsafe" not in {str(c.label) for c in lineage.ordered_columns}  # a detail that does not fit 80
        await pilot.resize_terminal(120, 36)
        await settle(app, pilot)
        assert "unsafe" in {str(c.label) for c in lineage.ordered_columns}
        await pilot.resize_terminal(*NARROW)
        await settle(app, pilot)

        await pilot.press("down")
        await settle(app, pilot)
        gate = app.screen.query_one("#gate-box")
        gate.scroll_end(animate=False)
        await pilot.pause()
        text = visible_text(app)
        assert "improves" in text
        gate.scroll_home(animate=False)
        await pilot.pause()
        text = visible_text(app)
        assert GRPO_CHECKPOINT in text and "held-out success 0.0% → 75.0%" in text
        assert "promoted" in line_with(text, "verdict")

        await pilot.press("y")
        assert app.clipboard == f"checkpoints/{GRPO_CHECKPOINT}"

        # A refusal stores its reasons as the note; selecting that row shows them.
        data.append("checkpoints", [{"id": "sft-1/step-20", "run_id": "sft-1", "status": "refused",
                                     "promoted": False, "note": "held-out success +0.000 (95% interval -0.2 … "
                                     "+0.2, 4 tasks): no improvement that holds statistically; "
                                     "unsafe-action rate 0.000 → 0.000: ok"}])
        await pilot.press("r", "down")
        await settle(app, pilot)
        text = visible_text(app)
        assert "refused" in line_with(text, "sft-1") and "refused" in line_with(text, "verdict")
        assert "no improvement" in text


def test_gate_evidence_survives_a_rollback_through_the_registry(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = f"checkpoints/{GRPO_CHECKPOINT}"
    registry = tmp_path / "checkpoints"
    registry.mkdir()
    evidence = {"reasons": GATE_REASONS, "baseline": {}, "candidate": {}}
    (registry / "PROMOTED.json").write_text(json.dumps({"current": None, "stack": [], "history": [
        {"action": "promote", "id": GRPO_CHECKPOINT, "path": path, "evidence": evidence, "promoted_at": T0},
        {"action": "rollback", "id": GRPO_CHECKPOINT, "reason": "appliance rollback", "at": T0 + 1}]}))
    rolled_back = {"id": GRPO_CHECKPOINT, "path": path, "status": "rolled_back", "note": "appliance rollback"}
    assert gate_record(rolled_back)["reasons"] == GATE_REASONS
    assert gate_record({"id": "x", "path": "nowhere/x/step-1", "status": "saved"}) == {}


async def test_train_shows_a_stored_runs_curves_and_returns_to_the_live_run(tmp_path):
    app, _, _ = build_app(tmp_path, train=train_script())
    async with app.run_test(size=NARROW) as pilot:
        await app.switch_mode("train")
        await settle(app, pilot)
        screen = app.screen
        charts = screen.query_one(TrainCharts)
        assert screen.query_one("#train-run", Select).value == GRPO_RUN  # idle: the newest stored run
        rewards = [(step, grpo_step_metrics(step)["reward/mean"]) for step in range(1, 5)]
        assert charts.history["reward"]["total"] == pytest.approx(rewards)
        assert [step for step, _ in charts.history["loss"]["loss"]] == [1, 2, 3, 4]
        assert charts.history["heldout"]["heldout"] == [(4, 0.75)]  # from the stored checkpoint_saved event
        assert charts.history["heldout"]["train"] == [(4, 0.5)]  # the fit beside it, its own series
        assert screen.query_one(RolloutStream).row_count == 4
        assert "stored grpo run, finished: 4 steps" in visible_text(app)

        screen.query_one("#train-run", Select).value = "sft-1"  # a run with no stored step metrics
        await settle(app, pilot)
        assert not any(charts.history.values()) and "no step metrics stored" in visible_text(app)

        await pilot.press("r")  # a live run takes the charts back
        await settle(app, pilot)
        assert screen.query_one("#train-run", Select).value is Select.NULL
        assert len(charts.history["reward"]["total"]) == 6
        screen.query_one("#train-run", Select).value = GRPO_RUN
        await settle(app, pilot)
        assert len(charts.history["reward"]["total"]) == 4
        screen.query_one("#train-run", Select).clear()
        await settle(app, pilot)
        assert len(charts.history["reward"]["total"]) == 6 and screen.query_one(RolloutStream).row_count == 6


def test_only_a_finished_eval_has_a_success_rate():
    assert str(success_text({"status": "finished", "success_rate": 0.5})) == "50.0%"
    assert str(success_text({"status": "running", "success_rate": None})) == "…"
    assert str(success_text({"status": "failed", "success_rate": 0.0})) == "—"


def test_narrow_tables_drop_detail_columns_never_key_ones():
    widths = [27, 4, 8, 6, 10, 4, 6]
    assert fitting(widths, 120, required=5) == 7
    assert fitting(widths, 74, required=5) == 6
    assert fitting(widths, 20, required=5) == 5


async def test_the_rollout_stream_fits_its_columns_to_the_rows_at_once_and_shows_completions_literally():
    """Columns are sized when rows land, not at the table's next idle moment (a snapshot once caught cells cut
    to the headers' widths), they shrink again when shorter rows replace long ones, and model text is not markup."""
    from textual.app import App

    from appliance.events import RolloutScored

    class One(App):
        def compose(self):
            yield RolloutStream()

    def rollout(task_id: str, completion: str) -> RolloutScored:
        return RolloutScored(run_id="r", step=3, task_id=task_id, sample_index=0, completion=completion,
                             reward=0.5, bucket="success", reason="")

    app = One()
    async with app.run_test(size=(120, 10)):
        table = app.query_one(RolloutStream)
        table.replace([rollout("a-long-task-id-7", "[bold]not markup[/bold]")])
        widths = content_widths(table)
        assert widths["task"] == len("a-long-task-id-7") and widths["bucket"] == len("success")
        assert table.get_row_at(0)[4].plain == "[bold]not markup[/bold]"
        table.replace([rollout("t1", "{}")])
        widths = content_widths(table)
        assert widths["task"] == len("task") and widths["completion"] == len("completion")
