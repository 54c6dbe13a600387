"""The commands the README prints, read from the README itself (shared by the parse test and `make docs-check`).

Three places hold commands: lines of ```bash blocks, and `appliance …` or `make …` spans in backticks. In the
command table `a\\|b` offers alternatives; each one is a command. `<placeholders>` and upper-case metavars
(P, RUN, CKPT) stand for values the reader supplies.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"```bash\n(.*?)```", re.S)
_SPAN = re.compile(r"`(?:time )?(?:\.venv/bin/)?((?:appliance|make)(?: [^`]*)?)`")
_TOUR_PREFIX = "$A "


def _without_comment(line: str) -> str:
    return line.split(" #", 1)[0].strip()


def tour(text: str | None = None) -> list[str]:
    """The tour's `$A …` lines, in order, with `$A` left in place."""
    text = README.read_text() if text is None else text
    return [_without_comment(line) for block in _FENCE.findall(text) for line in block.splitlines()
            if line.startswith(_TOUR_PREFIX)]


def _expand_alternatives(command: str) -> list[str]:
    r"""`appliance tasks list\|check` → two commands; only the word holding `\|` varies."""
    words = command.replace("\\|", "|").split()
    for i, word in enumerate(words):
        if "|" in word:
            return [" ".join(words[:i] + [choice] + words[i + 1:]) for choice in word.split("|")]
    return [" ".join(words)]


def commands(text: str | None = None) -> list[str]:
    """Every `appliance …` and `make …` command the README shows (the tour's `$A` spelled `appliance`)."""
    text = README.read_text() if text is None else text
    found = ["appliance " + line[len(_TOUR_PREFIX):] for line in tour(text) if line != _TOUR_PREFIX.strip()]
    for block in _FENCE.findall(text):
        found += [_without_comment(line) for line in block.splitlines() if line.startswith(("make ", "appliance "))]
    for span in _SPAN.findall(text):
        found += _expand_alternatives(span.strip())
    return list(dict.fromkeys(c.strip() for c in found))


def argv(command: str, values: dict[str, str]) -> list[str]:
    """The command's words after `appliance`, placeholders replaced by `values` (name without brackets)."""
    filled = re.sub(r"<([^>]+)>", lambda m: values.get(m.group(1), m.group(1)), command)
    return shlex.split(filled)[1:]
