"""The engine client: a real child process streaming events, and the fake that replays them.

The subprocess test runs `python -m appliance` in a folder holding a stand-in
`appliance` package, so it exercises the real pipes, parsing, exit codes and
the SIGINT stop without loading a model.
"""
from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

from appliance.events import Log, Progress, RunFinished, RunStarted, StepMetrics
from tui.engine import EngineEvent, FakeEngineClient, SubprocessEngineClient, line_to_event

STAND_IN = textwrap.dedent("""
    import json, signal, sys, time
    args = sys.argv[1:]
    if args[:1] == ["doctor"]:
        print(json.dumps({"gpu": "none visible (CPU path)", "generation_backend": "hf (no GPU)"}))
        sys.exit(0)
    def stopped(*_):
        print('@event ' + json.dumps({"type": "run_finished", "run_id": "r1", "summary": {"stopped": True}}))
        sys.stdout.flush()
        sys.exit(130)
    signal.signal(signal.SIGINT, stopped)
    print('@event ' + json.dumps({"type": "run_started", "run_id": "r1", "kind": args[0]}))
    print("a stray library line")
    print("a log line on stderr", file=sys.stderr)
    print('@event ' + json.dumps({"type": "step_metrics", "run_id": "r1", "step": 1, "metrics": {"kl": 0.1}}))
    sys.stdout.flush()
    if "--hang" in args:
        time.sleep(30)
    sys.exit(int(args[-1]) if args[-1].isdigit() else 0)
""")


def stand_in_engine(tmp_path: Path) -> SubprocessEngineClient:
    package = tmp_path / "appliance"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(STAND_IN)
    return SubprocessEngineClient(python=sys.executable, cwd=str(tmp_path), grace_s=5)


async def collect(engine, args):
    return [event async for event in engine.stream(args)]


def test_line_to_event_parses_events_and_passes_other_lines_as_logs():
    event = line_to_event(Progress(run_id="e", stage="eval", done=2, total=4).to_line())
    assert isinstance(event, Progress) and (event.done, event.total) == (2, 4)
    log = line_to_event("Loading weights 100%\n")
    assert isinstance(log, Log) and log.message == "Loading weights 100%"
    assert isinstance(line_to_event("@event {not json"), Log)


def test_subprocess_client_streams_events_logs_and_exit_code(tmp_path):
    engine = stand_in_engine(tmp_path)
    events = asyncio.run(collect(engine, ["eval", "--events", "3"]))
    assert [type(e) for e in events] == [RunStarted, Log, StepMetrics]
    assert events[0].kind == "eval" and events[1].message == "a stray library line"
    assert engine.exit_code == 3
    assert engine.stderr_tail == ["a log line on stderr"]


def test_subprocess_client_stop_sends_sigint_and_the_child_finishes_cleanly(tmp_path):
    engine = stand_in_engine(tmp_path)

    async def run_and_stop():
        events = []
        async for event in engine.stream(["train", "--hang"]):
            events.append(event)
            if isinstance(event, StepMetrics):
                await engine.stop()
        return events

    events = asyncio.run(asyncio.wait_for(run_and_stop(), timeout=20))
    assert isinstance(events[-1], RunFinished) and events[-1].summary == {"stopped": True}
    assert engine.exit_code == 130


def test_subprocess_client_reads_doctor_json(tmp_path):
    report = asyncio.run(stand_in_engine(tmp_path).doctor())
    assert report["gpu"] == "none visible (CPU path)"


def test_subprocess_client_reports_a_missing_engine_without_raising(tmp_path):
    engine = SubprocessEngineClient(python=str(tmp_path / "no-python"))
    assert asyncio.run(collect(engine, ["eval"])) == []
    assert engine.exit_code == 127 and "could not start" in engine.stderr_tail[0]


def test_fake_client_replays_per_subcommand_and_records_calls():
    engine = FakeEngineClient(scripts={"eval": [RunStarted(run_id="x"), (0.01, RunFinished(run_id="x"))]},
                              exit_codes={"eval": 2})
    events = asyncio.run(collect(engine, ["eval", "--events"]))
    assert [type(e) for e in events] == [RunStarted, RunFinished]
    assert engine.calls == [["eval", "--events"]] and engine.exit_code == 2


def test_progress_messages_replace_each_other_but_not_other_events():
    first = EngineEvent("eval", Progress(stage="eval", done=1, total=4))
    latest = EngineEvent("eval", Progress(stage="eval", done=2, total=4))
    assert latest.can_replace(first)
    assert not EngineEvent("eval", StepMetrics(step=1)).can_replace(first)
    assert not EngineEvent("train", Progress(stage="eval", done=2)).can_replace(first)
