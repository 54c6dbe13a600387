"""world = "mcp": packs built from a real MCP server over stdio (tests/fixtures/mcp_tracker_server.py).

Without a reset tool, state-changing tools are compared on their arguments and
never executed; with `--reset-tool reset --state-tool dump_state` they run on a
fresh state and the state decides. A tool error, a hang and a server that dies
are execution_errors, and the server is restarted for the next verdict.
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from appliance.errors import PackError
from appliance.packs import check_pack, load_pack
from appliance.task import ToolCall
from appliance.userworld.writer import new_pack
from appliance.verify import Verifier

SERVER = Path(__file__).parent / "fixtures" / "mcp_tracker_server.py"
COMMAND = shlex.join([sys.executable, str(SERVER)])
CREATE = ToolCall("create_issue", {"title": "Checkout is broken", "priority": "high"})
SEEDS = [
    {"id": "search", "request": "List every issue", "expected": [{"name": "search_issues", "arguments": {"text": ""}}]},
    {"id": "create", "request": "File a high priority bug: checkout is broken", "expected": [CREATE.to_json()]},
    {"id": "create-multi", "request": "File a high priority bug: checkout is broken, unless it exists",
     "kind": "multi_step", "expected": [CREATE.to_json()]},
    {"id": "deploy", "request": "Ship 2.0 to staging",
     "expected": [{"name": "deploy", "arguments": {"env": "staging", "version": "2.0"}}]},
]


def output(*calls: ToolCall) -> str:
    return json.dumps([c.to_json() for c in calls] if len(calls) != 1 else calls[0].to_json())


def build(root: Path, name: str, **options) -> Path:
    seeds = root / f"{name}-seeds.jsonl"
    seeds.write_text("".join(json.dumps(s) + "\n" for s in SEEDS))
    path = new_pack(name, mcp=COMMAND, root=root, seeds=seeds, **options).path
    manifest = path / "pack.toml"  # generous limits: this machine may be busy; the hang test needs a short one
    manifest.write_text(manifest.read_text().replace("# timeout_s = 10.0", "timeout_s = 3.0")
                        .replace("# startup_s = 30.0", "startup_s = 120.0"))
    return path


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    pack = load_pack(build(tmp_path_factory.mktemp("mcp"), "issues"))
    verifier = Verifier.for_pack(pack)
    yield pack, verifier
    verifier.close()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    pack = load_pack(build(tmp_path_factory.mktemp("mcp"), "issues-run", reset_tool="reset",
                           state_tool="dump_state"))
    verifier = Verifier.for_pack(pack)
    yield pack, verifier
    verifier.close()


def judge(fixture, task_id: str, *calls: ToolCall):
    pack, verifier = fixture
    return verifier.verify(pack.task(task_id), output(*calls))


def test_tools_list_becomes_the_packs_tools_with_read_only_from_the_annotations(compared):
    pack, _ = compared
    assert pack.world == "mcp" and check_pack(pack) == []
    names = set(pack.tool_names)
    assert {"create_issue", "assign_issue", "search_issues", "get_issue", "deploy"} <= names
    table = pack.manifest["mcp"]
    assert {"search_issues", "get_issue", "dump_state"} <= set(table["read_only"])
    assert {"create_issue", "assign_issue", "deploy", "reset"} <= set(table["dont_execute"])
    issue_id = next(t for t in pack.tools if t["function"]["name"] == "get_issue")["function"]["parameters"]
    assert issue_id["properties"]["issue_id"] == {"type": "integer"} and "title" not in issue_id


def test_read_only_tools_run_on_the_server_and_their_results_decide(compared):
    assert judge(compared, "search", ToolCall("search_issues", {"text": ""})).bucket == "success"
    assert judge(compared, "search", ToolCall("search_issues", {})).bucket == "success"  # the default is ""
    narrower = judge(compared, "search", ToolCall("search_issues", {"text": "login"}))
    assert narrower.bucket == "wrong_arguments" and not narrower.state_match


def test_dont_execute_tools_are_compared_on_arguments_and_never_run(compared):
    assert judge(compared, "create", ToolCall("create_issue", {"title": "Checkout is broken",
                                                               "priority": "HIGH"})).bucket == "success"
    assert judge(compared, "create", ToolCall("create_issue", {"title": "Checkout"})).bucket == "wrong_arguments"
    assert judge(compared, "deploy", ToolCall("deploy", {"env": "staging", "version": "2.0"})).bucket == "success"
    # had create_issue run, the server would now hold a third issue whose title has an "e" too
    search_e = judge(compared, "search", ToolCall("search_issues", {"text": "e"}))
    assert search_e.bucket == "success"


def test_the_reset_and_state_tools_are_hidden_and_the_state_decides(executed):
    pack, _ = executed
    assert "reset" not in pack.tool_names and "dump_state" not in pack.tool_names
    assert pack.manifest["mcp"]["reset_tool"] == "reset" and "dont_execute" not in pack.manifest["mcp"]
    assert judge(executed, "create", CREATE).bucket == "success"
    again = judge(executed, "create", ToolCall("create_issue", {"title": "Checkout is broken", "priority": "HIGH"}))
    assert again.bucket == "success"  # the reset tool runs first: the issue gets the same number each time
    assert judge(executed, "create", ToolCall("create_issue", {"title": "Checkout"})).bucket == "wrong_arguments"
    extra = judge(executed, "create-multi", CREATE, ToolCall("assign_issue", {"issue_id": 1, "assignee": "x@y.z"}))
    assert extra.bucket == "wrong_tool" and "assign_issue" in extra.reason


@pytest.mark.parametrize("tool, reason", [
    ("fail", "fail returned an error: Error executing tool fail"),
    ("slow", "slow did not answer within 3 s (hung?); the MCP server was restarted"),
    ("crash", "the MCP server died during crash (Connection closed); it was restarted"),
])
def test_a_failing_tool_a_hang_and_a_dead_server_are_execution_errors_then_the_server_restarts(executed, tool,
                                                                                                reason):
    verdict = judge(executed, "create-multi", ToolCall(tool, {"value": 1}), CREATE)
    assert verdict.bucket == "execution_error" and verdict.reason == reason
    assert judge(executed, "create-multi", ToolCall("get_issue", {"issue_id": 1}), CREATE).bucket == "success"


def test_a_server_that_cannot_start_is_an_execution_error_naming_the_command(tmp_path, compared):
    pack, _ = compared
    manifest = pack.path / "pack.toml"
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in pack.path.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    text = (broken / "pack.toml").read_text()
    (broken / "pack.toml").write_text(text.replace(shlex.split(text.split("command = ")[1].splitlines()[0])[0],
                                                   "/nonexistent/server"))
    pack_broken = load_pack(broken)
    verifier = Verifier.for_pack(pack_broken)
    try:
        verdict = verifier.verify(pack_broken.task("search"), output(ToolCall("search_issues", {"text": ""})))
    finally:
        verifier.close()
    assert manifest.is_file() and verdict.bucket == "execution_error"
    assert "did not start" in verdict.reason and "/nonexistent/server" in verdict.reason


def test_an_unknown_reset_tool_is_a_pack_error(tmp_path):
    with pytest.raises(PackError, match="--reset-tool restart: the server has no such tool"):
        new_pack("x", mcp=COMMAND, root=tmp_path, reset_tool="restart")
