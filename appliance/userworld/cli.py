"""`appliance tasks new NAME --tools FILE | --functions FILE | --mcp "COMMAND ARGS"` and
`appliance tasks expand PACK --seeds FILE`: the front ends.

Wired into appliance/cli.py (`add_tasks_new(tsub)`, `add_tasks_expand(tsub)`) and
appliance/commands.py (`cmd_tasks_new(args)`, `cmd_tasks_expand(args)`); the engines are
appliance.userworld.writer.new_pack and appliance.userworld.expand.expand_pack.
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


def add_tasks_expand(tasks_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `expand` to `appliance tasks`' subcommands."""
    from appliance.cli import _common, text_file
    from appliance.userworld.expand import DEFAULT_PER_SEED, DEFAULT_RL_PER_SEED, DEFAULT_SEED

    p = tasks_subparsers.add_parser("expand", help="grow a pack's train split from your seed requests "
                                                   "(slots and restyling); the seeds become val")
    p.add_argument("pack", help="the pack's name or folder")
    p.add_argument("--seeds", type=text_file, metavar="FILE", required=True,
                   help='your seed requests (JSONL of {"request", "expected", "slots"?}); {name} marks a slot')
    p.add_argument("--per-seed", type=int, default=DEFAULT_PER_SEED, metavar="N",
                   help=f"train tasks per seed (default {DEFAULT_PER_SEED})")
    p.add_argument("--rl-per-seed", type=int, default=DEFAULT_RL_PER_SEED, metavar="N",
                   help=f"train_rl tasks per seed, GRPO's pool (default {DEFAULT_RL_PER_SEED}: no train_rl)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    _common(p)
    return p


def cmd_tasks_expand(args: argparse.Namespace) -> int:
    """Expand the seeds into the pack and print the generation report."""
    from appliance.packs.manifest import display_path
    from appliance.userworld.expand import DROP_REASONS, REPORT_FILE, expand_pack

    report = expand_pack(args.pack, seeds=args.seeds, per_seed=args.per_seed, rl_per_seed=args.rl_per_seed,
                         seed=args.seed, root=args.tasks_root)
    where = display_path(report.path)
    kept = ", ".join(f"{split} {count}" for split, count in report.kept.items())
    print(f"wrote {where}: {report.seeds} seeds; kept {kept}")
    for reason, count in sorted(report.dropped.items()):
        print(f"  dropped {count}: {DROP_REASONS[reason]} (e.g. {report.drop_examples[reason]})")
    if report.short_seeds:
        short = ", ".join(f"{seed} ({n})" for seed, n in report.short_seeds.items())
        print(f"  short of the wanted count (give these seeds more slot values): {short}")
    print(f"report: {where}/{REPORT_FILE}; next: `appliance tasks check {where}`")
    return 0
