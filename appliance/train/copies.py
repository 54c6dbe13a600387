"""Which tokens of a sampled call copy the request (TrainConfig.negatives_without_copies).

Session 40 measured GRPO's negative half miscopying arguments (docs/learning.md, H58 against H59): a failed
sample's tokens are pushed down with it, and most of its argument values are right copies of the request (an id,
an address, a body). `negatives_without_copies` takes those copies out of a below-mean sample's loss and keeps
its push on what the sample chose: the decision, the tool's name, the field names, and values it did not copy.

A character is a copy when it lies in an argument's string value (anywhere under an `"arguments"` key, the
rendered answer's shape, `appliance.prompting.render_completion`) and in a run of at least `MIN_COPY_CHARS`
characters that the request holds too. A token is a copy when any of its characters is.
"""
from __future__ import annotations

from typing import Any, Callable

MIN_COPY_CHARS = 3  # of "14:30" for a request's "13:30", ":30" is a copy and "4" is not; one shared letter is chance
REPLACEMENT_CHARACTER = "\ufffd"  # what a decoder writes for a character whose bytes are not all there yet


def argument_value_chars(text: str) -> list[bool]:
    """Per character of a (possibly cut short) JSON answer: inside a string value under an `"arguments"` key."""
    inside = [False] * len(text)
    stack: list[dict[str, Any]] = []  # open containers: {"object": bool, "key": last key, "expect_key": bool}
    i = 0
    while i < len(text):
        char = text[i]
        if char == '"':
            end = _string_end(text, i)
            top = stack[-1] if stack else None
            if top is not None and top["object"] and top["expect_key"]:
                top["key"], top["expect_key"] = text[i + 1:end], False
            elif any(frame["object"] and frame["key"] == "arguments" for frame in stack):
                inside[i + 1:end] = [True] * (end - i - 1)
            i = end + 1
            continue
        if char in "{[":
            stack.append({"object": char == "{", "key": None, "expect_key": char == "{"})
        elif char in "}]" and stack:
            stack.pop()
        elif char == "," and stack and stack[-1]["object"]:
            stack[-1]["expect_key"] = True
        i += 1
    return inside


def _string_end(text: str, start: int) -> int:
    """The index of the quote closing the string opened at `start` (len(text) when it was cut short)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return len(text)


def copied_chars(text: str, request: str, min_chars: int = MIN_COPY_CHARS) -> list[bool]:
    """Per character of `text`: an argument value's character in a run of >= min_chars that `request` holds."""
    values = argument_value_chars(text)
    copied = [False] * len(text)
    previous = [0] * (len(request) + 1)  # longest common run ending at text[i-1], request[j-1]
    for i, char in enumerate(text):
        current = [0] * (len(request) + 1)
        longest = 0
        if values[i]:
            for j, other in enumerate(request):
                if char == other:
                    current[j + 1] = previous[j] + 1
                    longest = max(longest, current[j + 1])
        if longest >= min_chars:
            copied[i - longest + 1:i + 1] = [True] * longest
        previous = current
    return copied


def token_char_spans(decode: Callable[[list[int]], str], ids: list[int]) -> list[tuple[int, int]]:
    """Each token's [start, end) in decode(ids), by decoding growing prefixes. A byte-level token may hold part
    of a character (decoded as U+FFFD until the character is whole); every token of such a character covers it.
    """
    spans, whole_before = [], 0  # characters decoded whole by the tokens before this one
    for n in range(1, len(ids) + 1):
        text = decode(ids[:n])
        spans.append((whole_before, max(whole_before, len(text))))
        whole_before = max(whole_before, len(text.rstrip(REPLACEMENT_CHARACTER)))
    return spans


def copied_tokens(decode: Callable[[list[int]], str], ids: list[int], request: str) -> list[bool]:
    """Per token of `ids`: does it hold a character the answer copies from the request?"""
    text = decode(ids)
    copied = copied_chars(text, request)
    return [any(copied[start:end]) for start, end in token_char_spans(decode, ids)]
