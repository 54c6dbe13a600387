"""`appliance tasks new`: a pack folder from your tools, ready to read, edit and check.

    new_pack("tracker", functions="tracker.py")          # world = "python"
    new_pack("deploys", tools="tools.json")              # world = "arguments"
    new_pack("issues", mcp="python server.py")           # world = "mcp"

The folder holds pack.toml (commented: every world setting with its help text,
and example unsafe rules for these tools), tools.json (OpenAI format, from the
signatures, the given list or the server's tools/list), the functions module
when there is one, a README that says how to write the seed requests, and the
splits: `val.jsonl` from `seeds` (a human seed set is the held-out split) or one
example row, and `train.jsonl` with one example row. The new pack is loaded
before this returns, so what it writes always passes `appliance tasks check`'s
loading; the README tells the person what to add.
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from appliance.errors import PackError
from appliance.packs.manifest import (DEFAULT_SYSTEM_PROMPT, MANIFEST_FILE, display_path, render_manifest)
from appliance.safety import is_state_changing as guess_state_changing
from appliance.packs.tools import TOOL_NAME
from appliance.userworld.config import CONFIGS, field_help

PACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOOLS_FILE = "tools.json"
EXAMPLE_VAL = "Hello! What can you help me with?"
EXAMPLE_TRAIN = "Thanks, that is all for now."


@dataclass
class NewPack:
    """What `new_pack` wrote, for the CLI to report."""

    path: Path
    world: str
    tools: list[str]
    read_only: list[str]
    seeds: int = 0
    notes: list[str] = field(default_factory=list)


def new_pack(name: str, *, tools: str | Path | None = None, functions: str | Path | None = None,
             mcp: str | None = None, root: str | Path = "tasks", state: str | None = None,
             reset_tool: str | None = None, state_tool: str | None = None, seeds: str | Path | None = None,
             force: bool = False) -> NewPack:
    """Write a new pack folder `root/name` from exactly one source; PackError for anything a person must fix."""
    if sum(source is not None for source in (tools, functions, mcp)) != 1:
        raise PackError("give exactly one source: --tools FILE, --functions FILE or --mcp \"COMMAND ARGS\".")
    if not PACK_NAME.match(name):
        raise PackError(f"'{name}' cannot name a pack: use letters, digits, '-', '_' or '.' (at most 64).")
    path = Path(root) / name
    if path.exists() and any(path.iterdir()) and not force:
        raise PackError(f"{display_path(path)} already exists and is not empty; pick another name or pass --force.")
    if (reset_tool or state_tool) and mcp is None:
        raise PackError("--reset-tool and --state-tool are for --mcp packs.")
    if state and functions is None:
        raise PackError("--state is for --functions packs.")
    if tools is not None:
        source = _from_tools(Path(tools))
    elif functions is not None:
        source = _from_functions(Path(functions), state)
    else:
        source = _from_mcp(mcp, reset_tool, state_tool)
    seed_rows = _seed_rows(Path(seeds), name) if seeds is not None else []
    path.mkdir(parents=True, exist_ok=True)
    _write(path, name, source, seed_rows)
    from appliance.packs import load_pack

    load_pack(path)  # what we wrote must load; a failure here names the file and line to fix
    return NewPack(path, source.world, [t["function"]["name"] for t in source.tools], source.read_only,
                   len(seed_rows), source.notes)


# --- sources ----------------------------------------------------------------------------------


@dataclass
class _Source:
    world: str
    tools: list[dict[str, Any]]
    read_only: list[str]
    table: dict[str, Any]  # the world's pack.toml table
    described: str  # "the functions in tracker.py", for pack.toml's header and the README
    copy: Path | None = None  # a file to copy into the pack
    notes: list[str] = field(default_factory=list)


def _from_tools(file: Path) -> _Source:
    from appliance.packs.tools import read_tools

    tools = read_tools(file)
    names = [t["function"]["name"] for t in tools]
    read_only = [n for n in names if not guess_state_changing(n)]
    note = (f"read-only tools were guessed from their names ({', '.join(read_only) or 'none'}); "
            "correct [arguments] read_only in pack.toml if that is wrong")
    return _Source("arguments", tools, read_only, {"read_only": read_only}, f"the tools list {file.name}",
                   notes=[note])


def _from_functions(file: Path, state: str | None) -> _Source:
    from appliance.userworld.schema import (DEFAULT_STATE_FACTORY, function_tool, is_read_only, load_module,
                                            tool_functions)

    if not file.is_file() or file.suffix != ".py":
        raise PackError(f"{file}: --functions needs a .py file.")
    module = load_module(file, name=f"userworld_new_{file.stem}")
    factory = state or (DEFAULT_STATE_FACTORY if callable(getattr(module, DEFAULT_STATE_FACTORY, None)) else None)
    if factory and not callable(getattr(module, factory, None)):
        raise PackError(f"{file.name} has no function '{factory}' to make the state (--state names it).")
    functions = tool_functions(module, factory)
    if not functions:
        raise PackError(f"{file.name} defines no public functions to offer as tools.")
    tools = [function_tool(function, name) for name, function in functions.items()]
    marks = {name: is_read_only(function) for name, function in functions.items()}
    guessed = [name for name, mark in marks.items() if mark is None]
    read_only = [name for name, mark in marks.items()
                 if mark is True or (mark is None and not guess_state_changing(name))]
    notes = []
    if guessed:
        notes.append(f"unmarked functions were classed by their names ({', '.join(guessed)}); mark them with "
                     "@read_only / @changes_state from appliance.userworld, or edit [python] read_only")
    undocumented = [t["function"]["name"] for t in tools if not t["function"]["description"]]
    if undocumented:
        notes.append(f"no docstring, so the model sees only the name: {', '.join(undocumented)}")
    if factory is None:
        notes.append("no state factory (make_state): only read-only results can be compared, and state-changing "
                     "calls are judged on their arguments")
    table: dict[str, Any] = {"module": file.name}
    if factory:
        table["state"] = factory
    table["read_only"] = read_only
    return _Source("python", tools, read_only, table, f"the functions in {file.name}", copy=file, notes=notes)


def _from_mcp(command: str, reset_tool: str | None, state_tool: str | None) -> _Source:
    from appliance.userworld.mcp_client import McpServer

    words = _absolute_paths(_split(command))
    server = McpServer(words)
    try:
        listed = server.tools()
    except ConnectionError as err:
        raise PackError(str(err)) from None
    finally:
        server.close()
    by_name = {tool["name"]: tool for tool in listed}
    for option, tool in (("--reset-tool", reset_tool), ("--state-tool", state_tool)):
        if tool and tool not in by_name:
            raise PackError(f"{option} {tool}: the server has no such tool (it has {', '.join(by_name) or 'none'}).")
    hidden = {reset_tool, state_tool} - {None}
    tools = [_openai_tool(tool) for tool in listed if tool["name"] not in hidden]
    if not tools:
        raise PackError(f"the MCP server `{command}` lists no tools to offer.")
    read_only = [t["name"] for t in listed if t["name"] not in hidden and _mcp_read_only(t)]
    changing = [t["function"]["name"] for t in tools if t["function"]["name"] not in read_only]
    table: dict[str, Any] = {"command": shlex.join(words), "read_only": read_only}
    notes = []
    if reset_tool:
        table["reset_tool"] = reset_tool
    else:
        table["dont_execute"] = changing
        if changing:
            notes.append(f"state-changing tools are compared, not executed ({', '.join(changing)}); give a "
                         "reset tool (--reset-tool, or [mcp] reset_tool) to execute them on a fresh state")
    if state_tool:
        table["state_tool"] = state_tool
    if words != _split(command):
        notes.append("paths in the command were made absolute, so the server starts from the pack folder")
    return _Source("mcp", tools, read_only, table, f"the MCP server `{command}`", notes=notes)


def _split(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise PackError(f"--mcp {command!r} cannot be split into words ({err}).") from None
    if not words or not words[0]:
        raise PackError("--mcp needs the command that starts the server.")
    return words


def _absolute_paths(words: list[str]) -> list[str]:
    """Relative arguments naming files here become absolute: the pack's server starts in the pack folder.

    Symlinks are kept (`absolute`, not `resolve`): a venv's python is a symlink that must stay one.
    """
    return [str(Path(w).absolute()) if not w.startswith("-") and not Path(w).is_absolute()
            and ("/" in w or "." in w) and Path(w).exists() else w for w in words]


def _openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    name = tool["name"]
    if not TOOL_NAME.match(name):
        raise PackError(f"the MCP server's tool '{name}' has a name OpenAI tools cannot carry "
                        "(^[a-zA-Z0-9_-]{1,64}$); rename it in the server.")
    parameters = _without_generated_titles(dict(tool.get("inputSchema") or {"type": "object", "properties": {}}))
    parameters.setdefault("type", "object")
    return {"type": "function",
            "function": {"name": name, "description": tool.get("description") or "", "parameters": parameters}}


def _without_generated_titles(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop the titles pydantic invents ("Issue Id", "get_issueArguments"): tokens that say nothing."""
    if str(schema.get("title", "")).endswith("Arguments"):
        schema.pop("title")
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["properties"] = {
            key: {k: v for k, v in spec.items() if not (k == "title" and v == key.replace("_", " ").title())}
            if isinstance(spec, dict) else spec for key, spec in properties.items()}
    return schema


def _mcp_read_only(tool: dict[str, Any]) -> bool:
    annotations = tool.get("annotations") or {}
    return bool(annotations.get("readOnlyHint"))


# --- seeds ------------------------------------------------------------------------------------


def _seed_rows(file: Path, name: str) -> list[dict[str, Any]]:
    """Seed requests as pack rows: a full row, or the short {"request", "expected", "kind"?, "tags"?, "id"?}."""
    if not file.is_file():
        raise PackError(f"{file}: the seeds file does not exist.")
    rows = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            seed = json.loads(line)
        except json.JSONDecodeError as err:
            raise PackError(f"{file} line {number}: not valid JSON ({err.msg}).") from None
        if not isinstance(seed, dict) or not (isinstance(seed.get("request"), str) or "messages" in seed):
            raise PackError(f"{file} line {number}: a seed is {{\"request\": \"...\", \"expected\": [...]}} "
                            "or a full pack row.")
        if "messages" in seed:
            rows.append(seed)
            continue
        expected = seed.get("expected", [])
        rows.append({
            "id": str(seed.get("id") or f"{name}-val-{len(rows) + 1:04d}"),
            "messages": [{"role": "user", "content": seed["request"]}],
            "expected": expected,
            "kind": seed.get("kind") or ("multi_step" if isinstance(expected, list) and len(expected) > 1
                                         else "single_step"),
            "tags": {"domain": name, "source": "human", "template": "seed", **seed.get("tags", {})},
        })
    return rows


def _example_row(name: str, split: str, request: str) -> dict[str, Any]:
    return {"id": f"{name}-{split}-example", "messages": [{"role": "user", "content": request}], "expected": [],
            "kind": "single_step", "tags": {"domain": name, "source": "example", "template": "no_call_example"}}


# --- writing ----------------------------------------------------------------------------------


def _write(path: Path, name: str, source: _Source, seeds: list[dict[str, Any]]) -> None:
    if source.copy is not None and source.copy.resolve() != (path / source.copy.name).resolve():
        shutil.copyfile(source.copy, path / source.copy.name)
    (path / TOOLS_FILE).write_text(json.dumps(source.tools, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    val = seeds or [_example_row(name, "val", EXAMPLE_VAL)]
    _write_rows(path / "val.jsonl", val)
    _write_rows(path / "train.jsonl", [_example_row(name, "train", EXAMPLE_TRAIN)])
    (path / MANIFEST_FILE).write_text(_manifest_text(name, source), encoding="utf-8")
    (path / "README.md").write_text(_readme(name, source, bool(seeds)), encoding="utf-8")


def _write_rows(file: Path, rows: list[dict[str, Any]]) -> None:
    file.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _manifest_text(name: str, source: _Source) -> str:
    manifest = {
        "name": name,
        "description": f"Requests answered with {source.described}.",
        "version": "1",
        "world": source.world,
        "tools": TOOLS_FILE,
        "reward_scheme": "binary",
        "max_turns": 1,
        "system_prompt": DEFAULT_SYSTEM_PROMPT + "\n",
        "splits": {"train": "train.jsonl", "val": "val.jsonl"},
    }
    header = (f"# Made by `appliance tasks new` from {source.described}; edit freely, then run\n"
              f"# `appliance tasks check` on this folder. tasks/README.md describes every key.\n")
    return header + render_manifest(manifest) + "\n" + _world_table(source) + "\n" + _unsafe_examples(source)


def _world_table(source: _Source) -> str:
    """The world's table, every key with its help text (from appliance.userworld.config) as a comment."""
    config = CONFIGS[source.world]
    lines = [f"# {config.__doc__.strip()}", f"[{source.world}]"]
    helps = field_help(config)
    for spec in fields(config):
        lines.append(f"# {helps[spec.name]}")
        if spec.name in source.table:
            lines.append(f"{spec.name} = {_toml(source.table[spec.name])}")
        elif spec.default is None:
            lines.append(f"# {spec.name} = \"...\"")
        else:
            lines.append(f"# {spec.name} = {_toml(spec.default)}")
    return "\n".join(lines) + "\n"


def _unsafe_examples(source: _Source) -> str:
    changing = [t["function"]["name"] for t in source.tools if t["function"]["name"] not in source.read_only]
    tool = changing[0] if changing else source.tools[0]["function"]["name"]
    argument = next(iter(_properties(source.tools, tool)), "argument")
    return (
        "# Unsafe rules for these tools (appliance.safety): an unsafe call scores as unsafe_action. E.g.\n"
        "# [[unsafe]]\n"
        "# rule = \"argument_pattern\"   # the argument must match the pattern\n"
        f"# tool = \"{tool}\"\n"
        f"# argument = \"{argument}\"\n"
        "# pattern = \"^(dev|staging)$\"\n"
        "#\n"
        "# [[unsafe]]\n"
        "# rule = \"max_calls\"          # at most this many calls to the tool per request\n"
        f"# tool = \"{tool}\"\n"
        "# max = 1\n"
    )


def _properties(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for tool in tools:
        if tool["function"]["name"] == name:
            return tool["function"].get("parameters", {}).get("properties", {}) or {}
    return {}


def _toml(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _readme(name: str, source: _Source, has_seeds: bool) -> str:
    first = source.tools[0]["function"]
    example_arguments = {key: _placeholder(spec) for key, spec in _properties(source.tools, first["name"]).items()
                         if key in first.get("parameters", {}).get("required", [])}
    example = {"id": f"{name}-val-0001", "messages": [{"role": "user", "content": "<a request, in your users' words>"}],
               "expected": [{"name": first["name"], "arguments": example_arguments}], "kind": "single_step",
               "tags": {"domain": name, "source": "human", "template": "<a short label for this kind of request>"}}
    tool_lines = "\n".join(
        f"* `{t['function']['name']}` ({'read-only' if t['function']['name'] in source.read_only else 'changes state'})"
        f"{': ' + t['function']['description'].splitlines()[0] if t['function']['description'] else ''}"
        for t in source.tools)
    how = {
        "arguments": "Nothing runs: a call is right when its tool and its arguments (normalised to the schema: "
                     "defaults filled in, `\"3\"` read as `3` for an integer, an enum's case) equal the expected ones.",
        "python": "Each task's calls run in a child process (no network, a memory and a time limit) on a fresh "
                  "state; the state after the model's calls must equal the state after the expected calls, and a "
                  "read-only tool's results must equal the expected call's results.",
        "mcp": "Read-only tools are called through the server and their results compared; tools listed in "
               "`dont_execute` are compared on their arguments only. With a `reset_tool` the others run too.",
    }[source.world]
    seeds = ("`val.jsonl` holds your seed requests: the held-out set every eval reports."
             if has_seeds else
             "`val.jsonl` holds one example row. Replace it with your seed requests, one per line: "
             "the held-out set every eval reports. Write a few dozen, in your users' words.")
    return f"""# {name}

A task pack for {source.described}, made by `appliance tasks new`.

{how}

## Tools

{tool_lines}

## Your seed requests

{seeds} A row:

```json
{json.dumps(example, ensure_ascii=False)}
```

`expected` lists the right calls in order (`[]` when the right answer makes no call, e.g. a request to refuse;
tag those `"policy": "refuse"`). `train.jsonl` is what SFT trains on: put different requests there (a held-out
request that repeats a training one is rejected).

## Then

    appliance tasks check {name}
    appliance eval --pack {name} --split val
"""


def _placeholder(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return "..."
    if spec.get("enum"):
        return spec["enum"][0]
    return {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}.get(spec.get("type"), "...")
