"""The flywheel's commands: `appliance serve`, `appliance trajectories import|triage`, `appliance tasks from-failures`.

`add_serve(sub)`, `add_trajectories(sub)` and `add_tasks_from_failures(tasks_sub)` (under `tasks`) add the parsers (serve's flags are
ServeConfig's fields, help and defaults included); `cmd_serve(args)` and
`cmd_trajectories(args)` handle them, like the handlers in appliance.commands. After a triage the
lightest fix for each pack's newest adapter version is printed (appliance.flywheel.trends, what the
cockpit's Flywheel screen shows too).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import MISSING, fields
from typing import Any

from appliance.errors import ApplianceError


def add_serve(sub: argparse._SubParsersAction) -> None:
    from appliance.cli import _common
    from appliance.flywheel.serve import ServeConfig

    p = sub.add_parser("serve", help="an OpenAI-compatible chat endpoint for the promoted adapter; every "
                                     "request is stored as a trajectory")
    for spec in fields(ServeConfig):
        flag = "--" + spec.name.replace("_", "-")
        default = spec.default if spec.default is not MISSING else None
        shown = "" if default is None or isinstance(default, bool) else f" (default: {default})"
        if default is False:
            p.add_argument(flag, dest=spec.name, action="store_true", help=spec.metadata["help"])
        elif default is True:
            p.add_argument(flag, dest=spec.name, action=argparse.BooleanOptionalAction, default=True,
                           help=spec.metadata["help"])
        else:
            kind = type(default) if default is not None else str
            p.add_argument(flag, dest=spec.name, type=kind, default=default, help=spec.metadata["help"] + shown,
                           metavar=spec.name.upper())
    _common(p)


def add_trajectories(sub: argparse._SubParsersAction) -> None:
    from appliance.cli import _common, _format, text_file

    group = sub.add_parser("trajectories", help="import agent trajectories (OpenAI chat JSONL) and triage their "
                                                "failure modes")
    tsub = group.add_subparsers(dest="traj_cmd", required=True, metavar="{import,triage}")
    p = tsub.add_parser("import", help="store a JSONL file of OpenAI chat trajectories (all lines or none)")
    p.add_argument("file", type=text_file,
                   help="one trajectory per line: {messages, tools?, outcome?, feedback?, human_intervention?, ...} "
                        "(format: appliance/flywheel/trajectories.py)")
    p.add_argument("--pack", default=None, help="pack of the lines that name none")
    p.add_argument("--model", default=None, help="model of the lines that name none")
    p.add_argument("--adapter-version", default=None, help="adapter version of the lines that name none")
    _format(p, "the import summary")
    _common(p)
    p = tsub.add_parser("triage", help="judge stored trajectories: replay and verify where the pack has a world, "
                                       "bucket failure modes; prints them per adapter version")
    p.add_argument("--pack", default=None, help="pack of the trajectories that name none")
    p.add_argument("--source", default=None, help="only one serve session or import (its source_id)")
    p.add_argument("--all", dest="everything", action="store_true",
                   help="judge every trajectory again, not only those not judged yet")
    _format(p, "the failure modes per adapter version")
    _common(p)


def add_tasks_from_failures(tasks_sub: argparse._SubParsersAction) -> None:
    """`tasks from-failures`, added to the `tasks` group's subparsers."""
    from appliance.cli import _common, _format, text_file

    p = tasks_sub.add_parser("from-failures", help="turn labelled failures (triaged trajectories with corrected "
                                                   "calls) into the pack's regression split, never trained on")
    p.add_argument("--pack", required=True, help="the pack whose regression split gains the tasks")
    p.add_argument("--corrections", type=text_file, default=None,
                   help='JSONL of {"trajectory_id": ..., "expected": [calls]}; wins over a trajectory\'s own '
                        "`expected` field")
    _format(p, "how many tasks were kept and why others were dropped")
    _common(p)


def cmd_tasks_from_failures(args: argparse.Namespace) -> int:
    from appliance import report
    from appliance.flywheel.regression import DROP_REASONS, read_corrections, tasks_from_failures

    corrections = read_corrections(args.corrections) if args.corrections else None
    summary = tasks_from_failures(_workspace(args), args.pack, tasks_root=args.tasks_root, corrections=corrections)
    for trajectory_id, reason, detail in summary.dropped:
        print(f"dropped {trajectory_id}: {DROP_REASONS[reason]}" + (f" ({detail})" if detail else ""),
              file=sys.stderr)
    report.print_fields({"pack": summary.pack, "file": summary.file, "kept": len(summary.kept),
                         "dropped": summary.dropped_by_reason, "failures_without_correction": summary.uncorrected},
                        fmt=args.format)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from appliance.flywheel.serve import ServeConfig, serve

    config = ServeConfig(**{spec.name: getattr(args, spec.name) for spec in fields(ServeConfig)})
    if not 0 <= config.port <= 65535:
        raise ApplianceError(f"--port must be from 0 to 65535, not {config.port}.")
    if config.max_new_tokens < 1:
        raise ApplianceError(f"--max-new-tokens must be at least 1, not {config.max_new_tokens}.")
    serve(config, workspace=_workspace(args), tasks_root=args.tasks_root,
          echo=lambda line: print(line, file=sys.stderr, flush=True))
    return 0


def cmd_trajectories(args: argparse.Namespace) -> int:
    from appliance import report

    workspace = _workspace(args)
    if args.traj_cmd == "import":
        from appliance.flywheel.trajectories import import_trajectories

        summary = import_trajectories(args.file, workspace, pack=args.pack, model=args.model,
                                      adapter_version=args.adapter_version)
        # skipped: already stored (an earlier import, or served here) or repeated within the file
        report.print_fields({"import_id": summary.import_id, "file": summary.file, "imported": summary.imported,
                             "skipped": summary.skipped}, fmt=args.format)
        return 0
    if args.traj_cmd == "triage":
        from appliance.flywheel.trends import latest_fixes
        from appliance.flywheel.triage import triage

        summary = triage(workspace, pack=args.pack, tasks_root=args.tasks_root, everything=args.everything,
                         source_id=args.source)
        for note in summary.notes:
            print(f"note: {note}", file=sys.stderr)
        print(f"judged {summary.judged} trajectories (triage {summary.triage_id}).", file=sys.stderr)
        columns, rows = workspace.query("SELECT * FROM failure_modes_by_adapter")
        report.print_records(columns, rows, fmt=args.format, title="failure modes per adapter version",
                             empty="no trajectories have been judged yet; import some or serve requests first.")
        # stderr, like the notes: stdout stays the table (or one JSON document) a script reads
        for fix in latest_fixes(workspace):
            print(f"recommendation: {fix}", file=sys.stderr)
        return 0
    raise ApplianceError(f"unknown trajectories command {args.traj_cmd!r}.")


def _workspace(args: argparse.Namespace) -> Any:
    from appliance.store import Workspace

    return Workspace.open(args.workspace)
