"""Every command the README prints parses with the real CLI, and every `make` target it names exists.

`make docs-check` (tests/readme_tour.py) goes further and runs the README's tour for real.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance.cli import build_parser
from readme_commands import argv, commands, tour

ROOT = Path(__file__).resolve().parent.parent
APPLIANCE = [c for c in commands() if c.split()[0] == "appliance"]
MAKE = [c for c in commands() if c.split()[0] == "make"]


def test_the_readme_shows_the_tour_and_the_commands():
    assert len(tour()) >= 8 and len(APPLIANCE) >= 25 and {"make run", "make test"} <= set(MAKE)


@pytest.mark.parametrize("command", APPLIANCE)
def test_every_readme_command_parses(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    words = [w for w in argv(command, {}) if w]
    for name in [w for w in words if w == "FILE" or re.search(r"\.(jsonl|json|py)$", w)]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text('{"task_id": "t", "output": ""}\n')
    words = [re.sub(r"^\[(.*)\]$", r"\1", w) for w in words]
    try:
        build_parser().parse_args(words)
    except SystemExit as stop:
        pytest.fail(f"README command does not parse (exit {stop.code}): {command}")


@pytest.mark.parametrize("command", MAKE)
def test_every_readme_make_target_exists(command):
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    target = next(word for word in command.split()[1:] if "=" not in word)
    assert target in targets, command
