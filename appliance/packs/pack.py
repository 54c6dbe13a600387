"""A loaded task pack: manifest, tools and splits, validated in full on load.

Loading reads every split, so a pack that loads is a pack whose every row
parses, whose every expected call fits its tool's schema, whose ids are unique
and whose held-out requests do not leak from train. Tasks are kept in memory
(a few thousand rows) and handed out from that cache.
"""
from __future__ import annotations

import hashlib
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from appliance.errors import PackError
from appliance.packs.leakage import find_collisions, normalise
from appliance.packs.manifest import EVAL_SPLITS, MANIFEST_FILE, TRAIN_SPLITS, display_path, line_of, read_manifest
from appliance.packs import validation_cache
from appliance.packs.rows import RowRules, read_split
from appliance.packs.tools import ToolIndex, read_tools
from appliance.task import Task
from appliance.userworld.config import check_world_references, world_files

SUBSET_SPLIT = "gate"
# WorkBench's tool domains (tool names start with `<domain>_`); the directory is shown with each.
TOOL_DOMAINS = ("analytics", "calendar", "customer_relationship_manager", "email", "project_management")


class Pack:
    """A validated task pack. Build one with `load_pack`."""

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        tools: list[dict[str, Any]],
        split_rows: dict[str, list[tuple[int, Task]]],
    ) -> None:
        self.path = path
        self.manifest = manifest
        self.tools = tools
        self._split_rows = split_rows
        self._by_id = {task.id: task for rows in split_rows.values() for _, task in rows}

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool["function"]["name"] for tool in self.tools)

    @property
    def unsafe_rules(self) -> list[dict[str, Any]]:
        return [dict(rule) for rule in self.manifest["unsafe"]]

    @property
    def reward_scheme(self) -> str:
        return self.manifest["reward_scheme"]

    @property
    def world(self) -> str:
        return self.manifest["world"]

    @property
    def max_turns(self) -> int:
        return self.manifest["max_turns"]

    @property
    def system_prompt(self) -> str:
        return self.manifest["system_prompt"]

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.manifest["splits"])

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """The tools shown to the model for this task (the same for eval, SFT and GRPO).

        Per-row tools win (BFCL). With `tool_selection = "domain"` a task sees its
        domain's tools plus the company directory, like WorkBench's "domains"
        setting; this keeps CPU prompts short. A task without a domain (chit-chat,
        a refusal) sees one domain's tools, picked by a stable hash of its id: a
        listing like every other task's, so the list itself never says "no call"
        (showing all 27 tools would, and would triple the prompt).
        """
        if task.tools is not None:
            return list(task.tools)
        if not self.lists_tools_by_domain:
            return self.tools
        domains = _task_domains(task)
        if not domains:
            domains = (_stable_choice(TOOL_DOMAINS, task.id),)
        return self._domain_listing(domains)

    @property
    def lists_tools_by_domain(self) -> bool:
        """Whether a task is shown its domain's tools (`tool_selection = "domain"`) rather than all of them."""
        return self.manifest["tool_selection"] == "domain"

    def other_domain_tools(self, task: Task) -> list[dict[str, Any]]:
        """The listing a task of another domain would see: one domain `task` does not use (a stable pick by its id)
        plus the directory. Only for packs that list tools by domain (`tool_selection = "domain"`)."""
        if task.tools is not None or not self.lists_tools_by_domain:
            raise PackError(f"pack '{self.name}' does not list its tools by domain, so it has no other domain's "
                            f"listing to show (its manifest's tool_selection is "
                            f"'{self.manifest['tool_selection']}').")
        others = tuple(d for d in TOOL_DOMAINS if d not in _task_domains(task))
        return self._domain_listing((_stable_choice(others, f"other-domain:{task.id}"),))

    def _domain_listing(self, domains: tuple[str, ...]) -> list[dict[str, Any]]:
        prefixes = tuple(f"{d}_" for d in domains) + ("company_directory_",)
        return [t for t in self.tools if t["function"]["name"].startswith(prefixes)]

    def tasks(self, split: str) -> list[Task]:
        if split not in self._split_rows:
            raise PackError(f"pack '{self.name}' has no split '{split}'; it has {', '.join(self.splits)}.")
        return [task for _, task in self._split_rows[split]]

    def task(self, task_id: str) -> Task:
        if task_id not in self._by_id:
            raise PackError(f"pack '{self.name}' has no task with id '{task_id}'.")
        return self._by_id[task_id]

    def line_of(self, split: str, task_id: str) -> int:
        """The 1-based line of a task in its split file (for messages that point at data)."""
        return next(number for number, task in self._split_rows[split] if task.id == task_id)

    def data_hash(self) -> str:
        """sha256 over the manifest, the tools file, the world's module (python packs) and every split file."""
        digest = hashlib.sha256()
        tools_file = [self.manifest["tools"]] if "tools" in self.manifest else []
        files = [MANIFEST_FILE, *tools_file, *world_files(self.manifest), *self.manifest["splits"].values()]
        for file_name in files:
            digest.update(file_name.encode() + b"\0")
            digest.update((self.path / file_name).read_bytes() + b"\0")
        return digest.hexdigest()

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counts per split: tasks, kinds, domains, sources, refusals and no-call tasks."""
        return {split: split_stats(self.tasks(split)) for split in self.splits}

    def __repr__(self) -> str:
        sizes = ", ".join(f"{s}={len(self._split_rows[s])}" for s in self.splits)
        return f"Pack({self.name!r}, {sizes})"


def split_stats(tasks: list[Task]) -> dict[str, Any]:
    return {
        "count": len(tasks),
        "kinds": dict(sorted(Counter(t.kind for t in tasks).items())),
        "domains": dict(sorted(Counter(str(t.tags.get("domain", "unknown")) for t in tasks).items())),
        "sources": dict(sorted(Counter(str(t.tags.get("source", "unknown")) for t in tasks).items())),
        "policy": {"refuse": sum(t.out_of_policy for t in tasks)},
        "no_call": sum(not t.expected for t in tasks),
    }


def resolve_pack_dir(name_or_path: str | Path, root: str | Path = "tasks") -> Path:
    candidate = Path(name_or_path)
    if (candidate / MANIFEST_FILE).is_file():
        return candidate
    named = Path(root) / str(name_or_path)
    if (named / MANIFEST_FILE).is_file():
        return named
    found = ", ".join(list_packs(root)) or "none"
    raise PackError(
        f"no task pack '{name_or_path}' found (packs in {display_path(Path(root))}: {found}); "
        "pass a pack folder or one of those names."
    )


def list_packs(root: str | Path = "tasks") -> list[str]:
    """Names of the pack folders under `root` (folders holding a pack.toml), sorted."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST_FILE).is_file())


def load_pack(name_or_path: str | Path, root: str | Path = "tasks") -> Pack:
    """Load and fully validate a pack by name (a folder under `root`) or by path."""
    path = resolve_pack_dir(name_or_path, root)
    manifest = read_manifest(path)
    tools = read_tools(path / manifest["tools"]) if "tools" in manifest else []
    tool_names = [tool["function"]["name"] for tool in tools] if tools else None
    _check_unsafe_rule_names(manifest, path, tool_names)
    check_world_references(manifest, path, tool_names or ())
    index = ToolIndex(tools) if tools else None
    bfcl = manifest["scorer"] == "bfcl"
    split_rows = {}
    for split, file in manifest["splits"].items():
        validated = validation_cache.is_validated(path / file)
        rules = RowRules(allow_system=bfcl, check_expected_schema=not bfcl, check_tool_schemas=not validated)
        split_rows[split] = read_split(path / file, index, rules)
        if not validated:
            validation_cache.mark_validated(path / file)
    _check_unique_ids(split_rows, manifest, path)
    _check_gate_subset(split_rows, manifest, path)
    _check_leakage(split_rows, manifest, path)
    return Pack(path, manifest, tools, split_rows)


def _check_unsafe_rule_names(manifest: dict[str, Any], path: Path, tool_names: list[str] | None) -> None:
    try:
        from appliance.safety import validate_rules
    except ImportError:  # the verifier is optional for loading; its rule names are checked when present
        return
    try:
        validate_rules(manifest["unsafe"], tool_names)
    except PackError as error:
        manifest_file = path / MANIFEST_FILE
        line = line_of(manifest_file.read_text(encoding="utf-8"), "unsafe")
        sentence = str(error).rstrip(".") + "."
        raise PackError(f"{display_path(manifest_file)} line {line}: {sentence}") from None


def _check_unique_ids(split_rows: dict[str, list[tuple[int, Task]]], manifest: dict[str, Any], path: Path) -> None:
    first_seen: dict[str, tuple[str, int]] = {}
    for split, rows in split_rows.items():
        if split == SUBSET_SPLIT:
            continue  # the gate split is a fixed subset of test, so its ids repeat by design
        file_name = manifest["splits"][split]
        for number, task in rows:
            if task.id in first_seen:
                other_file, other_line = first_seen[task.id]
                raise PackError(
                    f"{display_path(path / file_name)} line {number}: id '{task.id}' is already used "
                    f"by {other_file} line {other_line}; ids must be unique across all splits."
                )
            first_seen[task.id] = (file_name, number)


def _check_gate_subset(split_rows: dict[str, list[tuple[int, Task]]], manifest: dict[str, Any], path: Path) -> None:
    if SUBSET_SPLIT not in split_rows:
        return
    others = {task.id for split, rows in split_rows.items() if split != SUBSET_SPLIT for _, task in rows}
    for number, task in split_rows[SUBSET_SPLIT]:
        if task.id not in others:
            raise PackError(f"{display_path(path / manifest['splits'][SUBSET_SPLIT])} line {number}: gate task "
                            f"'{task.id}' is not in any other split; the gate split must be a subset of test.")


def _check_leakage(split_rows: dict[str, list[tuple[int, Task]]], manifest: dict[str, Any], path: Path) -> None:
    """No held-out request (nearly) repeats a training request, and GRPO's pool never repeats SFT's."""
    for train_split in (name for name in TRAIN_SPLITS if split_rows.get(name)):
        train = split_rows[train_split]
        train_texts = [task.request for _, task in train]
        for split in EVAL_SPLITS:
            rows = split_rows.get(split, [])
            collisions = find_collisions(train_texts, [task.request for _, task in rows])
            if collisions:
                _raise_leak(collisions, rows, train, split, train_split, manifest, path)
    if split_rows.get("train") and split_rows.get("train_rl"):
        sft = {normalise(task.request): number for number, task in split_rows["train"]}
        for number, task in split_rows["train_rl"]:
            if normalise(task.request) in sft:
                raise PackError(
                    f"{display_path(path / manifest['splits']['train_rl'])} line {number}: the request of "
                    f"'{task.id}' repeats {manifest['splits']['train']} line {sft[normalise(task.request)]}; "
                    "the RL pool must hold requests SFT never trained on.")


def _raise_leak(collisions: list[Any], rows: list[tuple[int, Task]], train: list[tuple[int, Task]], split: str,
                train_split: str, manifest: dict[str, Any], path: Path) -> None:
    first = collisions[0]
    eval_line, eval_task = rows[first.eval_index]
    train_line = train[first.train_index][0]
    how = "repeats" if first.exact else f"nearly repeats (Jaccard {first.similarity:.2f})"
    raise PackError(
        f"{display_path(path / manifest['splits'][split])} line {eval_line}: the request of "
        f"'{eval_task.id}' {how} {manifest['splits'][train_split]} line {train_line}; "
        f"held-out requests must not leak from training splits ({len(collisions)} such rows in {split})."
    )


def _task_domains(task: Task) -> tuple[str, ...]:
    """The tool domains a task's tags name (none for chit-chat, a refusal or a multi-domain row without a list)."""
    domains = task.tags.get("domains") or [task.tags.get("domain")]
    return tuple(d for d in domains if d and d not in ("none", "multi_domain"))


def _stable_choice(options: tuple[str, ...], key: str) -> str:
    return options[zlib.crc32(key.encode("utf-8")) % len(options)]
