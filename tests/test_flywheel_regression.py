"""`appliance tasks from-failures`: labelled failures become a validated, deduplicated, leak-free regression split."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from appliance import cli
from appliance.errors import ApplianceError, PackError
from appliance.flywheel.cli import add_tasks_from_failures
from appliance.flywheel.regression import read_corrections, tasks_from_failures
from appliance.flywheel.trajectories import import_trajectories
from appliance.flywheel.triage import triage
from appliance.packs import load_pack
from appliance.packs.manifest import EVAL_SPLITS, REGRESSION_SPLIT, TRAIN_SPLITS
from appliance.store import Workspace

TASKS = Path(__file__).resolve().parents[1] / "tasks"
SAMPLE = TASKS / "trajectories" / "workplace-multi-sample.jsonl"
PACK = "workplace-multi"
FORWARD_YUKI = [{"name": "email_forward_email", "arguments": {"email_id": "00000149",
                                                              "recipient": "amir.ali@atlas.com"}}]
DELETE_DMITRI = [{"name": "email_delete_email", "arguments": {"email_id": "00000344"}}]


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace.open(tmp_path / "runs")
    yield workspace
    workspace.close()


@pytest.fixture
def root(tmp_path):
    """A copy of the workplace-multi pack: the committed one must stay byte-identical."""
    shutil.copytree(TASKS / PACK, tmp_path / "tasks" / PACK)
    return tmp_path / "tasks"


def _extra_trajectories(tmp_path: Path, root: Path) -> Path:
    """Lines whose correction is their own `expected` field: a repeat of ext-0003, and a training request."""
    train = json.loads((root / PACK / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    lines = [
        {"id": "own-repeat", "pack": PACK, "outcome": "failure", "expected": FORWARD_YUKI,
         "messages": [{"role": "user", "content": "Please share yuki's latest message with amir by forwarding it."},
                      {"role": "assistant", "content": "I cannot do that."}]},
        {"id": "own-train", "pack": PACK, "outcome": "failure", "expected": train["expected"],
         "messages": [{"role": "user", "content": train["messages"][-1]["content"]},
                      {"role": "assistant", "content": "Sorry, no."}]},
    ]
    path = tmp_path / "extra.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _corrections(tmp_path: Path) -> Path:
    lines = [
        {"trajectory_id": "ext-0003", "expected": FORWARD_YUKI},  # kept
        {"trajectory_id": "ext-0002", "expected": DELETE_DMITRI},  # kept
        {"trajectory_id": "ext-0006", "expected": [{"name": "email_shred", "arguments": {}}]},  # not a tool
        {"trajectory_id": "ext-0005", "expected": [{"name": "email_delete_email",
                                                    "arguments": {"email_id": "99999999"}}]},  # fails in the world
        {"trajectory_id": "ext-0001", "expected": DELETE_DMITRI},  # triage passed it
        {"trajectory_id": "nobody", "expected": []},
    ]
    path = tmp_path / "corrections.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _triaged(ws, tmp_path, root) -> None:
    import_trajectories(SAMPLE, ws)
    import_trajectories(_extra_trajectories(tmp_path, root), ws)
    triage(ws, tasks_root=str(root))


def test_labelled_failures_become_regression_tasks_and_the_rest_are_dropped_with_reasons(ws, tmp_path, root):
    _triaged(ws, tmp_path, root)
    manifest_before = (root / PACK / "pack.toml").read_text(encoding="utf-8")
    summary = tasks_from_failures(ws, PACK, tasks_root=str(root), corrections=read_corrections(_corrections(tmp_path)))
    assert summary.kept == [f"{PACK}-regression-ext-0003", f"{PACK}-regression-ext-0002"]
    assert summary.dropped_by_reason == {"unknown_trajectory": 1, "not_a_failure": 1, "invalid": 1,
                                         "does_not_replay": 1, "duplicate": 1, "leaks_from_train": 1}
    why = {trajectory: reason for trajectory, reason, _ in summary.dropped}
    assert why == {"nobody": "unknown_trajectory", "ext-0001": "not_a_failure", "ext-0006": "invalid",
                   "ext-0005": "does_not_replay", "own-repeat": "duplicate", "own-train": "leaks_from_train"}
    assert summary.uncorrected > 0  # the sample's other failures have no correction yet
    manifest_after = (root / PACK / "pack.toml").read_text(encoding="utf-8")
    assert manifest_after.replace('regression = "regression.jsonl"\n', "", 1) == manifest_before
    pack = load_pack(PACK, root=root)
    assert pack.splits[-1] == REGRESSION_SPLIT
    tasks = pack.tasks(REGRESSION_SPLIT)
    assert [t.expected[0].name for t in tasks] == ["email_forward_email", "email_delete_email"]
    assert tasks[0].tags["trajectory_id"] == "ext-0003" and tasks[0].tags["domain"] == "email"
    assert tasks[1].request == "The newest email from dmitri can go; please delete it."

    again = tasks_from_failures(ws, PACK, tasks_root=str(root), corrections=read_corrections(_corrections(tmp_path)))
    assert again.kept == [] and again.dropped_by_reason["duplicate"] == 3  # nothing is added twice
    assert len(load_pack(PACK, root=root).tasks(REGRESSION_SPLIT)) == 2


def test_the_regression_split_is_never_trained_on(root):
    from appliance.train.config import TrainConfig

    assert REGRESSION_SPLIT in EVAL_SPLITS and REGRESSION_SPLIT not in TRAIN_SPLITS
    with pytest.raises(ApplianceError, match="Unknown train split 'regression'"):
        TrainConfig(pack=PACK, train_split=REGRESSION_SPLIT).validate()
    # A regression row that repeats a training request is a leak the loader refuses, as for any held-out split.
    train_line = (root / PACK / "train.jsonl").read_text(encoding="utf-8").splitlines()[0]
    row = json.loads(train_line)
    row["id"] = "leaked-regression-0"
    (root / PACK / "regression.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    manifest = root / PACK / "pack.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(
        '[splits]\n', '[splits]\nregression = "regression.jsonl"\n', 1), encoding="utf-8")
    with pytest.raises(PackError, match="regression.jsonl line 1: .*must not leak from training splits"):
        load_pack(PACK, root=root)


def test_the_committed_packs_have_no_regression_split():
    for name in ("workplace-single", "workplace-multi"):
        assert REGRESSION_SPLIT not in load_pack(name, root=TASKS).splits
        assert not (TASKS / name / "regression.jsonl").exists()


def test_a_malformed_corrections_line_is_one_sentence(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trajectory_id": "a", "expected": []}\n{"expected": "x"}\n', encoding="utf-8")
    with pytest.raises(ApplianceError, match=r"bad.jsonl line 2: a correction is one JSON object"):
        read_corrections(bad)


def _parser() -> argparse.ArgumentParser:
    parser = cli._Parser(prog="appliance")
    sub = parser.add_subparsers(dest="command")
    tasks = sub.add_parser("tasks")
    tsub = tasks.add_subparsers(dest="tasks_cmd", required=True)
    add_tasks_from_failures(tsub)
    return parser


def test_the_command_reports_kept_and_dropped(ws, tmp_path, root, monkeypatch, capsys):
    from appliance.flywheel import cli as flywheel_cli

    _triaged(ws, tmp_path, root)
    ws.close()
    monkeypatch.setattr(cli, "build_parser", _parser)
    monkeypatch.setattr(cli, "_handler", lambda command: flywheel_cli.cmd_tasks_from_failures)
    code = cli.main(["tasks", "from-failures", "--pack", PACK, "--corrections", str(_corrections(tmp_path)),
                     "--workspace", str(tmp_path / "runs"), "--tasks-root", str(root), "--format", "json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kept"] == 2 and out["dropped"]["leaks_from_train"] == 1
    assert out["file"].endswith("regression.jsonl")
