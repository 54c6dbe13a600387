"""BFCL's AST checker, rebuilt from the rules in shared/datasets/bfcl/SCORING.md.

Scores one row's tool calls the way the leaderboard scores an FC-mode model
(native tool calls, JSON arguments, dotted names exposed as underscores):
all or nothing per row, no partial credit. The rules, in the checker's order:

- category: `irrelevance` passes iff there is no call; names containing
  `parallel` need exactly as many calls as the ground truth, matched without
  order (greedy, first fit, as upstream); `multiple` needs exactly one call,
  checked against the expected function's doc; otherwise ("simple") exactly one
  call checked against the first doc;
- per call: the name (expected name with '.' → '_'), then the doc's required
  parameters, then every supplied parameter (must be in the doc and in the
  ground truth; type; value), then every omitted ground-truth parameter must
  list "" ("may be omitted");
- types use exact Python types after an int→float lift at top level only;
  a ground truth whose values are of another type than the doc's makes the
  parameter a "variable": either type passes and values compare by plain ==;
- strings (and lists of strings, dict values) compare after removing
  ` ,./-_*^`, lowercasing and turning ' into ".

A model output that could not be parsed into calls should be passed as `[]`:
upstream counts an undecodable FC reply as "no call", which is right for
irrelevance and wrong everywhere else (`expects_no_call` says which rows).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from appliance.bfcl.convert import checker_signature, openai_name
from appliance.task import ToolCall

# The doc type names and the exact Python type each must have (`type(v) is t`).
PYTHON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
SEQUENCE_TYPES = ("array", "tuple")
MAY_OMIT = ""  # in a list of acceptable values: the parameter may be left out
_IGNORED_IN_STRINGS = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class BfclOutcome:
    """The checker's answer for one row: pass/fail, upstream's error type, one human line."""

    passed: bool
    error_type: str
    reason: str
    bucket: str


class _Mismatch(Exception):
    """The first rule a call breaks; caught at the row level and turned into an outcome."""

    def __init__(self, error_type: str, reason: str):
        super().__init__(reason)
        self.error_type = error_type
        self.reason = reason


def score_bfcl(row: dict[str, Any], calls: Sequence[ToolCall]) -> tuple[bool, str]:
    """(passed, reason) for one pack row and the calls a model made."""
    outcome = check_bfcl(row, calls)
    return outcome.passed, outcome.reason


def check_bfcl(row: dict[str, Any], calls: Sequence[ToolCall]) -> BfclOutcome:
    """The full outcome for one row, including the failure bucket for reports."""
    spec = row["bfcl"]
    category = spec["category"]
    docs = row_signatures(row)
    try:
        if expects_no_call(category):
            _expect_no_call(calls)
            return BfclOutcome(True, "", "made no call, as required", "success")
        if "relevance" in category:
            _expect_some_call(calls)
            return BfclOutcome(True, "", "made a call, as required", "success")
        if "parallel" in category:
            _check_parallel(spec, docs, calls)
        elif "multiple" in category:
            _check_multiple(spec, docs, calls)
        else:
            _check_simple(spec, docs, calls)
    except _Mismatch as mismatch:
        return BfclOutcome(False, mismatch.error_type, mismatch.reason, _bucket(spec, calls))
    return BfclOutcome(True, "", "matches the BFCL ground truth", "success")


def expects_no_call(category: str) -> bool:
    """Whether a row of this category passes only without a call (irrelevance, live_irrelevance).

    On these rows an output that does not decode to a call (empty text, prose,
    a broken or truncated call) is right: the leaderboard reads it as "no call".
    """
    return "irrelevance" in category


def _bucket(spec: dict[str, Any], calls: Sequence[ToolCall]) -> str:
    if expects_no_call(spec["category"]):
        return "called_when_none_expected"
    if not calls:
        return "missed_call"
    expected = sorted(openai_name(_only_key(gt)) for gt in spec.get("ground_truth") or [])
    return "wrong_arguments" if sorted(c.name for c in calls) == expected else "wrong_tool"


# --- category rules ---------------------------------------------------------


def _expect_no_call(calls: Sequence[ToolCall]) -> None:
    if calls:
        names = ", ".join(call.name for call in calls)
        raise _Mismatch("irrelevance:called", f"called {names} although no supplied function fits the request")


def _expect_some_call(calls: Sequence[ToolCall]) -> None:
    if not calls:
        raise _Mismatch("relevance:no_call", "made no call although a supplied function fits the request")


def row_signatures(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's tools as the checker reads them (BFCL type names, OpenAI tool names)."""
    tuples = row["bfcl"].get("tuples") or {}
    return [checker_signature(tool, tuples.get(tool["function"]["name"], [])) for tool in row.get("tools") or []]


Docs = list[dict[str, Any]]


def _check_simple(spec: dict[str, Any], docs: Docs, calls: Sequence[ToolCall]) -> None:
    _expect_count(calls, 1, "simple_function_checker:wrong_count")
    _check_call(docs[0] if docs else None, calls[0], spec["ground_truth"][0])


def _check_multiple(spec: dict[str, Any], docs: Docs, calls: Sequence[ToolCall]) -> None:
    ground_truth = spec["ground_truth"]
    _expect_count(calls, len(ground_truth), "multiple_function_checker:wrong_count")
    _check_call(find_doc(docs, _only_key(ground_truth[0])), calls[0], ground_truth[0])


def _check_parallel(spec: dict[str, Any], docs: Docs, calls: Sequence[ToolCall]) -> None:
    ground_truth = spec["ground_truth"]
    _expect_count(calls, len(ground_truth), "parallel_function_checker_no_order:wrong_count")
    unmatched = list(range(len(calls)))
    for position, expected_call in enumerate(ground_truth, start=1):
        name = _only_key(expected_call)
        doc = find_doc(docs, name)
        closest = None
        for index in list(unmatched):
            try:
                _check_call(doc, calls[index], expected_call)
            except _Mismatch as mismatch:
                closest = closest or mismatch
                continue
            unmatched.remove(index)
            break
        else:
            detail = f" (first mismatch: {closest.reason})" if closest else ""
            raise _Mismatch(
                "parallel_function_checker_no_order:cannot_find_match",
                f"no call matches expected call {position}, {openai_name(name)}{detail}",
            )


def _expect_count(calls: Sequence[ToolCall], wanted: int, error_type: str) -> None:
    if len(calls) != wanted:
        plural = "call" if wanted == 1 else "calls"
        raise _Mismatch(error_type, f"expected exactly {wanted} {plural}, got {len(calls)}")


def find_doc(docs: Docs, bfcl_name: str) -> dict[str, Any] | None:
    """The doc of a ground-truth function; upstream's rule: by name, the first of equal names wins."""
    wanted = openai_name(bfcl_name)
    return next((doc for doc in docs if doc["name"] == wanted), None)


def _only_key(call: dict[str, Any]) -> str:
    return next(iter(call))


# --- one call ---------------------------------------------------------------


def _check_call(doc: dict[str, Any] | None, call: ToolCall, expected_call: dict[str, Any]) -> None:
    expected_name = _only_key(expected_call)
    acceptable_by_param: dict[str, list[Any]] = expected_call[expected_name]
    if doc is None:
        raise _Mismatch("checker:no_doc", f"the ground truth names {expected_name!r}, which no supplied doc defines")
    wanted = doc["name"]  # already the OpenAI name: upstream maps '.' to '_' here
    if call.name != wanted:
        raise _Mismatch("simple_function_checker:wrong_func_name", f"called {call.name!r}, expected {wanted!r}")
    properties = doc["parameters"].get("properties") or {}
    arguments = call.arguments
    for name in doc["parameters"].get("required") or []:
        if name not in arguments:
            raise _Mismatch("simple_function_checker:missing_required", f"{wanted}: missing required argument {name!r}")
    for name, value in arguments.items():
        if name not in properties or name not in acceptable_by_param:
            raise _Mismatch("simple_function_checker:unexpected_param", f"{wanted}: unexpected argument {name!r}")
        _check_argument(f"{wanted}.{name}", value, properties[name], acceptable_by_param[name])
    for name, acceptable in acceptable_by_param.items():
        if name not in arguments and MAY_OMIT not in acceptable:
            raise _Mismatch("simple_function_checker:missing_optional", f"{wanted}: argument {name!r} may not be omitted")


def _check_argument(label: str, value: Any, schema: dict[str, Any], acceptable: list[Any]) -> None:
    doc_type = schema.get("type")
    expected = PYTHON_TYPES.get(doc_type)
    if expected is None:
        raise _Mismatch("checker:unknown_type", f"{label}: the doc uses the unknown type {doc_type!r}")
    items_type = (schema.get("items") or {}).get("type") if doc_type in SEQUENCE_TYPES else None
    nested = PYTHON_TYPES.get(items_type) if items_type else None
    if doc_type == "tuple" and type(value) is tuple:
        value = list(value)  # the ground truth stores tuples as JSON lists
    if doc_type == "float" and type(value) is int:
        value = float(value)  # Python would accept an int here; only at top level
    is_variable = _check_type(label, value, acceptable, doc_type, expected, nested)
    if not is_variable:
        if expected is dict:
            return _check_dict(label, value, acceptable)
        if expected is list and nested is dict:
            return _check_list_of_dicts(label, value, acceptable)
        if expected is str:
            return _check_string(label, value, acceptable)
        if expected is list:
            return _check_list(label, value, acceptable)
    if value not in acceptable:
        raise _Mismatch("value_error:others", f"{label}: {value!r} is not an acceptable value")


# --- types ------------------------------------------------------------------


def _answer_type(acceptable: list[Any]) -> type | None:
    """The type of the first acceptable value that is not the may-omit marker."""
    for answer in acceptable:
        if not (type(answer) is str and answer == MAY_OMIT):
            return type(answer)
    return None


def _check_type(label: str, value: Any, acceptable: list[Any], doc_type: str, expected: type,
                nested: type | None) -> bool:
    """Raise on a type mismatch; return whether the parameter is a "variable"."""
    answer_type = _answer_type(acceptable)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None or _items_fit(value, acceptable, nested):
            return is_variable
        raise _Mismatch("type_error:nested", f"{label}: list elements should be {nested.__name__}")
    if answer_type is not None and type(value) is answer_type:
        return True
    raise _Mismatch("type_error:simple", f"{label}: expected {doc_type}, got {type(value).__name__}")


def _items_fit(value: list[Any], acceptable: list[Any], nested: type) -> bool:
    # One level deep: every element has the items type or the type of the
    # candidate list's first element. A non-list candidate (e.g. "") passes.
    for candidate in acceptable:
        if type(candidate) is not list:
            return True
        candidate_type = _answer_type(candidate)
        if all(type(item) is nested or type(item) is candidate_type for item in value):
            return True
    return False


# --- values -----------------------------------------------------------------


def standardise(text: str) -> str:
    """BFCL's string normal form: drop ` ,./-_*^`, lowercase, ' → "."""
    return _IGNORED_IN_STRINGS.sub("", text).lower().replace("'", '"')


def _standardise_items(values: Any) -> list[Any]:
    return [standardise(v) if type(v) is str else v for v in values]


def _check_string(label: str, value: str, acceptable: list[Any]) -> None:
    if standardise(value) not in [standardise(a) for a in acceptable if type(a) is str]:
        raise _Mismatch("value_error:string", f"{label}: {value!r} is not an acceptable string")


def _check_list(label: str, value: list[Any], acceptable: list[Any]) -> None:
    # A "" candidate reads as an empty list, so [] passes for a may-omit list.
    wanted = _standardise_items(value)
    if not any(isinstance(c, (list, str)) and _standardise_items(c) == wanted for c in acceptable):
        raise _Mismatch("value_error:list/tuple", f"{label}: {value!r} is not an acceptable list (order matters)")


def _check_dict(label: str, value: dict[str, Any], acceptable: list[Any]) -> None:
    problem = f"{label}: no acceptable dict"
    for candidate in acceptable:
        if type(candidate) is str and candidate == MAY_OMIT:
            continue
        problem = _dict_problem(label, value, candidate)
        if problem is None:
            return
    raise _Mismatch("value_error:dict", problem)


def _dict_problem(label: str, value: Any, candidate: Any) -> str | None:
    """Why `value` does not match one acceptable dict (key → acceptable values), or None."""
    if not isinstance(value, dict) or not isinstance(candidate, dict):
        return f"{label}: {value!r} is not an acceptable dict"
    for key, item in value.items():
        if key not in candidate:
            return f"{label}: unexpected key {key!r}"
        alternatives = _standardise_items(_as_alternatives(candidate[key]))
        if (standardise(item) if type(item) is str else item) not in alternatives:
            return f"{label}: {item!r} is not acceptable for key {key!r}"
    for key, alternatives in candidate.items():
        if key not in value and MAY_OMIT not in _as_alternatives(alternatives):
            return f"{label}: missing key {key!r}"
    return None


def _as_alternatives(values: Any) -> list[Any]:
    return values if isinstance(values, list) else [values]


def _check_list_of_dicts(label: str, value: list[Any], acceptable: list[Any]) -> None:
    # Element i is checked against candidate dict i: order matters, lengths must agree.
    problem = f"{label}: wrong number of dicts in the list"
    for candidate in acceptable:
        if not isinstance(candidate, (list, str)) or len(candidate) != len(value):
            continue
        problems = (_dict_problem(label, element, expected) for element, expected in zip(value, candidate))
        first = next((p for p in problems if p is not None), None)
        if first is None:
            return
        problem = first
    raise _Mismatch("value_error:list_dict", problem)
