"""`appliance trajectories import|triage`: the JSONL format, all-or-nothing imports, failure modes, the views."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from appliance import cli
from appliance.errors import ApplianceError
from appliance.flywheel.cli import add_serve, add_trajectories
from appliance.flywheel.trajectories import import_trajectories
from appliance.flywheel.triage import FAILURE_MODES, Judge, triage
from appliance.store import SCHEMA_VERSION, TABLES, VIEWS, Workspace, migrations

TASKS = Path(__file__).resolve().parents[1] / "tasks"
SAMPLE = TASKS / "trajectories" / "workplace-multi-sample.jsonl"
GRPO = "grpo-20251120-101500-3fa2c1/step-00030"

# What triage finds in each line of the shipped sample: (primary mode, every mode).
SAMPLE_MODES = {
    "ext-0001": ("success", []),
    "ext-0002": ("hallucinated_api", ["hallucinated_api", "incomplete_execution", "wrong_tool"]),
    "ext-0003": ("hallucinated_api", ["hallucinated_api", "wrong_arguments"]),
    "ext-0004": ("incomplete_execution", ["incomplete_execution", "wrong_tool"]),
    "ext-0005": ("human_intervention", ["human_intervention"]),
    "ext-0006": ("bad_planning", ["bad_planning", "wrong_arguments"]),
    "ext-0007": ("bad_planning", ["bad_planning", "incomplete_execution", "wrong_tool"]),
    "ext-0008": ("unverified", []),
    "ext-0009": ("incomplete_execution", ["incomplete_execution"]),
    "ext-0010": ("unsafe_action", ["unsafe_action"]),
}


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace.open(tmp_path / "runs")
    yield workspace
    workspace.close()


def _parser() -> argparse.ArgumentParser:
    parser = cli._Parser(prog="appliance")
    sub = parser.add_subparsers(dest="command")
    add_serve(sub)
    add_trajectories(sub)
    return parser


def _main(argv, monkeypatch) -> int:
    """appliance.cli.main with the flywheel's parsers and handlers wired in, as the final wiring does."""
    from appliance.flywheel import cli as flywheel_cli

    monkeypatch.setattr(cli, "build_parser", _parser)
    monkeypatch.setattr(cli, "_handler", lambda command: getattr(flywheel_cli, f"cmd_{command}"))
    return cli.main(argv)


def _line(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                       **fields})


# ---------------------------------------------------------------- import

def test_sample_imports_once_with_every_field_in_its_column(ws):
    summary = import_trajectories(SAMPLE, ws)
    assert (summary.imported, summary.skipped) == (10, 0) and summary.import_id.startswith("import-")
    again = import_trajectories(SAMPLE, ws)
    assert (again.imported, again.skipped) == (0, 10)  # ids already stored: an import is idempotent
    _, rows = ws.query("SELECT id, source, source_id, file, line, pack, adapter_version, outcome, "
                       "human_intervention, intervention->>'$.turn', feedback->>'$.rating', metadata->>'$.note', "
                       "conversation_id FROM trajectories ORDER BY id")
    assert len(rows) == 10 and {r[2] for r in rows} == {summary.import_id}
    first, fifth, ninth = rows[0], rows[4], rows[8]
    assert first[:8] == ("ext-0001", "imported", summary.import_id, str(SAMPLE), 1, "workplace-multi", "base",
                         "success")
    assert first[10] == "5" and first[12] == "ext-0001"  # no conversation_id: its own id
    assert fifth[6:10] == (GRPO, "success", True, "3")
    assert ninth[11] == "the log was cut before the result"


def test_a_malformed_line_names_file_and_line_and_nothing_is_imported(ws, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([
        _line(id="a"),
        _line(outcome="great"),
        '{"messages": [{"role": "robot", "content": "beep"}]}',
        "not json",
        _line(id="e", messages=[{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]),
    ]) + "\n")
    with pytest.raises(ApplianceError) as caught:
        import_trajectories(bad, ws)
    message = str(caught.value)
    assert message.startswith(f"{bad} has 4 malformed lines (2, 3, 4, 5), the first: line 2: `outcome` is 'great'")
    assert message.endswith("nothing was imported; fix them and run the import again.")
    assert ws.query("SELECT count(*) FROM trajectories")[1] == [(0,)]

    bad.write_text(_line() + "\n" + '{"messages": [{"role": "robot", "content": "beep"}]}\n')
    with pytest.raises(ApplianceError, match=r"bad.jsonl line 2: messages\[0\] has role 'robot' "
                                             r"\(expected system, developer, user, assistant or tool\); "
                                             r"nothing was imported; fix the line"):
        import_trajectories(bad, ws)


def test_the_command_exits_2_with_one_sentence_on_a_malformed_file(ws, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    code = _main(["trajectories", "import", str(bad), "--workspace", str(ws.root)], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {bad} line 1: messages must be a non-empty list")

    code = _main(["trajectories", "import", str(SAMPLE), "--workspace", str(ws.root), "--format", "json"],
                 monkeypatch)
    assert code == 0 and json.loads(capsys.readouterr().out)["imported"] == 10


def test_a_served_style_line_keeps_usage_latency_and_unknown_fields(ws, tmp_path):
    served = tmp_path / "served.jsonl"
    served.write_text(_line(id="chatcmpl-1", conversation_id="conv-1", usage={"prompt_tokens": 30,
                      "completion_tokens": 4}, latency_s=0.25, created_at="2025-01-02T03:04:05Z",
                      finish_reason="stop", client="acme-agent") + "\n")
    import_trajectories(served, ws, pack="workplace-single", model="acme", adapter_version="base")
    _, rows = ws.query("SELECT conversation_id, prompt_tokens, completion_tokens, latency_s, finish_reason, "
                       "metadata->>'$.client', pack, model, adapter_version, year(created_at) FROM trajectories")
    assert rows == [("conv-1", 30, 4, 0.25, "stop", "acme-agent", "workplace-single", "acme", "base", 2025)]


# ---------------------------------------------------------------- triage

def test_triage_buckets_the_sample_with_every_failure_mode(ws):
    import_trajectories(SAMPLE, ws)
    summary = triage(ws, tasks_root=TASKS)
    assert summary.judged == 10 and not summary.notes
    _, rows = ws.query("SELECT trajectory_id, primary_mode, failure_modes, task_id, replayed, reasons "
                       "FROM trajectory_triage ORDER BY trajectory_id")
    found = {r[0]: (r[1], sorted(r[2])) for r in rows}
    assert found == {k: (primary, sorted(modes)) for k, (primary, modes) in SAMPLE_MODES.items()}
    by_id = {r[0]: r for r in rows}
    assert by_id["ext-0008"][3] is None and by_id["ext-0001"][3] == "wm-val-0001"  # matched by request text
    assert all(r[4] for r in rows)  # the workplace world replayed every one
    reasons = json.loads(by_id["ext-0003"][5])
    assert reasons["hallucinated_api"] == "called email_forward_email with 'note', an argument it does not take"
    assert "guessed" in json.loads(by_id["ext-0006"][5])["bad_planning"]

    # Judged already: nothing new; --all judges again, and the views read the latest judgement only.
    assert triage(ws, tasks_root=TASKS).judged == 0
    assert triage(ws, tasks_root=TASKS, everything=True).judged == 10
    _, rows = ws.query("SELECT adapter_version, failure_mode, trajectories, judged, share "
                       "FROM failure_modes_by_adapter WHERE failure_mode IN ('hallucinated_api', 'success', "
                       "'unverified', 'unsafe_action')")
    assert sorted(rows) == [("base", "hallucinated_api", 2, 5, 0.4), ("base", "success", 1, 5, 0.2),
                            (GRPO, "unsafe_action", 1, 4, 0.25), ("unknown", "unverified", 1, 1, 1.0)]
    _, [(primaries,)] = ws.query("SELECT count(*) FROM trajectory_failures WHERE is_primary")
    assert primaries == 10


def test_triage_without_a_pack_still_finds_hallucinations_endings_and_people(ws, tmp_path):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}]
    lines = tmp_path / "plain.jsonl"
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x", "k": 2}'}}
    lines.write_text("\n".join([
        _line(id="p1", tools=tools, messages=[{"role": "user", "content": "find x"},
                                              {"role": "assistant", "content": None, "tool_calls": [call]},
                                              {"role": "tool", "tool_call_id": "c1", "content": "Error: bad k"}]),
        _line(id="p2", human_intervention="the operator answered instead", outcome="failure"),
        _line(id="p3", outcome="failure"),
        _line(id="p4", messages=[{"role": "user", "content": "go"},
                                 {"role": "assistant", "content": '{"name": "lookup", "arguments": '}]),
    ]) + "\n")
    import_trajectories(lines, ws)
    triage(ws, tasks_root=TASKS)
    _, rows = ws.query("SELECT trajectory_id, failure_modes, primary_mode FROM trajectory_triage ORDER BY 1")
    assert rows == [("p1", ["hallucinated_api", "incomplete_execution", "execution_error"], "hallucinated_api"),
                    ("p2", ["human_intervention"], "human_intervention"),
                    ("p3", ["reported_failure"], "reported_failure"),
                    ("p4", ["format_error"], "format_error")]


def test_an_unknown_pack_is_a_note_not_a_failure(ws, tmp_path):
    lines = tmp_path / "other.jsonl"
    lines.write_text(_line(id="o1", pack="no-such-pack") + "\n")
    imported = import_trajectories(lines, ws)
    assert triage(ws, tasks_root=TASKS, source_id="import-of-something-else").judged == 0
    summary = triage(ws, tasks_root=TASKS, source_id=imported.import_id)
    assert summary.modes == {"unverified": 1}
    assert len(summary.notes) == 1 and "no-such-pack" in summary.notes[0]


def test_failure_modes_are_ordered_and_cover_the_verifier_buckets():
    from appliance.task import BUCKETS

    assert set(BUCKETS) - {"success"} <= set(FAILURE_MODES)
    assert FAILURE_MODES[0] == "hallucinated_api" and len(set(FAILURE_MODES)) == len(FAILURE_MODES)
    assert Judge().judge({"id": "x", "messages": json.dumps([{"role": "user", "content": "hi"}])}).reasons == {
        "incomplete_execution": "ended on a user message, without an answer"}


def test_the_triage_command_prints_failure_modes_per_adapter_version(ws, monkeypatch, capsys):
    import_trajectories(SAMPLE, ws)
    code = _main(["trajectories", "triage", "--workspace", str(ws.root), "--tasks-root", str(TASKS),
                  "--format", "json"], monkeypatch)
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert code == 0 and "judged 10 trajectories" in captured.err
    assert {r["adapter_version"] for r in rows} == {"base", GRPO, "unknown"}
    assert set(rows[0]) == set(VIEWS["failure_modes_by_adapter"].column_names)


# ---------------------------------------------------------------- store

def test_views_have_their_documented_columns_and_comments(ws):
    for name, view in VIEWS.items():
        columns, rows = ws.query(f"SELECT * FROM {name}")
        assert columns == list(view.column_names) and rows == []
    with duckdb.connect(str(ws.db_path), read_only=True) as con:
        comments = dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall())
    assert comments["failure_modes_by_adapter"] == VIEWS["failure_modes_by_adapter"].doc
    assert comments["trajectories"] == TABLES["trajectories"].doc


def test_a_v2_workspace_is_upgraded_with_the_flywheel_tables(ws):
    ws.append("runs", [{"run_id": "r1", "status": "finished"}])
    for table in ("trajectories", "trajectory_triage"):
        shutil.rmtree(ws.data_dir / table)
    with duckdb.connect(str(ws.db_path)) as con:
        con.execute("UPDATE schema_version SET version = 2")
    upgraded = Workspace.open(ws.root)
    assert migrations.read_recorded_version(upgraded.db_path) == (SCHEMA_VERSION, str(ws.root))
    assert upgraded.query("SELECT count(*) FROM trajectories")[1] == [(0,)]
    assert upgraded.query("SELECT count(*) FROM failure_modes_by_adapter")[1] == [(0,)]
    assert upgraded.query("SELECT run_id FROM runs")[1] == [("r1",)]


def test_serve_flags_come_from_the_config_fields():
    from dataclasses import fields

    from appliance.flywheel.serve import ServeConfig

    args = _parser().parse_args(["serve", "--port", "0", "--no-pack-system-prompt", "--adapter", "run/step-00001"])
    assert (args.port, args.pack_system_prompt, args.adapter, args.max_new_tokens) == (0, False, "run/step-00001", 256)
    assert {f.name for f in fields(ServeConfig)} <= set(vars(args))
    help_text = _parser()._subparsers._group_actions[0].choices["serve"].format_help()
    assert "promoted adapter" in help_text and "(default: 8000)" in help_text
