"""BFCL (Berkeley Function Calling Leaderboard v4) as an eval-only pack with its exact scorer.

    rows = load_bfcl_rows("tasks/bfcl/test.jsonl")
    passed, reason = score_bfcl(rows[0], calls)          # calls: list[ToolCall]
    bfcl_summary((row["tags"]["category"], ok) for row, ok in ...)

- `convert`:  BFCL function docs → OpenAI tools (as the leaderboard's FC handlers do);
- `checker`:  the AST checker, rule for rule from shared/datasets/bfcl/SCORING.md;
- `importer`: upstream files → pack rows, the dev split and the gate subset, the pack folder;
- `summary`:  accuracy per category and the leaderboard's summary numbers.

BFCL is never trained on: the pack has test, dev and gate splits only.
"""
from appliance.bfcl.checker import BfclOutcome, check_bfcl, expects_no_call, score_bfcl, standardise
from appliance.bfcl.convert import openai_name, to_openai_tool
from appliance.bfcl.importer import (
    DEFAULT_CATEGORIES,
    KNOWN_UNPASSABLE,
    gold_calls,
    import_bfcl,
    load_bfcl_rows,
    select_dev,
    select_gate,
    write_pack,
)
from appliance.bfcl.summary import accuracy_by_category, bfcl_summary

__all__ = [
    "BfclOutcome",
    "DEFAULT_CATEGORIES",
    "KNOWN_UNPASSABLE",
    "accuracy_by_category",
    "bfcl_summary",
    "check_bfcl",
    "expects_no_call",
    "gold_calls",
    "import_bfcl",
    "load_bfcl_rows",
    "openai_name",
    "score_bfcl",
    "select_dev",
    "select_gate",
    "standardise",
    "to_openai_tool",
    "write_pack",
]
