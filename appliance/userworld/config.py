"""A pack's own world, as pack.toml declares it: the `[python]`, `[mcp]` and `[arguments]` tables.

    world = "python"                      world = "mcp"
    [python]                              [mcp]
    module = "tracker.py"                 command = "python server.py"
    state = "make_state"                  read_only = ["search_issues"]
    read_only = ["search_issues"]         dont_execute = ["delete_issue"]

Every field is declared once here, with its help text; the pack writer prints that
text as the comment above each key, and the manifest check reads the same
declarations, so the two never drift. A table is checked in two steps: its shape
when the manifest is read (`check_world_table`), and what it points at (the
module file, tool names) once the tools are loaded (`check_world_references`).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from appliance.errors import PackError

# The worlds this package runs; the manifest's WORLDS adds them to WorkBench's and "none".
USER_WORLDS = ("arguments", "python", "mcp")


def _help(text: str, default: Any = None, **extra: Any) -> Any:
    return field(default=default, metadata={"help": text, **extra})


@dataclass(frozen=True)
class ArgumentsConfig:
    """`world = "arguments"`: nothing runs; calls are compared on their schema-normalised arguments."""

    read_only: tuple[str, ...] = _help(
        "tools that only read (the rest are taken to change state; matters for multi-step tasks)", ())


@dataclass(frozen=True)
class PythonConfig:
    """`world = "python"`: the pack's own functions run in a sandboxed child process."""

    module: str = _help("the Python file with the tool functions, relative to the pack folder", "", required=True)
    state: str | None = _help(
        "the module's zero-argument function that returns a fresh state for each task; functions that take "
        "a `state` parameter receive it, and the state after the calls is what is compared")
    read_only: tuple[str, ...] = _help("tools that only read: their results are compared, not the state", ())
    timeout_s: float = _help("wall-clock seconds one task's calls may take before they count as hung", 5.0)
    memory_mb: int = _help("address-space limit of the child process, in MiB", 1024)


@dataclass(frozen=True)
class McpConfig:
    """`world = "mcp"`: calls go to an MCP server over stdio (restarted if it dies)."""

    command: str = _help("the command that starts the server (run in the pack folder)", "", required=True)
    read_only: tuple[str, ...] = _help("tools that only read: they are executed and their results compared", ())
    dont_execute: tuple[str, ...] = _help(
        "compare calls, don't execute: side-effecting tools judged on their arguments only", ())
    reset_tool: str | None = _help(
        "a server tool that restores the starting state, called before each task's calls (hidden from the model)")
    state_tool: str | None = _help(
        "a read-only server tool whose result is the state to compare after state-changing calls (hidden)")
    timeout_s: float = _help("seconds one tool call may take before it counts as hung (the server is restarted)",
                             10.0)
    startup_s: float = _help("seconds the server may take to start and answer tools/list", 30.0)


CONFIGS: dict[str, type] = {"arguments": ArgumentsConfig, "python": PythonConfig, "mcp": McpConfig}
_REQUIRED_TABLE = ("python", "mcp")


def field_help(config: type) -> dict[str, str]:
    """key -> help text, in declaration order (the pack writer's comments)."""
    return {f.name: f.metadata["help"] for f in fields(config)}


def world_config(manifest: dict[str, Any]) -> Any:
    """The typed table of the manifest's world (defaults filled in); None for workbench and none."""
    world = manifest["world"]
    config = CONFIGS.get(world)
    if config is None:
        return None
    table = dict(manifest.get(world, {}))
    for spec in fields(config):
        if isinstance(spec.default, tuple) and spec.name in table:
            table[spec.name] = tuple(table[spec.name])
    return config(**table)


def check_world_table(manifest: dict[str, Any], text: str, where: str) -> None:
    """The world tables' keys and value types; raise PackError naming the line."""
    from appliance.packs.manifest import line_of

    def fail(key: str, problem: str) -> PackError:
        line = line_of(text, key)
        return PackError(f"{where} line {line}: {problem}" if line else f"{where}: {problem}")

    world = manifest["world"]
    for name in CONFIGS:
        if name in manifest and name != world:
            raise fail(name, f"[{name}] is only read when world = '{name}'; this pack's world is '{world}'.")
    if world in _REQUIRED_TABLE and world not in manifest:
        raise PackError(f"{where}: world = '{world}' needs a [{world}] table (see tasks/README.md).")
    if world not in CONFIGS:
        return
    table = manifest.get(world, {})
    specs = {f.name: f for f in fields(CONFIGS[world])}
    for key, value in table.items():
        spec = specs.get(key)
        if spec is None:
            raise fail(key, f"[{world}] has no key '{key}'; its keys are {', '.join(specs)}.")
        problem = _value_problem(spec, value)
        if problem:
            raise fail(key, f"[{world}] '{key}' {problem}.")
    for key, spec in specs.items():
        if spec.metadata.get("required") and not table.get(key):
            raise fail(world, f"[{world}] needs '{key}': {spec.metadata['help']}.")
    if world == "mcp":
        try:
            words = shlex.split(table["command"])
        except ValueError as err:
            raise fail("command", f"[mcp] 'command' cannot be split into words ({err}).") from None
        if not words or not words[0]:
            raise fail("command", "[mcp] 'command' is empty.")


def _value_problem(spec: Any, value: Any) -> str:
    """What is wrong with one value, read from the field's default's type; "" when nothing is."""
    default, number = spec.default, isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            return "must be an array of tool names"
    elif isinstance(default, float):
        if not number or value <= 0:
            return "must be a number of seconds above 0"
    elif isinstance(default, int):
        if not number or not isinstance(value, int) or value < 64:
            return "must be a whole number of MiB, at least 64"
    elif not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    return ""


def check_world_references(manifest: dict[str, Any], pack_dir: Path, tool_names: Iterable[str]) -> None:
    """The files and tool names a world table points at exist; raise PackError naming what is missing."""
    from appliance.packs.manifest import MANIFEST_FILE, display_path

    config = world_config(manifest)
    if config is None:
        return
    where = display_path(pack_dir / MANIFEST_FILE)
    world = manifest["world"]
    names = frozenset(tool_names)
    hidden = {getattr(config, key, None) for key in ("reset_tool", "state_tool")} - {None}
    for key in ("read_only", "dont_execute"):
        for name in getattr(config, key, ()):
            if name not in names:
                raise PackError(f"{where}: [{world}] {key} names '{name}', which is not in the pack's tools.")
    for name in hidden:
        if name in names:
            raise PackError(f"{where}: [mcp] '{name}' is a reset or state tool, so the model must not see it; "
                            "remove it from the tools file.")
    if world == "python":
        module = pack_dir / config.module
        if not module.is_file() or module.suffix != ".py":
            raise PackError(f"{where}: [python] module '{config.module}' is not a .py file in the pack folder.")


def world_files(manifest: dict[str, Any]) -> list[str]:
    """Files of the pack folder the world runs (part of the pack's data hash)."""
    config = world_config(manifest)
    return [config.module] if isinstance(config, PythonConfig) else []
