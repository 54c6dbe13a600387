"""Snapshot tests: the main screens in a representative state at 80×24 (the smallest terminal the cockpit
promises) and 120×36; SQL and help at 100×30.

Regenerate after an intended change with
`pytest tests/test_tui_snapshots.py --snapshot-update` and look at the report.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from test_tui_support import build_app, eval_script, settle, train_script

SIZE = (100, 30)


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    # The Home screen shows the workspace path; a relative one is the same on every run.
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def utc_clock():
    # Timestamps are shown in local time; pin it so snapshots match on every machine.
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if previous is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = previous
    time.tzset()


def on_screen(mode: str, *keys: str):
    async def run_before(pilot) -> None:
        await pilot.app.switch_mode(mode)
        await settle(pilot.app, pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot.app, pilot)
        pilot.app.clear_notifications()  # toasts time out; keep the screen itself
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        await pilot.pause()  # a DataTable sizes its columns one refresh after its rows land
    return run_before


MAIN_SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 36)], ids=["80x24", "120x36"])


@MAIN_SIZES
def test_home_snapshot(snap_compare, size):
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=size, run_before=on_screen("home"))


@MAIN_SIZES
def test_evaluate_snapshot_after_an_eval(snap_compare, size):
    app, _, _ = build_app(Path("."), eval=eval_script())
    assert snap_compare(app, terminal_size=size, run_before=on_screen("evaluate", "r"))


@MAIN_SIZES
def test_audit_snapshot_after_two_labels(snap_compare, size):
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=size, run_before=on_screen("audit", "a", "d"))


@MAIN_SIZES
def test_train_snapshot_with_charts_and_alarm(snap_compare, size):
    app, _, _ = build_app(Path("."), train=train_script())
    assert snap_compare(app, terminal_size=size, run_before=on_screen("train", "r"))


@MAIN_SIZES
def test_train_snapshot_of_a_stored_run(snap_compare, size):
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=size, run_before=on_screen("train"))


@MAIN_SIZES
def test_checkpoints_snapshot_with_the_promoted_rows_evidence(snap_compare, size):
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=size, run_before=on_screen("checkpoints", "down"))


def test_sql_snapshot(snap_compare, monkeypatch):
    import tui.screens.sql as sql_screen

    monkeypatch.setattr(sql_screen.time, "perf_counter", lambda: 0.0)  # "N rows in 0.0 s", not the machine's load
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=SIZE, run_before=on_screen("sql"))


def test_help_snapshot(snap_compare):
    app, _, _ = build_app(Path("."))
    assert snap_compare(app, terminal_size=SIZE, run_before=on_screen("home", "question_mark"))
