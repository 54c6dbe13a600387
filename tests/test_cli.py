"""The CLI: help everywhere, one-line errors with a non-zero exit, never a traceback."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from appliance.cli import build_parser


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_every_subcommand_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():
        text = p.format_help()
        assert "usage:" in text, name


def _parsers(parser, path=("appliance",)):
    """Every parser in the tree with its command path."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def test_every_option_and_argument_says_what_it_is():
    """The README promises `--help` text for every option: no flag or positional is left bare."""
    bare = [f"{' '.join(path)} {action.option_strings or action.dest}"
            for path, parser in _parsers(build_parser()) for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help]
    assert not bare, bare


@pytest.mark.parametrize("args,needle", [
    (("tasks", "stats", "no-such-pack"), "no-such-pack"),
    (("sql", "SELEC nonsense"), "error"),
    (("verify", "/nonexistent/outputs.jsonl"), "outputs.jsonl"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, args, needle):
    proc = run_cli(*args, "--workspace", str(tmp_path / "ws"))
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_sql_answers_on_a_fresh_workspace(tmp_path):
    proc = run_cli("sql", "SELECT count(*) AS n FROM rollouts", "--format", "csv",
                   "--workspace", str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["n", "0"]


def test_train_flags_map_onto_the_run_config(tmp_path):
    from appliance.train.cli_glue import config_from_args

    args = build_parser().parse_args(["train", "grpo", "--steps", "3", "--lr", "1e-5", "--preset", "dapo",
                                      "--num-generations", "4", "--workspace", str(tmp_path)])
    config = config_from_args(args)
    assert (config.stage, config.steps, config.learning_rate, config.preset, config.num_generations) == (
        "grpo", 3, 1e-5, "dapo", 4)
    assert config.workspace == str(tmp_path) and config.pack == "workplace-single"


def test_a_bad_training_setting_is_one_sentence(tmp_path):
    proc = run_cli("train", "grpo", "--num-generations", "1", "--workspace", str(tmp_path / "ws"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "num_generations" in proc.stderr


def test_verify_scores_a_file_and_stores_the_verdicts(tmp_path):
    import json as _json

    from appliance.packs import load_pack
    from appliance.prompting import render_completion
    from appliance.store import Workspace

    tasks = load_pack("workplace-single").tasks("val")[:10]
    outputs = tmp_path / "outputs.jsonl"
    lines = [{"task_id": t.id, "output": render_completion(t.expected)} for t in tasks[:8]]
    lines += [{"task_id": t.id, "output": "{broken"} for t in tasks[8:]]
    outputs.write_text("\n".join(_json.dumps(line) for line in lines))
    proc = run_cli("verify", str(outputs), "--workspace", str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    _, rows = Workspace.open(tmp_path / "ws").query(
        "SELECT bucket, count(*) FROM eval_samples GROUP BY bucket ORDER BY bucket")
    assert dict(rows) == {"format_error": 2, "success": 8}


def test_progress_bar_draws_its_first_state_once(capsys):
    from appliance.events import Log, Progress
    from appliance.report import HumanSink

    sink = HumanSink()
    sink(Progress(stage="eval", done=16, total=120))
    sink(Progress(stage="eval", done=32, total=120))
    sink(Log(message="done"))
    err = capsys.readouterr().err
    assert err.count("16/120") == 1 and err.count("32/120") == 1


def test_kill_ends_a_command_like_ctrl_c(tmp_path):
    """SIGTERM is taken as Ctrl-C: the command's KeyboardInterrupt path runs (stores what finished), exit 130."""
    import signal
    import textwrap
    import time

    started = tmp_path / "started"
    script = tmp_path / "long_command.py"
    script.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        from appliance import cli, commands
        def long_doctor(args):
            pathlib.Path({str(started)!r}).write_text("1")
            time.sleep(600)
        commands.cmd_doctor = long_doctor
        sys.exit(cli.main(["doctor"]))
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted: finished work was kept." in err


def test_a_stopped_run_says_so_in_a_sentence_not_an_empty_failure(capsys):
    """Ctrl-C or kill during training: the store gets status `stopped` and a sentence, and so does the terminal."""
    from types import SimpleNamespace

    from appliance.events import RunFailed
    from appliance.report import HumanSink
    from appliance.train.common import fail_run

    updates, events = [], []
    run = SimpleNamespace(run_id="grpo-1", writer=SimpleNamespace(update_run=lambda **kw: updates.append(kw)),
                          emit=events.append)
    err = KeyboardInterrupt()
    assert fail_run(run, err) is err
    assert updates[0]["status"] == "stopped" and "interrupt" in updates[0]["error"]
    [event] = events
    assert isinstance(event, RunFailed) and event.error == updates[0]["error"]
    HumanSink()(event)
    assert "interrupt (Ctrl-C or kill)" in capsys.readouterr().err
    fail_run(run, RuntimeError("disk full"))
    assert updates[1] == {**updates[1], "status": "failed", "error": "disk full"}
