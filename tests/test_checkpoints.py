"""The adapter registry: atomic saves with manifests, listing, diffs, promotion/rollback, merged export."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from appliance import checkpoints as registry
from appliance.errors import ApplianceError


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A real PEFT LoRA for the tiny model, with non-zero B so merging changes the weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.05)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(str(out))
    return out


def manifest_for(run_id: str, step: int, model_dir: Path, **extra) -> dict:
    return {"run_id": run_id, "step": step, "stage": "grpo",
            "base_model": {"id": "tiny", "path": str(model_dir), "hash": registry.base_model_hash(model_dir)},
            "pack": {"name": "tiny", "data_hash": "sha256:x"}, "config": {"lora_r": 2}, "parent": None,
            "metrics": {"heldout": {"success_rate": 0.1 * step}}, **extra}


def test_save_list_load_and_diff(adapter_dir, tiny_model_dir, tmp_path):
    root = tmp_path / "checkpoints"
    first = registry.save_checkpoint(root, adapter_dir, manifest_for("run-a", 1, tiny_model_dir))
    second = registry.save_checkpoint(root, adapter_dir, manifest_for("run-a", 2, tiny_model_dir, parent=first.id))
    assert first.path == root / "run-a" / "step-00001"
    assert {p.name for p in second.path.iterdir()} == {"adapter_model.safetensors", "adapter_config.json",
                                                       "manifest.json"}
    assert not [p for p in (root / "run-a").iterdir() if p.name.startswith(".")]  # no staging left behind
    assert [c.id for c in registry.list_checkpoints(root)] == ["run-a/step-00001", "run-a/step-00002"]
    assert registry.latest_checkpoint(root, "run-a").step == 2
    loaded = registry.load_manifest(second.path)
    assert loaded["parent"] == "run-a/step-00001" and loaded["created_at"] > 0
    diff = {d["field"]: (d["a"], d["b"]) for d in registry.diff_manifests(first.manifest, loaded)}
    assert diff == {"step": (1, 2), "parent": (None, "run-a/step-00001"),
                    "metrics.heldout.success_rate": (0.1, 0.2)}
    again = registry.save_checkpoint(root, adapter_dir, manifest_for("run-a", 2, tiny_model_dir, note="resaved"))
    assert registry.load_manifest(again.path)["note"] == "resaved"
    with pytest.raises(ApplianceError):
        registry.load_manifest(tmp_path)


def test_saved_adapter_loads_with_peft(adapter_dir, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ckpt = registry.save_checkpoint(tmp_path, adapter_dir, manifest_for("run-p", 3, tiny_model_dir))
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(ckpt.path))
    assert any("lora_B" in name for name, _ in model.named_parameters())


def test_base_model_hash_tells_models_apart(tiny_model_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    assert registry.base_model_hash(copy) == registry.base_model_hash(tiny_model_dir)
    config = json.loads((copy / "config.json").read_text())
    config["num_hidden_layers"] = 3
    (copy / "config.json").write_text(json.dumps(config))
    assert registry.base_model_hash(copy) != registry.base_model_hash(tiny_model_dir)


def test_promote_and_roll_back_with_history(adapter_dir, tiny_model_dir, tmp_path):
    from appliance.store import Workspace

    ws = Workspace.open(tmp_path / "runs")
    root = tmp_path / "checkpoints"
    a = registry.save_checkpoint(root, adapter_dir, manifest_for("run-a", 1, tiny_model_dir))
    b = registry.save_checkpoint(root, adapter_dir, manifest_for("run-b", 4, tiny_model_dir))
    registry.record_in_store(ws, a)
    assert registry.current_promoted(root) is None
    registry.set_promoted(a, {"heldout_success": 0.3}, workspace=ws)
    registry.set_promoted(b.path, {"heldout_success": 0.4}, workspace=ws)
    assert registry.current_promoted(root)["id"] == "run-b/step-00004"
    previous = registry.rollback(root, workspace=ws, reason="unsafe regression")
    assert previous["id"] == "run-a/step-00001" and previous["evidence"] == {"heldout_success": 0.3}
    assert registry.rollback(root) is None
    with pytest.raises(ApplianceError):
        registry.rollback(root)
    history = json.loads((root / "PROMOTED.json").read_text())["history"]
    assert [h["action"] for h in history] == ["promote", "promote", "rollback", "rollback"]
    _, rows = ws.query("SELECT id, status, promoted FROM checkpoints ORDER BY id")
    assert rows == [("run-a/step-00001", "promoted", True), ("run-b/step-00004", "rolled_back", False)]


def test_export_merged_writes_full_model(adapter_dir, tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    ckpt = registry.save_checkpoint(tmp_path / "ck", adapter_dir, manifest_for("run-e", 1, tiny_model_dir))
    out = registry.export_merged(ckpt, tmp_path / "merged")
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(dict(merged.named_parameters())[name], dict(base.named_parameters())[name])
    assert json.loads((out / "export.json").read_text())["from_checkpoint"] == "run-e/step-00001"


@pytest.mark.parametrize("base, expected", [
    # The embedded and hub models go by the id evals are stored under, wherever their weights sit.
    ({"id": "smollm2-135m", "source": "embedded", "path": "/cache/models/smollm2-135m"}, "smollm2-135m"),
    ({"id": "Qwen/Qwen3-4B", "source": "hub", "path": "/cache/hub/snapshots/abc"}, "Qwen/Qwen3-4B"),
    ({"id": "Qwen/Qwen3-4B", "source": "hub"}, "Qwen/Qwen3-4B"),  # a hub model not downloaded when trained
    # A local model's id is only its folder's name: its path is the name that loads it.
    ({"id": "my-model", "source": "local", "path": "/models/my-model"}, "/models/my-model"),
])
def test_base_model_spec_by_source(base, expected):
    assert registry.base_model_spec({"base_model": base}) == expected


def test_base_model_spec_without_a_source(tiny_model_dir, tmp_path):
    """Older manifests: the path where it exists, else the id; nothing when the manifest names no model."""
    assert registry.base_model_spec({"base_model": {"id": "tiny", "path": str(tiny_model_dir)}}) == str(tiny_model_dir)
    assert registry.base_model_spec({"base_model": {"id": "tiny", "path": str(tmp_path / "gone")}}) == "tiny"
    assert registry.base_model_spec({}) is None
