"""`appliance tasks new` (parser and handler, called directly) and how packs with their own world load."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.commands import cmd_tasks
from appliance.errors import ApplianceError, PackError
from appliance.packs import load_pack
from appliance.userworld.cli import add_tasks_new, cmd_tasks_new
from appliance.verify import Verifier

FIXTURES = Path(__file__).parent / "fixtures"
TRACKER = FIXTURES / "tracker_functions.py"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="appliance tasks")
    add_tasks_new(parser.add_subparsers(dest="tasks_cmd", required=True))
    return parser.parse_args(list(argv))


def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                          "parameters": {"type": "object", "properties": {
                                              "city": {"type": "string"},
                                              "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
                                              "required": ["city"]}}},
        {"type": "function", "function": {"name": "set_alarm", "description": "Set an alarm.",
                                          "parameters": {"type": "object", "properties": {
                                              "time": {"type": "string"}}, "required": ["time"]}}}]))
    return path


def test_tasks_new_from_functions_writes_a_pack_that_tasks_check_passes(tmp_path, capsys):
    root = tmp_path / "tasks"
    args = parse("new", "tracker", "--functions", str(TRACKER), "--tasks-root", str(root))
    assert args.tasks_cmd == "new" and cmd_tasks_new(args) == 0
    printed = capsys.readouterr().out
    assert "world 'python', 6 tools (2 read-only, 4 changing state)" in printed
    assert "next: write your seed requests into" in printed
    files = sorted(p.name for p in (root / "tracker").iterdir())
    assert files == ["README.md", "pack.toml", "tools.json", "tracker_functions.py", "train.jsonl", "val.jsonl"]
    check = argparse.Namespace(tasks_cmd="check", packs=[str(root / "tracker")], tasks_root=str(root))
    assert cmd_tasks(check) == 0  # `appliance tasks check` on the new pack: clean
    readme = (root / "tracker" / "README.md").read_text()
    assert "`create_issue` (changes state): Create an issue in the tracker." in readme
    assert '"expected": [{"name": "create_issue", "arguments": {"title": "..."}}]' in readme


def test_the_manifest_carries_every_world_setting_with_its_help_and_example_rules(tmp_path):
    cmd_tasks_new(parse("new", "tracker", "--functions", str(TRACKER), "--tasks-root", str(tmp_path)))
    text = (tmp_path / "tracker" / "pack.toml").read_text()
    assert 'world = "python"' in text and 'state = "make_state"' in text
    assert "# wall-clock seconds one task's calls may take before they count as hung\n# timeout_s = 5.0" in text
    assert '# rule = "argument_pattern"' in text and '# rule = "max_calls"' in text


def test_tasks_new_from_a_tools_list_compares_arguments_with_the_schema(tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps({"request": "Weather in Oslo?",
                                 "expected": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}) + "\n")
    args = parse("new", "weather", "--tools", str(tools_file(tmp_path)), "--seeds", str(seeds),
                 "--tasks-root", str(tmp_path / "tasks"))
    assert cmd_tasks_new(args) == 0
    pack = load_pack(tmp_path / "tasks" / "weather")
    assert pack.world == "arguments" and pack.manifest["arguments"]["read_only"] == ["get_weather"]
    task = pack.tasks("val")[0]
    assert task.id == "weather-val-0001" and task.tags["source"] == "human"
    verifier = Verifier.for_pack(pack)
    right = verifier.verify(task, '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}')
    assert right.bucket == "success"  # the default filled in, the enum's case folded
    assert verifier.verify(task, '{"name": "get_weather", "arguments": {"city": "oslo"}}').bucket == "wrong_arguments"


def test_a_source_is_required_and_only_one(tmp_path):
    with pytest.raises(SystemExit):
        parse("new", "x")
    with pytest.raises(SystemExit):
        parse("new", "x", "--tools", str(tools_file(tmp_path)), "--functions", str(TRACKER))


@pytest.mark.parametrize("argv, words", [
    (["new", "bad name", "--functions", str(TRACKER)], "cannot name a pack"),
    (["new", "x", "--functions", str(TRACKER), "--reset-tool", "reset"], "--reset-tool and --state-tool are for"),
    (["new", "x", "--functions", str(TRACKER), "--state", "build_state"], "has no function 'build_state'"),
    (["new", "x", "--mcp", "''"], "--mcp needs the command"),
])
def test_mistakes_are_one_sentence(tmp_path, argv, words):
    with pytest.raises(PackError, match=words):
        cmd_tasks_new(parse(*argv, "--tasks-root", str(tmp_path)))


def test_an_existing_pack_is_kept_unless_forced(tmp_path):
    args = parse("new", "tracker", "--functions", str(TRACKER), "--tasks-root", str(tmp_path))
    cmd_tasks_new(args)
    with pytest.raises(PackError, match="already exists and is not empty; pick another name or pass --force"):
        cmd_tasks_new(args)
    assert cmd_tasks_new(parse("new", "tracker", "--functions", str(TRACKER), "--tasks-root", str(tmp_path),
                               "--force")) == 0


# --- the world tables in pack.toml -----------------------------------------------------------------


@pytest.fixture()
def tracker_pack(tmp_path) -> Path:
    cmd_tasks_new(parse("new", "tracker", "--functions", str(TRACKER), "--tasks-root", str(tmp_path)))
    return tmp_path / "tracker"


def edit(pack: Path, old: str, new: str) -> None:
    manifest = pack / "pack.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new))


@pytest.mark.parametrize("old, new, words", [
    ('state = "make_state"', 'state = "make_state"\nstat = 1', r"pack.toml line \d+: \[python\] has no key 'stat'"),
    ("# timeout_s = 5.0", "timeout_s = -1", r"\[python\] 'timeout_s' must be a number of seconds above 0"),
    ('module = "tracker_functions.py"', 'module = "missing.py"', "module 'missing.py' is not a .py file"),
    ('read_only = ["search_issues", "get_issue"]', 'read_only = ["search"]',
     r"\[python\] read_only names 'search', which is not in the pack's tools"),
    ('world = "python"', 'world = "mcp"', r"\[python\] is only read when world = 'python'"),
    ('world = "python"', 'world = "sandbox"', "'world' must be one of 'workbench', 'none', 'arguments', 'python'"),
])
def test_world_tables_are_checked_when_the_pack_loads(tracker_pack, old, new, words):
    edit(tracker_pack, old, new)
    with pytest.raises(PackError, match=words):
        load_pack(tracker_pack)


def test_a_python_world_needs_its_table(tracker_pack):
    manifest = tracker_pack / "pack.toml"
    text = manifest.read_text()
    manifest.write_text(text[:text.index("# `world = \"python\"`")])
    with pytest.raises(PackError, match=r"world = 'python' needs a \[python\] table"):
        load_pack(tracker_pack)


def test_the_data_hash_covers_the_functions_module(tracker_pack):
    before = load_pack(tracker_pack).data_hash()
    module = tracker_pack / "tracker_functions.py"
    module.write_text(module.read_text() + "\n# changed\n")
    assert load_pack(tracker_pack).data_hash() != before


def test_a_verifier_for_a_packs_own_world_comes_from_its_pack():
    with pytest.raises(ApplianceError, match="build the verifier with Verifier.for_pack"):
        Verifier([], world="python")


def test_the_function_worker_starts_without_the_heavy_imports():
    code = ("import sys, appliance.userworld.worker, appliance.userworld.schema; "
            "print(sorted(m for m in ('mcp', 'jsonschema', 'torch', 'appliance.packs') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
