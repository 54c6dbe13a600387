"""Failure modes per adapter version over time and the lightest fix they point to: the engine's answer
(appliance.flywheel.trends), what `appliance trajectories triage` prints, and the cockpit's Flywheel screen
(7), on a real store filled by the real import and triage of the shipped sample."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from textual.widgets import DataTable

from appliance import cli
from appliance.evaluate.decision import lightest_fix
from appliance.flywheel.trajectories import import_trajectories
from appliance.flywheel.trends import failure_modes_over_time, flywheel_fix, latest_fixes
from appliance.flywheel.triage import triage
from appliance.store import Workspace
from test_tui_support import GRPO_CHECKPOINT, T0, build_app, settle, visible_text

TASKS = Path(__file__).resolve().parents[1] / "tasks"
SAMPLE = TASKS / "trajectories" / "workplace-multi-sample.jsonl"
SAMPLE_GRPO = "grpo-20251120-101500-3fa2c1/step-00030"
DAY = 86_400
# The shipped sample's lines, dated: the base model's a day before the promoted adapter's, the unknown last.
DATED = {"base": T0, GRPO_CHECKPOINT: T0 + DAY, None: T0 + 2 * DAY}
# An eval of the promoted adapter on workplace-multi whose samples disagree on the same tasks: DPO.
MULTI_EVAL = {"id": "eval-multi-grpo", "model": "smollm2-135m", "adapter": f"checkpoints/{GRPO_CHECKPOINT}",
              "pack": "workplace-multi", "split": "val", "k": 4, "status": "finished", "success_rate": 0.6,
              "metrics": {"n_tasks": 10, "k": 4, "pass@1": 0.6, "pass@4": 0.9, "valid_json_rate": 0.95,
                          "inconsistent_tasks": 4, "buckets": {"wrong_arguments": 12, "success": 28}},
              "started_at": T0 + DAY + 60}


def add_flywheel(workspace: Path, tmp_path: Path, with_eval: bool = True) -> Workspace:
    """The shipped sample, its GRPO lines served by the promoted checkpoint and every line dated, imported and
    triaged into `workspace` with the real functions (and, `with_eval`, an eval of that checkpoint)."""
    lines = []
    for raw in SAMPLE.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        if line.get("adapter_version") == SAMPLE_GRPO:
            line["adapter_version"] = GRPO_CHECKPOINT
        line["created_at"] = DATED[line.get("adapter_version")] + int(line["id"][-2:])
        lines.append(json.dumps(line))
    dated = tmp_path / "dated-sample.jsonl"
    dated.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ws = Workspace.open(workspace)
    import_trajectories(dated, ws)
    triage(ws, tasks_root=str(TASKS))
    if with_eval:
        ws.append("evals", [MULTI_EVAL])
    return ws


@pytest.fixture
def ws(tmp_path):
    workspace = add_flywheel(tmp_path / "runs", tmp_path)
    yield workspace
    workspace.close()


# --- the engine ------------------------------------------------------------------------


def test_adapter_versions_come_oldest_first_with_their_modes_and_primaries(ws):
    base, promoted, unknown = failure_modes_over_time(ws)
    assert [a.adapter_version for a in (base, promoted, unknown)] == ["base", GRPO_CHECKPOINT, "unknown"]
    assert base.first_seen < promoted.first_seen < unknown.first_seen
    assert (base.judged, base.failed, promoted.judged, promoted.failed, unknown.failed) == (5, 4, 4, 4, 0)
    assert base.primary == {"bad_planning": 2, "hallucinated_api": 2, "success": 1}
    assert promoted.primary == {"incomplete_execution": 2, "human_intervention": 1, "unsafe_action": 1}
    assert base.modes["wrong_tool"] == 2 and "wrong_tool" not in base.primary  # shown, never primary
    assert promoted.top_mode == "incomplete_execution" and unknown.top_mode is None
    assert failure_modes_over_time(ws, pack="workplace-single") == []


def test_the_fix_reads_the_triage_modes_and_the_adapters_own_eval(ws):
    base, promoted, unknown = failure_modes_over_time(ws)
    base_fix = flywheel_fix(ws, base)
    assert base_fix.eval_id is None and base_fix.fix.kind == "prompt"  # 2 of 4 triaged failures call unknown APIs
    assert base_fix.fix.evidence["triage"] == {"bad_planning": 2, "hallucinated_api": 2}
    promoted_fix = flywheel_fix(ws, promoted)  # the eval is found through the registry's folder for the id
    assert promoted_fix.eval_id == "eval-multi-grpo" and promoted_fix.fix.kind == "dpo"
    assert promoted_fix.fix.evidence["failures"] == 12 + 4 and promoted_fix.fix.evidence["buckets"] == {
        "wrong_arguments": 12}
    assert flywheel_fix(ws, unknown).fix is None
    [latest] = latest_fixes(ws)  # the newest known version; `unknown` is newer but says nothing about one
    assert latest.adapter.adapter_version == GRPO_CHECKPOINT and "lightest fix dpo" in str(latest)


def test_without_an_eval_triaged_successes_make_it_grpo_and_none_make_it_sft():
    assert lightest_fix({}, triage_modes={"bad_planning": 3, "success": 2}).kind == "grpo"
    assert lightest_fix({}, triage_modes={"bad_planning": 3, "unverified": 2}).kind == "sft"
    with_eval = {"pass@1": 0.0, "k": 1, "buckets": {"wrong_tool": 2}}
    assert lightest_fix(with_eval, triage_modes={"bad_planning": 3, "success": 2}).kind == "sft"  # the eval wins


def test_the_triage_command_prints_the_recommendation_from_the_modes(tmp_path, capsys):
    ws = Workspace.open(tmp_path / "runs")
    import_trajectories(SAMPLE, ws)
    code = cli.main(["trajectories", "triage", "--workspace", str(ws.root), "--tasks-root", str(TASKS),
                     "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)  # stdout stays one JSON document
    [line] = [line for line in captured.err.splitlines() if line.startswith("recommendation: ")]
    assert line == (f"recommendation: smollm2-135m {SAMPLE_GRPO} on workplace-multi: lightest fix sft — 4 failures "
                    "and no success to reinforce; SFT on demonstrations (from 4 triaged trajectories)")


# --- the cockpit -------------------------------------------------------------------------

pytestmark_anyio = pytest.mark.anyio


def line_with(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if needle in line]
    assert lines, f"{needle!r} is not on screen:\n{text}"
    return lines[0]


@pytestmark_anyio
async def test_the_flywheel_screen_lists_versions_and_the_selected_fix_at_80x24(tmp_path):
    app, _, _ = build_app(tmp_path)
    add_flywheel(tmp_path / "runs", tmp_path).close()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("7")
        await settle(app, pilot)
        text = visible_text(app)
        assert "7 Flywheel" in text
        assert "4/5" in line_with(text, "base ") and "hallucinated_api" in line_with(text, "base ")
        assert "4/4" in line_with(text, GRPO_CHECKPOINT) and "incomplete_execution" in line_with(text, GRPO_CHECKPOINT)
        assert "0/1" in line_with(text, "unknown") and "none" in line_with(text, "unknown")
        table = app.screen.query_one("#fw-adapters", DataTable)
        assert table.cursor_row == 1  # the newest known version, the one triage recommends for
        assert "fix dpo" in text and "4 of 10 tasks are" in text and "eval-multi-grpo" in text
        assert "human_intervention" in text  # the selected version's modes

        await pilot.press("up")
        await settle(app, pilot)
        text = visible_text(app)
        assert "fix prompt" in text and "2 of 4 triaged failures" in text and "from 5 triaged" in text
        assert "failure mode" in line_with(text, "primary") and "40%" in line_with(text, "bad_planning")


@pytestmark_anyio
async def test_an_empty_store_says_how_to_fill_the_flywheel(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.switch_mode("flywheel")
        await settle(app, pilot)
        assert "appliance trajectories triage" in visible_text(app)


@pytestmark_anyio
async def test_the_nav_bar_keeps_the_job_in_80_columns(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        app.job = "train grpo"
        await pilot.pause()
        top = visible_text(app).splitlines()[0]
        assert "● train grpo" in top and "Home" in top and "Evaluate" not in top  # only the current keeps its title
        app.job = ""
        await pilot.pause()
        assert "7 Flywheel" in visible_text(app).splitlines()[0]


# --- snapshots (regenerate with `pytest tests/test_flywheel_panel.py --snapshot-update`) ----------


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the Home screen shows the workspace path; a relative one is the same everywhere
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"  # timestamps are shown in local time
    time.tzset()
    yield tmp_path
    if previous is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = previous
    time.tzset()


@pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])
def test_flywheel_snapshot(snap_compare, in_tmp, size):
    app, _, _ = build_app(Path("."))
    add_flywheel(Path("runs"), in_tmp).close()

    async def run_before(pilot) -> None:
        await pilot.app.switch_mode("flywheel")
        await settle(pilot.app, pilot)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)
