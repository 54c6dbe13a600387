"""How much of an eval's failure is calls carrying arguments their tool does not declare? Re-verified without them.

Each stored answer of each eval is parsed again, every argument that its called
tool's schema does not declare is dropped (where the schema is closed, as the
verifier reads it: `appliance.evaluate.decision.declared_arguments`), and the
calls are verified again. For
a call whose only fault was such an argument this is the answer that decoding
held to the tool's schema would have had to emit (an object whose declared keys
are all written can only close); for other answers it is an upper bound, since
held decoding could also change the tokens after the point it forbids. Nothing
is generated: the stored answers are read back from the workspace.

    .venv/bin/python bench/bench_undeclared_arguments.py --workspace runs BASE_EVAL OTHER_EVAL [...]

Prints `name: value` lines per eval (stored success, success with undeclared
arguments dropped, answers that change) and, for each eval after the first, the
paired difference against the first both ways, with the engine's paired
bootstrap (`appliance eval compare`).
"""
from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from appliance.evaluate.compare import paired_bootstrap
from appliance.evaluate.decision import declared_arguments
from appliance.evaluate.stored import per_task_success
from appliance.packs.pack import load_pack
from appliance.parsing import parse_tool_calls
from appliance.store.workspace import Workspace
from appliance.task import ToolCall
from appliance.verify import Verifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evals", nargs="+", help="eval ids; the first is the base of the paired differences")
    parser.add_argument("--workspace", default="runs")
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--tasks-root", default="tasks")
    args = parser.parse_args()

    pack = load_pack(args.pack, root=args.tasks_root)
    verifier = Verifier.for_pack(pack)
    with Workspace.open(args.workspace) as ws:
        scored = {eval_id: rescore(ws, pack, verifier, eval_id) for eval_id in args.evals}
    for eval_id, (stored, held) in scored.items():
        changed = sum(stored[task] != held[task] for task in stored)
        print(f"{eval_id}_success: {sum(stored.values()):.0f}")
        print(f"{eval_id}_success_undeclared_dropped: {sum(held.values()):.0f}")
        print(f"{eval_id}_tasks_changed: {changed}")
    base = args.evals[0]
    for eval_id in args.evals[1:]:
        for label, index in (("stored", 0), ("undeclared_dropped", 1)):
            delta = paired_bootstrap(scored[base][index], scored[eval_id][index])
            print(f"{eval_id}_vs_{base}_{label}: {100 * delta.delta:+.1f} "
                  f"({100 * delta.low:+.1f} … {100 * delta.high:+.1f})")


def rescore(ws: Any, pack: Any, verifier: Any, eval_id: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per task: the stored success rate (as `appliance eval compare` reads it) and the rate with undeclared
    arguments dropped."""
    _, rows = ws.query("SELECT task_id, completion FROM eval_samples WHERE eval_id = ?", [eval_id])
    if not rows:
        raise SystemExit(f"eval {eval_id!r} has no stored samples in this workspace.")
    held = defaultdict(list)
    for task_id, completion in rows:
        held[task_id].append(succeeds_without_undeclared(pack, verifier, pack.task(task_id), completion))
    return per_task_success(ws, eval_id), {task: sum(v) / len(v) for task, v in held.items()}


def succeeds_without_undeclared(pack: Any, verifier: Any, task: Any, completion: str) -> bool:
    parsed = parse_tool_calls(completion)
    if not parsed.ok:
        return verifier.verify(task, completion).success
    tools = pack.tools_for(task)
    calls = []
    for call in parsed.calls:
        declared = declared_arguments(call.name, tools)
        calls.append(ToolCall(call.name, {key: value for key, value in call.arguments.items()
                                          if declared is None or key in declared}))
    return verifier.verify_calls(task, calls).success


if __name__ == "__main__":
    main()
