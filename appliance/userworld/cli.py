"""`appliance tasks new NAME --tools FILE | --functions FILE | --mcp "COMMAND ARGS"`: the front end.

Wired into appliance/cli.py (`add_tasks_new(tsub)`) and appliance/commands.py
(`cmd_tasks_new(args)`); the engine is appliance.userworld.writer.new_pack.
"""
from __future__ import annotations

import argparse


def add_tasks_new(tasks_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `new` to `appliance tasks`' subcommands."""
    from appliance.cli import _common, text_file

    p = tasks_subparsers.add_parser("new", help="make a pack from your tools: an OpenAI tools list, Python "
                                                "functions or an MCP server")
    p.add_argument("name", help="the pack's name; its folder is <tasks-root>/NAME")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--tools", type=text_file, metavar="FILE",
                        help="an OpenAI tools list (JSON); nothing runs, calls are compared on their arguments")
    source.add_argument("--functions", type=text_file, metavar="FILE",
                        help="a Python module: its functions are the tools, run in a sandbox on a fresh state")
    source.add_argument("--mcp", metavar="COMMAND",
                        help='an MCP server over stdio, e.g. "python server.py": tools/list and tools/call')
    p.add_argument("--state", metavar="FUNCTION",
                   help="--functions: the module's function that makes a fresh state (default: make_state if any)")
    p.add_argument("--reset-tool", metavar="TOOL",
                   help="--mcp: a server tool that restores the starting state; state-changing tools then run")
    p.add_argument("--state-tool", metavar="TOOL",
                   help="--mcp: a read-only server tool whose result is the state to compare")
    p.add_argument("--seeds", type=text_file, metavar="FILE",
                   help='your seed requests (JSONL of {"request": ..., "expected": [...]}): they become val')
    p.add_argument("--force", action="store_true", help="write into an existing, non-empty pack folder")
    _common(p)
    return p


def cmd_tasks_new(args: argparse.Namespace) -> int:
    """Write the pack and say what to do next; PackError (one sentence) for what the person must fix."""
    from appliance.userworld.writer import new_pack  # the pack machinery loads only when a pack is made

    made = new_pack(args.name, tools=args.tools, functions=args.functions, mcp=args.mcp, root=args.tasks_root,
                    state=args.state, reset_tool=args.reset_tool, state_tool=args.state_tool, seeds=args.seeds,
                    force=args.force)
    from appliance.packs.manifest import display_path

    where = display_path(made.path)
    changing = [t for t in made.tools if t not in made.read_only]
    print(f"wrote {where}: world '{made.world}', {len(made.tools)} tools "
          f"({len(made.read_only)} read-only, {len(changing)} changing state)"
          + (f", {made.seeds} seed requests in val.jsonl" if made.seeds else ""))
    for note in made.notes:
        print(f"  note: {note}")
    if not made.seeds:
        print(f"next: write your seed requests into {where}/val.jsonl (see {where}/README.md), then "
              f"`appliance tasks check {where}`")
    else:
        print(f"next: `appliance tasks check {where}`, then `appliance eval --pack {where} --split val`")
    return 0
