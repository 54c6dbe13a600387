"""One real end-to-end pilot: the cockpit runs an eval of the tiny model through the real engine child process."""
from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Input

from appliance.store import Workspace
from tui.app import make_app
from tui.widgets.metric_table import MetricTable

pytestmark = pytest.mark.anyio


async def test_evaluate_screen_runs_a_real_eval_and_shows_its_metrics(tiny_model_dir, tmp_path):
    workspace = str(tmp_path / "runs")
    app = make_app(workspace=workspace, model=str(tiny_model_dir), pack="workplace-single",
                   host_stats=lambda: {"cpu": "test", "cores": 2, "ram_used_gib": 1.0, "ram_total_gib": 2.0})
    async with app.run_test(size=(100, 30)) as pilot:
        await app.switch_mode("evaluate")
        await pilot.pause()
        app.screen.query_one("#k", Input).value = "1"
        app.screen.query_one("#limit", Input).value = "4"
        await pilot.press("r")
        for _ in range(600):  # the child process loads torch and the model: allow up to a minute
            await asyncio.sleep(0.1)
            if app.job == "" and Workspace.open(workspace).query(
                    "SELECT count(*) FROM evals WHERE status = 'finished'")[1][0][0]:
                break
        await pilot.pause()
        rows = {str(r[0]): str(r[1]) for r in (app.screen.query_one("#metrics", MetricTable).get_row_at(i)
                                              for i in range(app.screen.query_one("#metrics", DataTable).row_count))}
        assert rows.get("valid JSON rate", "").endswith("%")
    _, evals = Workspace.open(workspace).query("SELECT n_samples, status FROM evals")
    assert evals == [(4, "finished")]
