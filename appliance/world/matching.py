"""Small helpers the tools share: error texts, regex "contains", and date parsing.

These reproduce the pandas behaviour WorkBench's tools rely on:

* `Series.str.contains(term, case=False)` treats the term as a regular
  expression searched anywhere in the cell; an invalid pattern raises
  `re.error`; a missing cell gives NA, and masking a frame with NA raises.
* `pd.Timestamp(text)` parses a date or date-time and raises on text it cannot
  read. We accept ISO 8601 (what every WorkBench value and answer uses) plus a
  few common written forms; pandas accepts some further free-form text.
"""
from __future__ import annotations

import re

import regex
from datetime import datetime
from functools import lru_cache
from typing import Any


class ErrorText(str):
    """A tool's returned error message (not an exception): the call failed, state unchanged."""


class MissingCellError(ValueError):
    """pandas refuses to filter on a column with missing cells (NA in a boolean mask)."""

    def __init__(self) -> None:
        super().__init__("Cannot mask with non-boolean array containing NA / NaN values")


# A model-written search term is an untrusted regex: the `regex` module's timeout
# turns catastrophic backtracking into a raised tool call instead of a stalled verifier.
REGEX_TIMEOUT_S = 0.05


class _TimedPattern:
    def __init__(self, term: str, ignore_case: bool) -> None:
        try:
            self._compiled = regex.compile(term, regex.IGNORECASE | regex.VERSION0 if ignore_case else regex.VERSION0)
        except regex.error as err:
            raise re.error(str(err)) from None

    def search(self, text: str) -> Any:
        try:
            return self._compiled.search(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            raise re.error("search pattern took too long to match (catastrophic backtracking)") from None


@lru_cache(maxsize=4096)
def _pattern(term: str, ignore_case: bool) -> _TimedPattern:
    return _TimedPattern(term, ignore_case)


def regex_contains(term: str, cell: Any, ignore_case: bool = True) -> bool:
    """pandas `str.contains(term, case=not ignore_case)` for one cell."""
    if not isinstance(cell, str):
        raise MissingCellError()
    return _pattern(term, ignore_case).search(cell) is not None


def regex_filter(term: str, cells: list[Any], ignore_case: bool = True) -> list[bool]:
    """`regex_contains` over a column; compiles once and raises like pandas on bad input."""
    pattern = _pattern(term, ignore_case)
    mask = []
    for cell in cells:
        if not isinstance(cell, str):
            raise MissingCellError()
        mask.append(pattern.search(cell) is not None)
    return mask


_WRITTEN_FORMATS = (
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%m/%d/%Y",
    "%m/%d/%Y %H:%M",
    "%m/%d/%Y %H:%M:%S",
    "%B %d, %Y",
    "%B %d %Y",
    "%b %d, %Y",
    "%b %d %Y",
    "%d %B %Y",
    "%d %b %Y",
    "%B %d, %Y %H:%M",
    "%B %d, %Y %H:%M:%S",
)


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> datetime:
    stripped = text.strip()
    try:
        return datetime.fromisoformat(stripped)
    except ValueError:
        pass
    for fmt in _WRITTEN_FORMATS:
        try:
            return datetime.strptime(stripped, fmt)
        except ValueError:
            continue
    raise ValueError(f"could not parse {text!r} as a date or date-time")


def parse_timestamp(value: Any) -> datetime:
    """`pd.Timestamp(value)`: a datetime passes through, text is parsed, anything else raises."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return _parse_text(value)
    raise TypeError(f"cannot convert {value!r} to a date-time")
