"""JSON schemas from Python functions, and the schema-aware argument normalisation."""
from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Literal, Optional

import pytest

from appliance.errors import PackError
from appliance.task import Task, ToolCall
from appliance.userworld.normalise import ArgumentNormaliser, normalise_value
from appliance.userworld.schema import function_tool, is_read_only, load_module, parse_docstring, tool_functions

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def tracker():
    return load_module(FIXTURES / "tracker_functions.py", name="tracker_for_schema_tests")


def parameters(tool: dict) -> dict:
    return tool["function"]["parameters"]


# --- schemas from functions ----------------------------------------------------------------------


def test_tools_are_the_modules_own_public_functions_without_the_state_factory(tracker):
    names = list(tool_functions(tracker))
    assert names == ["create_issue", "assign_issue", "transition_issue", "search_issues", "get_issue",
                     "delete_issue"]


def test_marks_come_from_the_decorators_or_the_attribute(tracker):
    functions = tool_functions(tracker)
    assert is_read_only(functions["search_issues"]) is True
    assert is_read_only(functions["create_issue"]) is False
    assert is_read_only(functions["delete_issue"]) is False  # `delete_issue.read_only = False`


def test_a_schema_reads_types_defaults_literals_and_docstring_lines(tracker):
    tool = function_tool(tool_functions(tracker)["create_issue"])
    assert tool["type"] == "function" and tool["function"]["name"] == "create_issue"
    assert tool["function"]["description"] == "Create an issue in the tracker."
    schema = parameters(tool)
    assert "state" not in schema["properties"]  # the runner passes the state; the model never sees it
    assert schema["required"] == ["title"] and schema["additionalProperties"] is False
    assert schema["properties"]["title"] == {"type": "string", "description": "a one-line summary of the problem."}
    assert schema["properties"]["priority"] == {"type": "string", "enum": ["low", "medium", "high"],
                                                "description": "how urgent it is.", "default": "medium"}
    labels = schema["properties"]["labels"]
    assert labels["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert labels["default"] is None


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_scalars_enums_optionals_annotated_and_rest_docstrings():
    def paint(wall: int, colour: Colour = Colour.RED, coats: Optional[float] = None,
              note: Annotated[str, "for the painter"] = "", glossy: bool = False) -> str:
        """Paint a wall.

        :param wall: which wall, by number
            (counted from the door).
        """

    schema = parameters(function_tool(paint))
    assert schema["properties"]["wall"] == {"type": "integer", "description": "which wall, by number (counted from "
                                                                             "the door)."}
    assert schema["properties"]["colour"] == {"type": "string", "enum": ["red", "blue"], "default": "red"}
    assert schema["properties"]["coats"] == {"type": ["number", "null"], "default": None}
    assert schema["properties"]["note"] == {"type": "string", "description": "for the painter", "default": ""}
    assert schema["properties"]["glossy"] == {"type": "boolean", "default": False}


def test_google_docstrings_keep_continuation_lines_and_stop_at_the_next_section():
    summary, described = parse_docstring("""Do a thing.

    Args:
        first: the first
            of two.
        second (int): the second.

    Returns:
        first: not a parameter.
    """)
    assert summary == "Do a thing."
    assert described == {"first": "the first of two.", "second": "the second."}


def test_types_json_cannot_carry_and_star_arguments_are_named():
    def takes_object(when: object) -> None: ...

    def takes_star(*values: int) -> None: ...

    with pytest.raises(PackError, match="function 'takes_object' parameter 'when' has type object"):
        function_tool(takes_object)
    with pytest.raises(PackError, match="tools are called with named arguments"):
        function_tool(takes_star)


def test_a_module_that_fails_to_import_is_one_sentence(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(PackError, match="broken.py failed to import: SyntaxError"):
        load_module(broken)


# --- argument normalisation ----------------------------------------------------------------------


SCHEMA = {"type": "object", "required": ["issue_id"], "properties": {
    "issue_id": {"type": "integer"},
    "weight": {"type": "number"},
    "notify": {"type": "boolean", "default": False},
    "priority": {"type": "string", "enum": ["low", "medium", "high"], "default": "medium"},
    "code": {"type": "string", "enum": ["a", "A"]},
    "note": {"type": "string"},
    "labels": {"type": "array", "items": {"type": "string", "enum": ["bug", "ui"]}},
    "owner": {"type": "object", "properties": {"team": {"type": "string", "default": "core"}}},
    "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
}}


def test_defaults_fill_in_and_an_optional_null_is_the_argument_left_out():
    assert normalise_value({"issue_id": 3}, SCHEMA) == {"issue_id": 3, "notify": False, "priority": "medium"}
    assert normalise_value({"issue_id": 3, "note": None}, SCHEMA) == normalise_value({"issue_id": 3}, SCHEMA)
    assert normalise_value({"issue_id": 3, "maybe": None}, SCHEMA)["maybe"] is None  # the schema allows null


def test_types_are_read_as_the_schema_says():
    out = normalise_value({"issue_id": "3", "weight": "2.50", "notify": "TRUE", "note": 30}, SCHEMA)
    assert out["issue_id"] == 3 and out["weight"] == 2.5 and out["notify"] is True and out["note"] == "30"
    assert normalise_value({"issue_id": 3.0, "weight": 4.0}, SCHEMA)["issue_id"] == 3
    assert type(normalise_value({"issue_id": 3, "weight": 4.0}, SCHEMA)["weight"]) is int
    assert normalise_value({"issue_id": "three"}, SCHEMA)["issue_id"] == "three"  # left for the schema check


def test_enum_case_folds_to_the_member_unless_members_differ_only_in_case():
    out = normalise_value({"issue_id": 1, "priority": "HIGH", "code": "a", "labels": ["Bug", "UI"]}, SCHEMA)
    assert out["priority"] == "high" and out["labels"] == ["bug", "ui"]
    assert normalise_value({"issue_id": 1, "code": "A"}, SCHEMA)["code"] == "A"
    assert normalise_value({"issue_id": 1, "note": "Keep Case"}, SCHEMA)["note"] == "Keep Case"


def test_nested_objects_get_their_defaults():
    assert normalise_value({"issue_id": 1, "owner": {}}, SCHEMA)["owner"] == {"team": "core"}


def test_the_normaliser_rewrites_calls_and_expected_calls_of_known_tools_only():
    normaliser = ArgumentNormaliser([{"type": "function", "function": {"name": "get", "parameters": SCHEMA}}])
    assert normaliser.call(ToolCall("get", {"issue_id": "7"})).arguments["issue_id"] == 7
    unknown = ToolCall("other", {"issue_id": "7"})
    assert normaliser.call(unknown) is unknown
    task = Task("t", ({"role": "user", "content": "x"},), (ToolCall("get", {"issue_id": 7}),))
    assert normaliser.task(task).expected[0].arguments == {"issue_id": 7, "notify": False, "priority": "medium"}
