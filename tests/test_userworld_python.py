"""world = "python": a pack's own functions, run in a real child process, scored like the WorkBench world.

Each misbehaviour (a raise, a hang, a print, an unserialisable result, a dead
process, a memory hog, a network call) is an execution_error with its reason,
and the next verdict runs on a fresh process.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.packs import check_pack, load_pack
from appliance.rewards import make_reward_funcs
from appliance.task import ToolCall
from appliance.userworld.writer import new_pack
from appliance.verify import Verifier

FIXTURES = Path(__file__).parent / "fixtures"
DANA = "dana@example.com"


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name, arguments)


def output(*calls: ToolCall) -> str:
    return json.dumps([c.to_json() for c in calls] if len(calls) != 1 else calls[0].to_json())


def write_seeds(path: Path, seeds: list[dict]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in seeds))
    return path


TRACKER_SEEDS = [
    {"id": "assign", "request": "Assign issue 1 to Dana", "expected": [call("assign_issue", issue_id=1,
                                                                          assignee=DANA).to_json()]},
    {"id": "search", "request": "Find the login issue", "expected": [call("search_issues", text="login").to_json()]},
    {"id": "create", "request": "File a high priority bug: checkout is broken",
     "expected": [call("create_issue", title="Checkout is broken", priority="high").to_json()]},
    {"id": "multi", "request": "Find the login issue and give it to Dana", "kind": "multi_step",
     "expected": [call("assign_issue", issue_id=1, assignee=DANA).to_json()]},
    {"id": "chat", "request": "Hi, how are you?", "kind": "multi_step", "expected": []},
    {"id": "broken", "request": "Show issue 99", "expected": [call("get_issue", issue_id=99).to_json()]},
    {"id": "fixture", "messages": [{"role": "user", "content": "Close issue 3"}], "kind": "single_step",
     "expected": [call("transition_issue", issue_id=3, status="done").to_json()],
     "tags": {"domain": "tracker", "source": "human", "template": "close"},
     "fixture": {"setup_calls": [call("create_issue", title="Dark mode").to_json()]}},
]


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    root = tmp_path_factory.mktemp("packs")
    seeds = write_seeds(root / "seeds.jsonl", TRACKER_SEEDS)
    made = new_pack("tracker", functions=FIXTURES / "tracker_functions.py", root=root, seeds=seeds)
    pack = load_pack(made.path)
    verifier = Verifier.for_pack(pack)
    yield pack, verifier
    verifier.close()


def judge(tracker, task_id: str, *calls: ToolCall):
    pack, verifier = tracker
    return verifier.verify(pack.task(task_id), output(*calls))


def test_the_pack_loads_checks_clean_and_copies_the_module(tracker):
    pack, _ = tracker
    assert pack.world == "python" and (pack.path / "tracker_functions.py").is_file()
    assert pack.manifest["python"]["state"] == "make_state"
    assert pack.manifest["python"]["read_only"] == ["search_issues", "get_issue"]
    issues = check_pack(pack)  # replays every expected call list: the seed asking for issue 99 cannot
    assert len(issues) == 1 and "('broken')" in issues[0] and "no issue 99" in issues[0]


def test_the_right_call_succeeds_on_the_state_and_arguments_normalise(tracker):
    verdict = judge(tracker, "assign", call("assign_issue", issue_id=1, assignee=DANA))
    assert verdict.bucket == "success" and verdict.executed_ok and verdict.state_match
    assert judge(tracker, "assign", call("assign_issue", issue_id="1", assignee=DANA)).bucket == "success"
    assert judge(tracker, "create", call("create_issue", title="Checkout is broken", priority="HIGH")).success


def test_text_compares_exactly_for_a_packs_own_tools(tracker):
    verdict = judge(tracker, "assign", call("assign_issue", issue_id=1, assignee=DANA.upper()))
    assert verdict.bucket == "wrong_arguments" and "assignee" in verdict.reason and not verdict.state_match


def test_wrong_arguments_and_wrong_tools_are_named(tracker):
    verdict = judge(tracker, "assign", call("assign_issue", issue_id=2, assignee=DANA))
    assert verdict.bucket == "wrong_arguments" and verdict.reason == "assign_issue: issue_id=2, expected 1"
    assert judge(tracker, "create", call("create_issue", title="Checkout is broken")).bucket == "wrong_arguments"
    assert judge(tracker, "assign", call("get_issue", issue_id=1)).bucket == "wrong_tool"
    assert judge(tracker, "assign").bucket == "missed_call"  # "[]": no calls
    assert judge(tracker, "assign", call("assign_issue", issue_id=1)).bucket == "wrong_arguments"  # schema


def test_read_only_tasks_compare_results_not_arguments(tracker):
    same_result = judge(tracker, "search", call("search_issues", text="LOGIN"))
    assert same_result.bucket == "success" and not same_result.arguments_ok and same_result.state_match
    other_result = judge(tracker, "search", call("search_issues", text="typo"))
    assert other_result.bucket == "wrong_arguments" and not other_result.state_match


def test_multi_step_state_decides_and_an_extra_change_is_a_wrong_tool(tracker):
    lookup = call("search_issues", text="login")
    assert judge(tracker, "multi", lookup, call("assign_issue", issue_id=1, assignee=DANA)).bucket == "success"
    route = judge(tracker, "multi", call("assign_issue", issue_id=1, assignee="bob@example.com"),
                  call("assign_issue", issue_id=1, assignee=DANA))
    assert route.bucket == "success"  # another route to the same state is right, as in WorkBench
    extra = judge(tracker, "multi", call("assign_issue", issue_id=1, assignee=DANA), call("delete_issue", issue_id=2))
    assert extra.bucket == "wrong_tool" and extra.reason == "extra state-changing call delete_issue"


def test_no_call_tasks_allow_look_ups_but_not_changes(tracker):
    pack, verifier = tracker
    assert verifier.verify(pack.task("chat"), "I'm well, thanks!").bucket == "success"
    assert judge(tracker, "chat", call("search_issues", text="x")).bucket == "success"
    assert judge(tracker, "chat", call("create_issue", title="x")).bucket == "called_when_none_expected"


def test_a_fixture_sets_up_the_state_first(tracker):
    assert judge(tracker, "fixture", call("transition_issue", issue_id=3, status="done")).bucket == "success"
    assert judge(tracker, "fixture", call("transition_issue", issue_id=3, status="open")).bucket == "wrong_arguments"


def test_expected_calls_that_fail_say_the_pack_needs_fixing(tracker):
    verdict = judge(tracker, "broken", call("get_issue", issue_id=99))
    assert verdict.bucket == "execution_error"
    assert verdict.reason.startswith("the task's expected calls fail, so the pack needs fixing: get_issue raised")


# --- misbehaving functions --------------------------------------------------------------------------

RECORD = call("record", value=5)


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    root = tmp_path_factory.mktemp("faulty")
    seeds = write_seeds(root / "seeds.jsonl", [
        {"id": "record", "request": "Record 5", "kind": "multi_step", "expected": [RECORD.to_json()]}])
    made = new_pack("faulty", functions=FIXTURES / "faulty_functions.py", root=root, seeds=seeds)
    manifest = made.path / "pack.toml"
    text = manifest.read_text().replace("# timeout_s = 5.0", "timeout_s = 1.0").replace("# memory_mb = 1024",
                                                                                       "memory_mb = 512")
    manifest.write_text(text)
    pack = load_pack(made.path)
    verifier = Verifier.for_pack(pack)
    yield pack, verifier
    verifier.close()


@pytest.mark.parametrize("tool, reason", [
    ("raises", "raises raised ValueError: bad value 1"),
    ("prints", "prints printed to stdout ('the value is 1'); a tool must return its result, not print it"),
    ("unserialisable", "unserialisable returned a set, which is not JSON (set is not a JSON type)"),
    ("hangs", "hangs did not return within 1 s (hung?); the functions' process was restarted"),
    ("dies", "the functions' process died (exit code 3) during dies; it was restarted"),
    ("hogs_memory", "hogs_memory ran out of memory (over the sandbox's limit)"),
    ("calls_out", "calls_out raised PermissionError: network access is disabled for a pack's functions"),
])
def test_each_misbehaviour_is_an_execution_error_and_the_next_verdict_runs_afresh(faulty, tool, reason):
    pack, verifier = faulty
    task = pack.task("record")
    verdict = verifier.verify(task, output(call(tool, value=1), RECORD))
    assert verdict.bucket == "execution_error" and verdict.reason == reason
    assert verdict.tool_ok and verdict.arguments_ok and not verdict.executed_ok and not verdict.state_match
    assert verifier.verify(task, output(call("ok", value=1), RECORD)).bucket == "success"


def test_a_training_reward_batch_survives_every_misbehaviour(faulty):
    pack, verifier = faulty
    rewards = make_reward_funcs(verifier, "binary", {"record": pack.task("record")})
    completions = [output(call(tool, value=2), RECORD) for tool in ("ok", "hangs", "dies", "prints", "raises")]
    scores = rewards[0](prompts=[""] * len(completions), completions=completions, task_id=["record"] * 5)
    assert len(scores) == 5 and all(isinstance(s, float) for s in scores)
    assert scores[0] > max(scores[1:])


def test_a_module_that_no_longer_imports_is_an_execution_error_not_a_crash(tmp_path):
    seeds = write_seeds(tmp_path / "seeds.jsonl", [
        {"id": "r", "request": "Record 5", "expected": [RECORD.to_json()]}])
    made = new_pack("gone", functions=FIXTURES / "faulty_functions.py", root=tmp_path, seeds=seeds)
    (made.path / "faulty_functions.py").write_text("raise RuntimeError('broken on purpose')\n")
    pack = load_pack(made.path)
    verifier = Verifier.for_pack(pack)
    try:
        verdict = verifier.verify(pack.task("r"), output(RECORD))
    finally:
        verifier.close()
    assert verdict.bucket == "execution_error"
    assert "faulty_functions.py failed to import: RuntimeError: broken on purpose" in verdict.reason


# --- agent episodes ---------------------------------------------------------------------------------


def test_the_agent_loop_plays_a_multi_step_task_on_the_packs_own_world(tracker):
    from types import SimpleNamespace

    from appliance.evaluate.agent import Trajectory, run_trajectories

    pack, verifier = tracker
    task = pack.task("multi")
    turns = iter([output(call("search_issues", text="login")),
                  output(call("assign_issue", issue_id=1, assignee=DANA)), "Done: issue 1 is Dana's."])
    trajectory = Trajectory(task=task, sample_index=0, messages=list(task.messages), world=verifier.episode(task))
    run_trajectories([trajectory], max_turns=4, generate_turn=lambda active: [
        SimpleNamespace(text=next(turns), latency_s=0.0, prompt_tokens=0, completion_tokens=0) for _ in active])
    looked_up, assigned = trajectory.turns[0]["observations"][0], trajectory.turns[1]["observations"][0]
    assert json.loads(looked_up)[0]["title"] == "Login page times out"
    assert json.loads(assigned)["assignee"] == DANA and not trajectory.raised
    verdict = verifier.verify_calls(task, trajectory.calls, raised=trajectory.raised)
    assert verdict.bucket == "success"


def test_an_agent_episode_reports_a_raising_call_as_raised(tracker):
    pack, verifier = tracker
    episode = verifier.episode(pack.task("multi"))
    created = episode.call(call("create_issue", title="New"))
    assert created.ok and created.changed and json.loads(created.observation)["id"] == 3
    missing = episode.call(call("get_issue", issue_id=42))
    assert missing.raised and missing.observation == "Error: get_issue raised KeyError: 'no issue 42'"
    assert json.loads(episode.call(call("get_issue", issue_id=3)).observation)["title"] == "New"
