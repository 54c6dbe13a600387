"""`appliance trajectories import`: the JSONL format, all-or-nothing imports, the store's new tables and views."""
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
from appliance.store import SCHEMA_VERSION, TABLES, VIEWS, Workspace, migrations

TASKS = Path(__file__).resolve().parents[1] / "tasks"
SAMPLE = TASKS / "trajectories" / "workplace-multi-sample.jsonl"
GRPO = "grpo-20251120-101500-3fa2c1/step-00030"

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
