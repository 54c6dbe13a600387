"""Company-directory tool: find employee email addresses by (part of) a name."""
from __future__ import annotations

from appliance.world.base import load_base
from appliance.world.matching import ErrorText, regex_contains
from appliance.world.tools.registry import text, tool


@tool(
    "company_directory",
    "find_email_address",
    description=(
        "Find employees' email addresses by name (usually a first name). Returns a list of every "
        "address that contains the lower-cased name; the list may be empty or hold several addresses."
    ),
    properties={"name": text("The person's name, e.g. nadia.")},
    required=("name",),
)
def find_email_address(w, name=None):
    if not name:
        return ErrorText("Name not provided.")
    term = name.lower()
    # WorkBench lower-cases the name and matches it as a case-sensitive regex.
    return [a for a in load_base().directory if regex_contains(term, a, ignore_case=False)]
