"""The adapter registry: versioned LoRA checkpoints, manifests, promotion and rollback.

Layout (all plain files a person can read without our code):

    checkpoints/<run_id>/step-00008/adapter_model.safetensors   PEFT format: PeftModel.from_pretrained
    checkpoints/<run_id>/step-00008/adapter_config.json          and vLLM's LoRARequest both load it
    checkpoints/<run_id>/step-00008/manifest.json                what produced it (see MANIFEST_FIELDS)
    checkpoints/PROMOTED.json                                    the promoted adapter and its history

A checkpoint folder is written under a temporary name and renamed into place,
so a reader never sees half an adapter. The base-model hash is cheap on
purpose (a multi-GB model is not read in full): sha256 over config.json, the
safetensors index if there is one, and for the first weight shard its size,
its header (tensor names, dtypes, shapes, offsets) and its first MiB of data.
It tells "same base model" from "different base model"; it is not a content
address of every weight.

The promotion gate (is this adapter better?) belongs to the pipeline; this
module only records its decision (`set_promoted`) and undoes it (`rollback`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ApplianceError
from .prompting import answer_tokens

MANIFEST = "manifest.json"
PROMOTED = "PROMOTED.json"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
MANIFEST_FIELDS = ("run_id", "step", "stage", "base_model", "pack", "config", "parent", "answer_tokens", "metrics",
                   "created_at")
_HEAD_BYTES = 1 << 20


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    manifest: dict[str, Any]

    @property
    def id(self) -> str:
        return checkpoint_id(self.manifest["run_id"], int(self.manifest["step"]))

    @property
    def step(self) -> int:
        return int(self.manifest["step"])


def checkpoint_id(run_id: str, step: int) -> str:
    return f"{run_id}/step-{step:05d}"


def checkpoint_dir(root: str | Path, run_id: str, step: int) -> Path:
    return Path(root) / run_id / f"step-{step:05d}"


def base_model_spec(manifest: dict[str, Any]) -> str | None:
    """The model name an adapter's manifest should be loaded and recorded under (None if it names none).

    The embedded model and hub models go by their id (`smollm2-135m`, `Qwen/Qwen3-4B`), the name the CLI,
    the pipeline and the cockpit store evals under; the manifest's path for them is only where this machine
    keeps the weights. A local model goes by its directory: its id is just the folder's name. A manifest
    without a source (older runs, hand-made ones) uses the path where it exists.
    """
    base = manifest.get("base_model") or {}
    if not isinstance(base, dict):
        return None
    source, model_id, path = base.get("source"), base.get("id"), base.get("path")
    if source in ("embedded", "hub"):
        return model_id or path
    if source == "local":
        return path or model_id
    return path if path and Path(path).is_dir() else model_id or path


# ---------------------------------------------------------------- hashing

def base_model_hash(model_dir: str | Path) -> str:
    """Cheap identity of a base model folder (see the module docstring for what it covers)."""
    folder = Path(model_dir)
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors.index.json"):
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes())
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        digest.update(_shard_fingerprint(shards[0]))
    return "sha256:" + digest.hexdigest()


def _shard_fingerprint(shard: Path) -> bytes:
    size = shard.stat().st_size
    with shard.open("rb") as handle:
        header_len = struct.unpack("<Q", handle.read(8))[0] if size >= 8 else 0
        header = handle.read(min(header_len, size))
        data_head = handle.read(_HEAD_BYTES)
    return str(size).encode() + b"\0" + header + data_head


# ---------------------------------------------------------------- saving

def _atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def save_checkpoint(root: str | Path, adapter_src: str | Path, manifest: dict[str, Any]) -> Checkpoint:
    """Copy a PEFT adapter folder into the registry with its manifest, atomically.

    `manifest` needs run_id and step; created_at is filled in, in the caller's dict too, so a caller
    that rewrites the manifest later (with its held-out eval) keeps it. Saving the same step again
    (a resumed run re-reaching it) replaces the old folder.
    """
    missing = [f for f in ADAPTER_FILES if not (Path(adapter_src) / f).is_file()]
    if missing:
        raise ApplianceError(f"{adapter_src} is not a PEFT adapter folder (missing {', '.join(missing)}).")
    manifest.setdefault("created_at", time.time())
    manifest = dict(manifest)
    target = checkpoint_dir(root, manifest["run_id"], int(manifest["step"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    for name in ADAPTER_FILES:
        shutil.copy2(Path(adapter_src) / name, staging / name)
    _atomic_write_json(staging / MANIFEST, manifest)
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
    return Checkpoint(target, manifest)


def record_in_store(workspace: Any, ckpt: Checkpoint, status: str = "saved", promoted: bool | None = None,
                    note: str | None = None) -> None:
    """Add a (version of a) row to the store's checkpoints table."""
    if workspace is None:
        return
    row = {"id": ckpt.id, "run_id": ckpt.manifest["run_id"], "step": ckpt.step, "path": str(ckpt.path),
           "base_model": (ckpt.manifest.get("base_model") or {}).get("id"), "status": status,
           "metrics": ckpt.manifest.get("metrics") or {}}
    if promoted is not None:
        row["promoted"] = promoted
    if note is not None:
        row["note"] = note
    workspace.append("checkpoints", [row])


# ---------------------------------------------------------------- reading

def load_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a checkpoint folder (or of the manifest file itself)."""
    path = Path(path)
    file = path if path.name == MANIFEST else path / MANIFEST
    if not file.is_file():
        raise ApplianceError(f"{path} is not a checkpoint: it has no {MANIFEST}.")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ApplianceError(f"{file} is not a readable manifest ({err}).") from None
    if not isinstance(manifest, dict):
        raise ApplianceError(f"{file} is not a manifest: it holds a JSON {type(manifest).__name__}, not an object.")
    return manifest


def load_checkpoint(path: str | Path) -> Checkpoint:
    return Checkpoint(Path(path), load_manifest(path))


def answer_tokens_of(adapter: str | Path | None, _seen: frozenset[Path] = frozenset()) -> int:
    """The generation budget an adapter's answers need (an adapter trained with policy or time checks writes a
    `<think>` block first): its manifest's `answer_tokens`, or for a manifest written before that field what its
    run's config implies (answer_tokens_for); the plain budget for the base model, a folder without a manifest,
    or a chain of starts that comes back on itself."""
    path = Path(adapter) if adapter else None
    if path is None or path in _seen or not (path / MANIFEST).is_file():
        return answer_tokens()
    manifest = load_manifest(path)
    if "answer_tokens" in manifest:
        return int(manifest["answer_tokens"])
    return answer_tokens_for(manifest.get("config") or {}, _seen | {path})


def answer_tokens_for(config: dict[str, Any], _seen: frozenset[Path] = frozenset()) -> int:
    """The budget a training run's answers need, from its config: room for a check when SFT teaches one, else
    its start's (`init_adapter`)."""
    if config.get("policy_checks") or config.get("time_checks"):
        return answer_tokens(checked=True)
    return answer_tokens_of(config.get("init_adapter"), _seen)


def list_checkpoints(root: str | Path = "checkpoints", run_id: str | None = None) -> list[Checkpoint]:
    """Every complete checkpoint under `root` (one run's if `run_id`), oldest first."""
    root = Path(root)
    runs = [root / run_id] if run_id else sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    found = []
    for run in runs:
        for folder in sorted(run.glob("step-*")):
            if (folder / MANIFEST).is_file():
                found.append(load_checkpoint(folder))
    return sorted(found, key=lambda c: (_created_at(c), c.id))


def _created_at(ckpt: Checkpoint) -> float:
    """When a checkpoint was saved: its manifest says; one written without created_at has its file's time."""
    stamp = ckpt.manifest.get("created_at")
    return float(stamp) if isinstance(stamp, (int, float)) else (ckpt.path / MANIFEST).stat().st_mtime


def resolve_checkpoint(spec: str | Path, root: str | Path = "checkpoints") -> Path:
    """A checkpoint folder from a path, an id (`<run>/step-NNNNN`), or a run id (its latest checkpoint)."""
    for candidate in (Path(spec), Path(root) / str(spec)):
        if (candidate / MANIFEST).is_file():
            return candidate
        if candidate.is_dir() and list(candidate.glob("step-*")):
            latest = latest_checkpoint(candidate.parent, candidate.name)
            if latest is not None:
                return latest.path
    raise ApplianceError(f"no checkpoint {spec!r} under {root}/; list them with `appliance checkpoints list`.")


def latest_checkpoint(root: str | Path, run_id: str) -> Checkpoint | None:
    found = list_checkpoints(root, run_id)
    return max(found, key=lambda c: c.step) if found else None


def flatten_fields(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted names: {"a": {"b": 1}} -> {"a.b": 1}; an empty dict is a value."""
    if isinstance(obj, dict) and (obj or not prefix):
        flat: dict[str, Any] = {}
        for key, value in obj.items():
            flat.update(flatten_fields(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: obj}


def diff_manifests(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Changed leaf fields between two manifests: [{"field": "metrics.success_rate", "a": .., "b": ..}]."""
    flat_a, flat_b = flatten_fields(a), flatten_fields(b)
    return [{"field": key, "a": flat_a.get(key), "b": flat_b.get(key)}
            for key in sorted(set(flat_a) | set(flat_b))
            if key != "created_at" and flat_a.get(key) != flat_b.get(key)]


# ---------------------------------------------------------------- promotion

def _root_of(ckpt: Checkpoint) -> Path:
    return ckpt.path.parent.parent


def _read_promoted(root: Path) -> dict[str, Any]:
    file = root / PROMOTED
    if not file.is_file():
        return {"current": None, "stack": [], "history": []}
    return json.loads(file.read_text(encoding="utf-8"))


def set_promoted(ckpt: Checkpoint | str | Path, evidence: dict[str, Any], *, workspace: Any = None) -> dict[str, Any]:
    """Record `ckpt` as the promoted adapter, with the evidence the gate used; returns the new entry."""
    ckpt = ckpt if isinstance(ckpt, Checkpoint) else load_checkpoint(ckpt)
    root = _root_of(ckpt)
    state = _read_promoted(root)
    _demote_in_store(workspace, state["current"])
    entry = {"id": ckpt.id, "path": str(ckpt.path), "evidence": evidence, "promoted_at": time.time()}
    state["stack"].append(entry)
    state["current"] = entry
    state["history"].append({"action": "promote", **entry})
    _atomic_write_json(root / PROMOTED, state)
    record_in_store(workspace, ckpt, status="promoted", promoted=True, note=json.dumps(evidence, default=str))
    return entry


def _demote_in_store(workspace: Any, entry: dict[str, Any] | None) -> None:
    """The store's `promoted` flag is true only for the current adapter: clear the outgoing one."""
    if workspace is not None and entry and Path(entry["path"]).is_dir():
        record_in_store(workspace, load_checkpoint(entry["path"]), status="superseded", promoted=False)


def current_promoted(root: str | Path = "checkpoints") -> dict[str, Any] | None:
    """The promoted adapter's entry ({id, path, evidence, promoted_at}) or None."""
    return _read_promoted(Path(root))["current"]


def rollback(root: str | Path = "checkpoints", *, workspace: Any = None, reason: str = "") -> dict[str, Any] | None:
    """Un-promote the current adapter; the previously promoted one (or None) becomes current again."""
    root = Path(root)
    state = _read_promoted(root)
    if not state["stack"]:
        raise ApplianceError("Nothing is promoted, so there is nothing to roll back.")
    undone = state["stack"].pop()
    state["current"] = state["stack"][-1] if state["stack"] else None
    state["history"].append({"action": "rollback", "id": undone["id"], "reason": reason, "at": time.time(),
                             "restored": state["current"]["id"] if state["current"] else None})
    _atomic_write_json(root / PROMOTED, state)
    if workspace is not None and Path(undone["path"]).is_dir():
        record_in_store(workspace, load_checkpoint(undone["path"]), status="rolled_back", promoted=False, note=reason)
    restored = state["current"]
    if workspace is not None and restored and Path(restored["path"]).is_dir():
        record_in_store(workspace, load_checkpoint(restored["path"]), status="promoted", promoted=True,
                        note="restored by rollback")
    return restored


# ---------------------------------------------------------------- export

def export_merged(ckpt: Checkpoint | str | Path, out_dir: str | Path, *, dtype: str = "float32") -> Path:
    """Merge the LoRA into a full-precision copy of its base model and save safetensors to `out_dir`.

    The base model is loaded unquantised: merging into 4-bit weights is lossy,
    so an adapter trained with Unsloth is merged into the original weights.
    """
    from .models import load_model

    ckpt = ckpt if isinstance(ckpt, Checkpoint) else load_checkpoint(ckpt)
    base = ckpt.manifest.get("base_model") or {}
    spec = base_model_spec(ckpt.manifest)
    if not spec:
        raise ApplianceError(f"{ckpt.path} has no base model in its manifest; cannot export it.")
    merged, tokenizer = load_model(spec, adapter=ckpt.path, dtype=dtype, for_training=False)  # merged on load
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    _atomic_write_json(out / "export.json", {"from_checkpoint": ckpt.id, "base_model": base})
    return out
