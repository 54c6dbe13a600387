"""Build the eval-only BFCL pack (tasks/bfcl/) from the upstream data files.

    rows = import_bfcl("/work/shared/datasets/bfcl")
    write_pack(rows, "tasks/bfcl")          # test.jsonl, dev.jsonl, gate.jsonl, pack.toml

or `python -m appliance.bfcl SRC_DIR [PACK_DIR]`.

Each BFCL entry becomes one pack row: the question's chat messages, the entry's
own tools in OpenAI form (BFCL supplies functions per task, not per pack), one
representative answer in `expected`, and under `bfcl` everything the checker
needs beyond the tools: the category, the ground truth verbatim, the OpenAI →
BFCL names of dotted functions and the tuple-typed parameters. The upstream files are JSON Lines aligned line by line
with their possible_answer files; irrelevance has none.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any, Iterable

from appliance.bfcl.checker import MAY_OMIT, find_doc, row_signatures
from appliance.bfcl.convert import openai_name, to_openai_tool, tuple_parameters
from appliance.errors import PackError
from appliance.task import ToolCall

DEFAULT_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
)
NO_ANSWER_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
# Entries no output can pass (SCORING.md §8): a required list with no acceptable
# value (live_simple 106, 112), a ground-truth argument missing from the doc
# (live_multiple 862) or named differently from the doc's required one (964).
KNOWN_UNPASSABLE = frozenset({
    "live_simple_106-63-0",
    "live_simple_112-68-0",
    "live_multiple_862-181-3",
    "live_multiple_964-207-0",
})
GATE_PER_CATEGORY = 20
GATE_SEED = 0
# The dev split: settings are chosen on it (e.g. "does this adapter keep general function calling?") so that
# neither the gate nor the reported test is read for a choice. Carved out of test, disjoint from the gate.
DEV_PER_CATEGORY = 20
DEV_SEED = 0
PACK_VERSION = "4.0.0"
SOURCE_COMMIT = "6ea57973c7a6097fd7c5915698c54c17c5b1b6c8"


def import_bfcl(src_dir: str | Path, categories: Iterable[str] = DEFAULT_CATEGORIES) -> list[dict[str, Any]]:
    """Pack rows for the given BFCL categories, in file order, category by category."""
    src = Path(src_dir)
    rows = []
    for category in categories:
        rows.extend(_category_rows(src, category))
    return rows


def _category_rows(src: Path, category: str) -> list[dict[str, Any]]:
    questions = read_jsonl(src / f"BFCL_v4_{category}.json")
    if category in NO_ANSWER_CATEGORIES:
        return [build_row(category, question, []) for question in questions]
    answers = read_jsonl(src / "possible_answer" / f"BFCL_v4_{category}.json")
    if len(answers) != len(questions):
        raise PackError(f"{src}: {category} has {len(questions)} questions but {len(answers)} answers.")
    rows = []
    for question, answer in zip(questions, answers):
        if question["id"] != answer["id"]:
            raise PackError(f"{src}: {category} question {question['id']} is aligned with answer {answer['id']}.")
        rows.append(build_row(category, question, answer["ground_truth"]))
    return rows


def build_row(category: str, question: dict[str, Any], ground_truth: list[dict[str, Any]]) -> dict[str, Any]:
    """One pack row from a BFCL question and its ground truth (`[]` for irrelevance)."""
    docs = question["function"]
    spec: dict[str, Any] = {"category": category, "ground_truth": ground_truth}
    renamed = {openai_name(doc["name"]): doc["name"] for doc in docs if openai_name(doc["name"]) != doc["name"]}
    if renamed:
        spec["names"] = renamed
    tuples = {openai_name(doc["name"]): tuple_parameters(doc) for doc in docs if tuple_parameters(doc)}
    if tuples:
        spec["tuples"] = tuples
    row = {
        "id": question["id"],
        "messages": [dict(message) for turn in question["question"] for message in turn],
        "expected": [],
        "kind": "single_step",
        "tags": {"category": category, "source": "bfcl"},
        "tools": [to_openai_tool(doc) for doc in docs],
        "bfcl": spec,
    }
    row["expected"] = [call.to_json() for call in gold_calls(row)]
    return row


# --- the representative answer ----------------------------------------------


def gold_calls(row: dict[str, Any]) -> list[ToolCall]:
    """One passing answer built from the ground truth, with OpenAI tool names.

    First acceptable non-"" value per argument; an argument that may be omitted
    is omitted unless the doc requires it (then its first value, possibly "").
    Dict and list-of-dict arguments are filled the same way one level down.
    """
    docs = row_signatures(row)
    calls = []
    for expected_call in row["bfcl"]["ground_truth"]:
        name, acceptable_by_param = next(iter(expected_call.items()))
        doc = find_doc(docs, name)
        parameters = (doc or {}).get("parameters") or {}
        required = set(parameters.get("required") or [])
        properties = parameters.get("properties") or {}
        arguments = {}
        for param, acceptable in acceptable_by_param.items():
            if MAY_OMIT in acceptable and param not in required:
                continue
            if acceptable:
                arguments[param] = _gold_value(_first_value(acceptable), properties.get(param) or {})
        calls.append(ToolCall(openai_name(name), arguments))
    return calls


def _first_value(acceptable: list[Any]) -> Any:
    return next((a for a in acceptable if not (type(a) is str and a == MAY_OMIT)), MAY_OMIT)


def _gold_value(value: Any, schema: dict[str, Any]) -> Any:
    # Only genuine dict / list-of-dict parameters hold per-key alternatives;
    # a dict given for another type is a literal the checker compares by ==.
    if schema.get("type") == "dict" and isinstance(value, dict):
        return _gold_dict(value)
    items_type = (schema.get("items") or {}).get("type")
    if schema.get("type") == "array" and items_type == "dict" and isinstance(value, list):
        return [_gold_dict(element) for element in value if isinstance(element, dict)]
    return value


def _gold_dict(alternatives_by_key: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _first_value(alternatives)
        for key, alternatives in alternatives_by_key.items()
        if isinstance(alternatives, list) and alternatives and MAY_OMIT not in alternatives
    }


# --- the pack folder ----------------------------------------------------------


def select_gate(rows: list[dict[str, Any]], per_category: int = GATE_PER_CATEGORY,
                seed: int = GATE_SEED) -> list[dict[str, Any]]:
    """A fixed, seeded subset: `per_category` passable rows of each category, in pack order."""
    return _seeded_per_category(rows, per_category, f"bfcl-gate:{seed}", KNOWN_UNPASSABLE)


def select_dev(rows: list[dict[str, Any]], per_category: int = DEV_PER_CATEGORY,
               seed: int = DEV_SEED) -> list[dict[str, Any]]:
    """The dev split: `per_category` seeded passable rows of each category that the gate does not hold."""
    gate_ids = {row["id"] for row in select_gate(rows)}
    return _seeded_per_category(rows, per_category, f"bfcl-dev:{seed}", KNOWN_UNPASSABLE | gate_ids)


def _seeded_per_category(rows: list[dict[str, Any]], per_category: int, salt: str,
                         excluded: set[str] | frozenset[str]) -> list[dict[str, Any]]:
    chosen: set[str] = set()
    categories = dict.fromkeys(row["tags"]["category"] for row in rows)
    for category in categories:
        ids = [r["id"] for r in rows if r["tags"]["category"] == category and r["id"] not in excluded]
        rng = random.Random(f"{salt}:{category}")
        chosen.update(rng.sample(ids, min(per_category, len(ids))))
    return [row for row in rows if row["id"] in chosen]


def write_pack(rows: list[dict[str, Any]], pack_dir: str | Path) -> dict[str, int]:
    """Write test.jsonl (every row but dev's), dev.jsonl, gate.jsonl (a subset of test) and pack.toml; return
    the row count per category of all of them."""
    pack = Path(pack_dir)
    pack.mkdir(parents=True, exist_ok=True)
    dev = select_dev(rows)
    dev_ids = {row["id"] for row in dev}
    write_jsonl(pack / "test.jsonl", [row for row in rows if row["id"] not in dev_ids])
    write_jsonl(pack / "dev.jsonl", dev)
    write_jsonl(pack / "gate.jsonl", select_gate(rows))
    (pack / "pack.toml").write_text(_manifest_text(), encoding="utf-8")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["tags"]["category"]] = counts.get(row["tags"]["category"], 0) + 1
    return counts


def _manifest_text() -> str:
    return f'''name = "bfcl"
description = "Berkeley Function Calling Leaderboard v4, single-turn Python AST categories (Apache-2.0). Eval only: never train on it."
version = "{PACK_VERSION}"
world = "none"
reward_scheme = "binary"
max_turns = 1
# Rows carry their own "tools" and are scored by appliance.bfcl.score_bfcl.
scorer = "bfcl"
source = "https://github.com/ShishirPatil/gorilla/tree/{SOURCE_COMMIT}/berkeley-function-call-leaderboard"

[splits]
# Every row of the seven categories except dev's.
test = "test.jsonl"
# {DEV_PER_CATEGORY} seeded rows per category, none in the gate, carved out of test: settings are chosen on them
# (appliance.bfcl.select_dev).
dev = "dev.jsonl"
# {GATE_PER_CATEGORY} seeded rows per category of test for the promotion gate (appliance.bfcl.select_gate).
gate = "gate.jsonl"
'''


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every JSON object of a JSON Lines file; PackError names the file and line of a bad one."""
    path = Path(path)
    if not path.is_file():
        raise PackError(f"{path}: file not found; point the BFCL import at the folder holding BFCL_v4_*.json.")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise PackError(f"{path} line {number}: not valid JSON ({error.msg}).") from None
    return rows


def load_bfcl_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a BFCL pack split, checked to carry what `score_bfcl` needs."""
    rows = read_jsonl(path)
    for number, row in enumerate(rows, start=1):
        spec = row.get("bfcl") if isinstance(row, dict) else None
        if not isinstance(spec, dict) or "category" not in spec or "ground_truth" not in spec:
            raise PackError(f"{path} row {number}: no 'bfcl' field with category and ground_truth; rebuild the pack.")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        print("usage: python -m appliance.bfcl SRC_DIR [PACK_DIR]", file=sys.stderr)
        return 2
    pack_dir = args[1] if len(args) == 2 else "tasks/bfcl"
    for category, count in write_pack(import_bfcl(args[0]), pack_dir).items():
        print(f"{category}: {count}")
    return 0

