"""The pack manifest, `pack.toml`: read and checked with tomllib, written by `render_manifest`.

A manifest is small and hand-editable, so every mistake is reported as one
sentence naming the file and the line of the offending key.
"""
from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from appliance.errors import PackError
from appliance.userworld.config import USER_WORLDS, check_world_table

MANIFEST_FILE = "pack.toml"
DEFAULT_MAX_TURNS = 6
# workbench: calls replay on appliance.world; none: nothing runs (scored elsewhere, e.g. BFCL);
# arguments, python, mcp: a pack's own tools (appliance.userworld), configured in a table of that name.
WORLDS = ("workbench", "none", *USER_WORLDS)
REGRESSION_SPLIT = "regression"
# Who uses each split, as `appliance tasks stats` and the cockpit's Home show it.
SPLIT_ROLES = {
    "train": "SFT and DPO train on it",
    "train_rl": "GRPO trains on it (wordings and intents SFT never saw)",
    "dev": "settings are chosen on it",
    "val": "held out: reported",
    "test": "held out: reported",
    "gate": "held out: the promotion gate's fixed subset",
    REGRESSION_SPLIT: "labelled failures (tasks from-failures): never trained on, gated on",
}
SPLIT_NAMES = tuple(SPLIT_ROLES)
TRAIN_SPLITS = ("train", "train_rl")
EVAL_SPLITS = ("dev", "val", "test", "gate", REGRESSION_SPLIT)
REPORTED_SPLITS = ("val", "test")
SCORERS = ("verifier", "bfcl")
TOOL_SELECTIONS = ("all", "domain")
# Used when a pack (BFCL) carries per-row tools and no system prompt of its own.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that can call functions. To call functions, reply with only JSON: one object "
    '{"name": "<function name>", "arguments": {...}} or a list of such objects for several calls. '
    "If none of the functions fits the request, say so in plain words without a call."
)

# key -> (python type(s), required)
_TOP_LEVEL: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "name": (str, True),
    "description": (str, True),
    "version": (str, True),
    "world": (str, True),
    "tools": (str, False),  # absent when every row carries its own "tools" (BFCL)
    "reward_scheme": (str, True),
    "max_turns": (int, False),
    "system_prompt": (str, False),
    "scorer": (str, False),  # verifier (default) | bfcl
    "tool_selection": (str, False),  # all (default) | domain: the task's domain tools + the directory
    "source": (str, False),
    "splits": (dict, True),
    "unsafe": (list, False),
    "slots": (dict, False),  # slot name -> values, for `appliance tasks expand` (appliance.userworld.expand)
    **{world: (dict, False) for world in USER_WORLDS},  # the world's own settings (appliance.userworld.config)
}
_TYPE_WORDS = {str: "a string", int: "an integer", dict: "a table", list: "an array of tables"}


def display_path(path: Path) -> str:
    """The path as a person typed it: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def line_of(text: str, key: str) -> int | None:
    """The first line that assigns `key` (or opens table `[key]`), for error messages."""
    pattern = re.compile(rf"^[ \t]*(\[\[?[ \t]*{re.escape(key)}[ \t]*\]\]?|{re.escape(key)}[ \t]*=)", re.M)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def read_manifest(pack_dir: Path) -> dict[str, Any]:
    """Parse and check `pack.toml`; return it with defaults filled in."""
    path = pack_dir / MANIFEST_FILE
    where = display_path(path)
    if not path.is_file():
        raise PackError(f"{where}: no manifest found; a pack folder needs a pack.toml (see tasks/README.md).")
    text = path.read_text(encoding="utf-8")
    try:
        manifest = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PackError(f"{where}: not valid TOML ({error}).") from None
    _check_keys(manifest, text, where)
    _check_values(manifest, text, where)
    manifest.setdefault("max_turns", DEFAULT_MAX_TURNS)
    manifest.setdefault("unsafe", [])
    manifest.setdefault("scorer", "verifier")
    manifest.setdefault("tool_selection", "all")
    manifest.setdefault("system_prompt", DEFAULT_SYSTEM_PROMPT)
    return manifest


def _fail(where: str, text: str, key: str, problem: str) -> PackError:
    line = line_of(text, key)
    location = f"{where} line {line}" if line else where
    return PackError(f"{location}: {problem}")


def _check_keys(manifest: dict[str, Any], text: str, where: str) -> None:
    for key in manifest:
        if key not in _TOP_LEVEL:
            known = ", ".join(sorted(_TOP_LEVEL))
            raise _fail(where, text, key, f"unknown key '{key}'; the manifest keys are {known}.")
    for key, (kind, required) in _TOP_LEVEL.items():
        if key not in manifest:
            if required:
                raise PackError(f"{where}: the required key '{key}' is missing.")
            continue
        value = manifest[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _fail(where, text, key, f"'{key}' must be {_TYPE_WORDS[kind]}, not {type(value).__name__}.")


def _check_values(manifest: dict[str, Any], text: str, where: str) -> None:
    if manifest["world"] not in WORLDS:
        raise _fail(where, text, "world", f"'world' must be one of {_quoted(WORLDS)}, not '{manifest['world']}'.")
    from appliance.rewards import SCHEMES  # the one list of schemes; lazily, rewards imports the verifier

    if manifest["reward_scheme"] not in SCHEMES:
        raise _fail(
            where, text, "reward_scheme",
            f"'reward_scheme' must be one of {_quoted(tuple(SCHEMES))}, not '{manifest['reward_scheme']}'.",
        )
    if manifest.get("max_turns", DEFAULT_MAX_TURNS) < 1:
        raise _fail(where, text, "max_turns", "'max_turns' must be at least 1.")
    if not manifest["name"].strip() or not manifest.get("system_prompt", "x").strip():
        raise _fail(where, text, "name", "'name' and 'system_prompt' must not be empty.")
    for key, options in (("scorer", SCORERS), ("tool_selection", TOOL_SELECTIONS)):
        if key in manifest and manifest[key] not in options:
            raise _fail(where, text, key, f"'{key}' must be one of {_quoted(options)}, not '{manifest[key]}'.")
    _check_splits(manifest["splits"], text, where)
    _check_unsafe(manifest.get("unsafe", []), text, where)
    check_world_table(manifest, text, where)


def _check_splits(splits: dict[str, Any], text: str, where: str) -> None:
    for split, file_name in splits.items():
        if split not in SPLIT_NAMES:
            raise _fail(where, text, split, f"unknown split '{split}'; splits are {_quoted(SPLIT_NAMES)}.")
        if not isinstance(file_name, str) or not file_name.endswith(".jsonl"):
            raise _fail(where, text, split, f"split '{split}' must name a .jsonl file.")
    if not any(split in splits for split in REPORTED_SPLITS):
        raise _fail(where, text, "splits", "[splits] needs a held-out 'val' or 'test' file to evaluate on.")


def _check_unsafe(entries: list[Any], text: str, where: str) -> None:
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
            raise _fail(where, text, "unsafe", "every [[unsafe]] entry needs a string 'rule' name.")


def _quoted(options: tuple[str, ...]) -> str:
    return ", ".join(f"'{o}'" for o in options)


# --- writing ---------------------------------------------------------------


def render_manifest(manifest: dict[str, Any]) -> str:
    """TOML text for a manifest (the subset we use), keys in a stable, readable order."""
    lines = []
    for key in ("name", "description", "version", "world", "tools", "reward_scheme", "max_turns", "scorer",
                "tool_selection", "source"):
        if key in manifest:
            lines.append(f"{key} = {_toml_value(manifest[key])}")
    lines.append(f"system_prompt = {_toml_multiline(manifest['system_prompt'])}")
    lines.append("")
    lines.append("[splits]")
    for split, file_name in manifest["splits"].items():
        lines.append(f"{split} = {_toml_value(file_name)}")
    for entry in manifest.get("unsafe", []):
        lines.append("")
        lines.append("[[unsafe]]")
        for key, value in entry.items():
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to the manifest")


def _toml_multiline(text: str) -> str:
    if "'''" in text:
        return _toml_value(text)
    return "'''\n" + text + "'''"
