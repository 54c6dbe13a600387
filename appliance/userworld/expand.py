"""`appliance tasks expand`: a pack's train split grown from a human seed set, which becomes val.

    expand_pack("tracker", seeds="seeds.jsonl", per_seed=8, seed=0)

A seed is one request a person wrote, with its expected calls:

    {"id": "assign", "request": "Give {issue} to {person}, please",
     "expected": [{"name": "assign", "arguments": {"issue_id": "{issue}", "assignee": "{person}"}}],
     "slots": {"issue": ["TRK-3", "TRK-7"],
               "person": [{"text": "Priya", "value": "priya@acme.dev"}, "omar@acme.dev"]}}

`{name}` marks a slot. Its values come from the seed's `slots` or the pack's
`[slots]` table in pack.toml (the seed's win); a value is a scalar, or
`{"text": ..., "value": ...}` when the request says it one way (`Priya`) and the
call another (`priya@acme.dev`). A marker that is a whole string in the
expected calls (or the fixture) takes the value with its type (`"{n}"` -> `3`);
inside a longer string it is spliced in as text.

The seeds become `val` as written, each slot filled with its first value: the
human-quality, held-out split. Train tasks are the same seeds with other slot
values and the workplace generator's compositional restyling
(appliance.packs.styles.restyle: openers, indirect asks, context, tails, case,
a typo), seeded per seed id so the same seed writes the same bytes. Every
candidate is then, cheapest first:

* **leakage-checked** against val (appliance.packs.leakage: character 5-gram
  Jaccard >= 0.9 is a leak, the rule loading applies),
* **deduplicated** against the rows already kept (an exact repeat of the
  normalised text across the pack; a near-duplicate within the seed's rows),
* **validated**: the row must parse as a pack row (its expected calls against
  the tools' schemas), and its expected calls must succeed through the pack's
  verifier, replayed in the pack's world (a python pack's sandbox, an MCP
  server): a slot value the functions reject is dropped here.

The report says how many were kept per split and why the others were dropped.
A seed whose own expected calls fail is a PackError naming its line: val is the
measurement, and only a person can fix it.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

from appliance.errors import PackError
from appliance.packs.leakage import find_collisions, normalise
from appliance.packs.manifest import MANIFEST_FILE, display_path
from appliance.packs.styles import restyle

DEFAULT_PER_SEED = 8  # train tasks wanted per seed
DEFAULT_RL_PER_SEED = 0  # train_rl tasks wanted per seed (0: no train_rl split)
DEFAULT_SEED = 0
ATTEMPTS_PER_TASK = 6  # candidates drawn per wanted task before a seed counts as exhausted
REPORT_FILE = "expand_report.json"

# The slot names restyle leaves untouched (appliance.packs.styles' own pattern).
_MARKER = re.compile(r"\{([a-z_]+)\}")
DROP_REASONS = {
    "leaks_into_val": "nearly repeats a val request (Jaccard >= 0.9)",
    "duplicate": "repeats a kept train request after normalisation",
    "near_duplicate": "nearly repeats a kept request of the same seed (Jaccard >= 0.9)",
    "invalid_row": "the row does not validate (its expected calls against the tools' schemas)",
    "replay_failed": "its expected calls do not succeed when replayed in the pack's world",
}


@dataclass(frozen=True)
class SlotValue:
    text: str  # how the request says it
    value: Any  # what the calls carry


@dataclass(frozen=True)
class Seed:
    """One human-written request with `{slot}` markers, and where it came from."""

    id: str
    line: int
    request: str
    expected: Any
    kind: str
    tags: dict[str, Any]
    fixture: Any
    slots: dict[str, tuple[SlotValue, ...]]


@dataclass
class ExpandReport:
    """What `expand_pack` wrote and dropped."""

    path: Path
    seeds: int
    kept: dict[str, int] = field(default_factory=dict)  # split -> rows written
    dropped: Counter = field(default_factory=Counter)  # reason -> candidates dropped
    short_seeds: dict[str, int] = field(default_factory=dict)  # seed id -> train+rl tasks it fell short by
    drop_examples: dict[str, str] = field(default_factory=dict)  # reason -> one example, for the person

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "kept": self.kept, "dropped": dict(sorted(self.dropped.items())),
                "drop_reasons": {k: DROP_REASONS[k] for k in sorted(self.dropped)},
                "drop_examples": self.drop_examples, "short_seeds": self.short_seeds}


def expand_pack(pack: str | Path, *, seeds: str | Path, per_seed: int = DEFAULT_PER_SEED,
                rl_per_seed: int = DEFAULT_RL_PER_SEED, seed: int = DEFAULT_SEED,
                root: str | Path = "tasks") -> ExpandReport:
    """Write val (the seeds), train (and train_rl) into the pack folder; return the report."""
    from appliance.packs import load_pack
    from appliance.verify import Verifier

    if per_seed < 1 or rl_per_seed < 0:
        raise PackError("--per-seed must be at least 1 and --rl-per-seed at least 0.")
    loaded = load_pack(pack, root)
    seed_list = read_seeds(Path(seeds), loaded.manifest.get("slots", {}))
    verifier = Verifier.for_pack(loaded)
    try:
        expander = _Expander(loaded, verifier, seed)
        val = [expander.val_row(s) for s in seed_list]
        report = ExpandReport(loaded.path, len(seed_list))
        train, train_rl = expander.expand(seed_list, val, per_seed, rl_per_seed, report)
    finally:
        verifier.close()
    splits = {"val": val, "train": train, **({"train_rl": train_rl} if rl_per_seed else {})}
    files = _ensure_splits(loaded.path, loaded.manifest, list(splits))
    for split, rows in splits.items():
        (loaded.path / files[split]).write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
        report.kept[split] = len(rows)
    (loaded.path / REPORT_FILE).write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    load_pack(loaded.path)  # what we wrote must load: leakage, ids and schemas as loading checks them
    return report


# --- seeds --------------------------------------------------------------------------------------


def read_seeds(file: Path, pack_slots: dict[str, Any]) -> list[Seed]:
    """The seeds file as Seeds; PackError naming the line for anything a person must fix."""
    if not file.is_file():
        raise PackError(f"{file}: the seeds file does not exist.")
    seeds, ids = [], set()
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{display_path(file)} line {number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise PackError(f"{where}: not valid JSON ({err.msg}).") from None
        seed = _seed(raw, number, len(seeds) + 1, pack_slots, where)
        if seed.id in ids:
            raise PackError(f"{where}: seed id '{seed.id}' is used twice; ids must be unique.")
        ids.add(seed.id)
        seeds.append(seed)
    if not seeds:
        raise PackError(f"{display_path(file)}: no seeds; write one JSON object per line.")
    return seeds


def _seed(raw: Any, number: int, index: int, pack_slots: dict[str, Any], where: str) -> Seed:
    if not isinstance(raw, dict) or not (isinstance(raw.get("request"), str) or "messages" in raw):
        raise PackError(f"{where}: a seed is {{\"request\": \"...\", \"expected\": [...], \"slots\"?: {{...}}}} "
                        "or a full pack row.")
    request = raw["request"] if "request" in raw else _last_user(raw["messages"], where)
    expected = raw.get("expected", [])
    if not isinstance(expected, list):
        raise PackError(f"{where}: 'expected' must be a list of calls.")
    own = raw.get("slots", {})
    if not isinstance(own, dict):
        raise PackError(f"{where}: 'slots' must be an object of slot name -> list of values.")
    used = set(_markers(request)) | set(_markers(expected)) | set(_markers(raw.get("fixture")))
    slots = {}
    for name in sorted(used):
        values = own.get(name, pack_slots.get(name))
        if values is None:
            raise PackError(f"{where}: slot '{{{name}}}' has no values; give them in the seed's \"slots\" or "
                            "in pack.toml's [slots] table.")
        slots[name] = _slot_values(name, values, where)
    kind = raw.get("kind") or ("multi_step" if len(expected) > 1 else "single_step")
    tags = raw.get("tags", {})
    if not isinstance(tags, dict):
        raise PackError(f"{where}: 'tags' must be an object.")
    return Seed(str(raw.get("id") or f"seed-{index:04d}"), number, request, expected, kind, dict(tags),
                raw.get("fixture"), slots)


def _last_user(messages: Any, where: str) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    raise PackError(f"{where}: the row has no user message to expand.")


def _slot_values(name: str, values: Any, where: str) -> tuple[SlotValue, ...]:
    if not isinstance(values, list) or not values:
        raise PackError(f"{where}: slot '{name}' needs a non-empty list of values.")
    out = []
    for value in values:
        if isinstance(value, dict):
            if set(value) != {"text", "value"} or not isinstance(value["text"], str):
                raise PackError(f"{where}: slot '{name}': an object value is {{\"text\": \"...\", \"value\": ...}}.")
            out.append(SlotValue(value["text"], value["value"]))
        elif isinstance(value, (str, int, float, bool)):
            out.append(SlotValue(value if isinstance(value, str) else json.dumps(value), value))
        else:
            raise PackError(f"{where}: slot '{name}': values are strings, numbers, booleans or "
                            "{\"text\", \"value\"} objects.")
    return tuple(out)


def _markers(value: Any) -> list[str]:
    if isinstance(value, str):
        return _MARKER.findall(value)
    if isinstance(value, dict):
        return [m for v in value.values() for m in _markers(v)]
    if isinstance(value, list):
        return [m for v in value for m in _markers(v)]
    return []


def fill_text(text: str, choice: dict[str, SlotValue]) -> str:
    """A request with its markers replaced by the values' text."""
    return _MARKER.sub(lambda m: choice[m.group(1)].text if m.group(1) in choice else m.group(0), text)


def fill_value(value: Any, choice: dict[str, SlotValue]) -> Any:
    """Expected calls or a fixture with their markers replaced by the values (typed when a whole string)."""
    if isinstance(value, str):
        whole = _MARKER.fullmatch(value)
        if whole and whole.group(1) in choice:
            return choice[whole.group(1)].value

        def text(match: re.Match) -> str:
            slot = choice.get(match.group(1))
            if slot is None:
                return match.group(0)
            return slot.value if isinstance(slot.value, str) else json.dumps(slot.value)

        return _MARKER.sub(text, value)
    if isinstance(value, dict):
        return {k: fill_value(v, choice) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_value(v, choice) for v in value]
    return value


# --- expanding ----------------------------------------------------------------------------------


class _Expander:
    def __init__(self, pack: Any, verifier: Any, seed: int) -> None:
        from appliance.packs.tools import ToolIndex

        self.pack = pack
        self.verifier = verifier
        self.seed = seed
        self.tools = ToolIndex(pack.tools)
        self._replayed: dict[str, str] = {}  # canonical (expected, fixture) -> "" or why it fails
        self._judged = 0

    def row(self, seed: Seed, split: str, number: int, request: str, choice: dict[str, SlotValue]) -> dict:
        row = {"id": f"{self.pack.name}-{split}-{seed.id}" + (f"-{number:02d}" if split != "val" else ""),
               "messages": [{"role": "user", "content": request}],
               "expected": fill_value(seed.expected, choice), "kind": seed.kind,
               "tags": {"domain": self.pack.name, "source": "human" if split == "val" else "expanded",
                        "template": seed.tags.get("template", seed.id), **seed.tags,
                        "seed": seed.id, "phrasing": seed.request}}
        if split != "val":
            row["tags"]["source"] = "expanded"  # whatever the seed's tags say: a person wrote only val
        if seed.fixture is not None:
            row["fixture"] = fill_value(seed.fixture, choice)
        return row

    def val_row(self, seed: Seed) -> dict:
        choice = {name: values[0] for name, values in seed.slots.items()}
        row = self.row(seed, "val", 0, fill_text(seed.request, choice), choice)
        problem = self.validate(row)
        if problem:
            raise PackError(f"seed '{seed.id}' (line {seed.line}): {problem}; fix the seed, it becomes val.")
        return row

    def validate(self, row: dict) -> str:
        """"" when the row parses and its expected calls succeed in the pack's world, else why not."""
        from appliance.packs.rows import _RowProblem, parse_row

        key = json.dumps([row["expected"], row.get("fixture"), row["kind"], row["tags"].get("policy")],
                         sort_keys=True)
        if key in self._replayed:
            return self._replayed[key]
        # The verifier caches per task id, so every distinct candidate is judged under an id of its own.
        self._judged += 1
        try:
            task = parse_row(json.dumps({**row, "id": f"expand-candidate-{self._judged}"}), self.tools)
        except _RowProblem as problem:
            self._replayed[key] = f"invalid_row: {problem}"
        else:
            verdict = self.verifier.verify_calls(task, task.expected)
            self._replayed[key] = "" if verdict.bucket == "success" else f"replay_failed: {verdict.bucket}: " \
                                                                         f"{verdict.reason}"
        return self._replayed[key]

    def expand(self, seeds: list[Seed], val: list[dict], per_seed: int, rl_per_seed: int,
               report: ExpandReport) -> tuple[list[dict], list[dict]]:
        val_texts = [row["messages"][-1]["content"] for row in val]
        train: list[dict] = []
        train_rl: list[dict] = []
        seen: set[str] = set()
        for seed in seeds:
            wanted = per_seed + rl_per_seed
            rng = Random(f"{self.seed}:{seed.id}")
            candidates = [self._candidate(seed, rng) for _ in range(wanted * ATTEMPTS_PER_TASK)]
            leaking = {c.eval_index for c in find_collisions(val_texts, [text for text, _ in candidates])}
            kept: list[tuple[str, dict]] = []
            for index, (text, choice) in enumerate(candidates):
                if len(kept) == wanted:
                    break
                reason = self._drop_reason(index in leaking, text, seen, [t for t, _ in kept])
                row = None
                if not reason:
                    split, number = ("train", len(kept) + 1) if len(kept) < per_seed else \
                        ("train_rl", len(kept) - per_seed + 1)
                    row = self.row(seed, split, number, text, choice)
                    reason = self.validate(row)
                if reason:
                    key = reason.split(":", 1)[0]
                    report.dropped[key] += 1
                    report.drop_examples.setdefault(key, f"{seed.id}: {text!r}" + (
                        f" ({reason.split(':', 1)[1].strip()})" if ":" in reason else ""))
                    continue
                seen.add(normalise(text))
                kept.append((text, row))
            rows = [row for _, row in kept]
            train += rows[:per_seed]
            train_rl += rows[per_seed:]
            if len(kept) < wanted:
                report.short_seeds[seed.id] = wanted - len(kept)
        return train, train_rl

    def _candidate(self, seed: Seed, rng: Random) -> tuple[str, dict[str, SlotValue]]:
        """One restyled request and its slot values; val's own values are avoided when others exist."""
        names = sorted(seed.slots)
        first = tuple(0 for _ in names)
        combos = 1
        for name in names:
            combos *= len(seed.slots[name])
        picks = tuple(rng.randrange(len(seed.slots[name])) for name in names)
        if combos > 1:
            while picks == first:
                picks = tuple(rng.randrange(len(seed.slots[name])) for name in names)
        choice = {name: seed.slots[name][pick] for name, pick in zip(names, picks)}
        return fill_text(restyle(seed.request, rng), choice), choice

    @staticmethod
    def _drop_reason(leaks: bool, text: str, seen: set[str], kept_texts: list[str]) -> str:
        if leaks:
            return "leaks_into_val"
        if normalise(text) in seen:
            return "duplicate"
        if kept_texts and find_collisions(kept_texts, [text]):
            return "near_duplicate"
        return ""


# --- writing ------------------------------------------------------------------------------------


def _ensure_splits(path: Path, manifest: dict[str, Any], splits: list[str]) -> dict[str, str]:
    """split -> file name; a split pack.toml lacks gets a line under its [splits] table."""
    files = dict(manifest["splits"])
    missing = [s for s in splits if s not in files]
    if not missing:
        return files
    manifest_file = path / MANIFEST_FILE
    text = manifest_file.read_text(encoding="utf-8")
    header = re.search(r"^\[splits\][ \t]*\n", text, re.M)
    if header is None:
        wanted = ", ".join(f'{split} = "{split}.jsonl"' for split in missing)
        raise PackError(f"{display_path(manifest_file)}: add {wanted} under [splits], then expand again.")
    lines = "".join(f'{split} = "{split}.jsonl"\n' for split in missing)
    manifest_file.write_text(text[:header.end()] + lines + text[header.end():], encoding="utf-8")
    files.update({split: f"{split}.jsonl" for split in missing})
    return files
