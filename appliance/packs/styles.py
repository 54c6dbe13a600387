"""Compositional surface variation for training phrasings: how people actually type requests.

    restyle("Delete task {task_id}", rng)  ->  "hey, could you delete task {task_id}? thx"

A hand-written phrasing fixes the intent and where its slots go; a style adds
what everyday requests carry around the intent: a greeting or opener, an
indirect ask ("I need you to ..."), a sentence of context, a polite tail,
lower case, a light typo. Only the literal text changes, never a `{slot}`, so
the expected call (computed from the slots) stays right and replays as before.

Training splits are restyled; `dev` and `val` keep their hand-written phrasings
as they are, so the held-out splits measure wordings no style produced.
"""
from __future__ import annotations

import re
from random import Random

OPENERS = ("Hi, ", "Hey, ", "Hello! ", "Morning. ", "OK, ", "Right, ", "Hi there. ",
           "So, ", "Sam here. ")
INDIRECT = ("I need you to ", "Can you ", "Could you ", "Please ", "I'd like you to ",
            "Go ahead and ", "Time to ")
CONTEXT = ("I'm catching up on my backlog.", "This came up in today's stand-up.", "I'm tidying things up today.",
           "It's been a busy week.", "My manager asked me to sort this out.", "Doing some admin before lunch.",
           "Following up on this morning's meeting.", "Sorry for the short notice.")
TAILS = (" Thanks!", " Thank you.", " Cheers.", " thx", " Thanks a lot.", " Appreciate it.", " Much appreciated.")
TYPO_RATE = 0.15

_SLOT = re.compile(r"(\{[a-z_]+\})")
_WORD = re.compile(r"[A-Za-z]{5,}")
# Opening words an indirect ask can replace ("Please delete" -> "Can you delete").
_IMPERATIVE_LEAD = re.compile(r"^(?:please |kindly |could you (?:please )?|can you )", re.IGNORECASE)


def restyle(phrasing: str, rng: Random) -> str:
    """One seeded surface variant of `phrasing` (possibly the phrasing itself); slots are untouched."""
    text = phrasing
    if _is_imperative(text) and rng.random() < 0.35:
        text = _indirect(text, rng)
    if rng.random() < 0.3:
        text = f"{rng.choice(CONTEXT)} {text}"
    if rng.random() < 0.35:
        text = rng.choice(OPENERS) + _lower_first(text)
    if rng.random() < 0.35:
        text = _with_end(text) + rng.choice(TAILS)
    if rng.random() < 0.2:
        text = _literal_map(text, str.lower)
    if rng.random() < TYPO_RATE:
        text = _typo(text, rng)
    return text


def _is_imperative(text: str) -> bool:
    """Requests that start with a verb (or a politeness word before one), not questions like 'What is'."""
    first = text.split(" ", 1)[0].lower()
    return not text.startswith("{") and first not in {"what", "who", "when", "which", "i", "i'd", "my", "hi!",
                                                       "hello", "quick", "task", "event", "email", "customer",
                                                       "crm", "crm:", "new", "fwd", "follow"}


def _indirect(text: str, rng: Random) -> str:
    lead = rng.choice(INDIRECT)
    body = _IMPERATIVE_LEAD.sub("", text)
    body = _lower_first(body).rstrip(".!")
    if lead.strip().endswith("you") and not body.endswith("?"):
        body += "?"
    return lead + body


def _with_end(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


def _lower_first(text: str) -> str:
    if text.startswith("{") or text[:2].isupper():  # a slot, or an acronym such as CRM
        return text
    return text[:1].lower() + text[1:]


def _literal_map(text: str, change) -> str:
    """Apply `change` to the literal parts of a phrasing, leaving `{slot}` names alone."""
    return "".join(part if _SLOT.fullmatch(part) else change(part) for part in _SLOT.split(text))


def _typo(text: str, rng: Random) -> str:
    """Swap two neighbouring letters inside one literal word of five or more letters."""
    parts = _SLOT.split(text)
    literal = [i for i, part in enumerate(parts) if not _SLOT.fullmatch(part) and _WORD.search(part)]
    if not literal:
        return text
    index = rng.choice(literal)
    words = list(_WORD.finditer(parts[index]))
    word = rng.choice(words)
    at = rng.randrange(1, len(word.group()) - 2)
    letters = list(word.group())
    letters[at], letters[at + 1] = letters[at + 1], letters[at]
    part = parts[index]
    parts[index] = part[:word.start()] + "".join(letters) + part[word.end():]
    return "".join(parts)
