"""Expert iteration: SFT rows from stored verified successes (appliance/train/successes.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_dpo import good, load, pack_dir, workspace  # noqa: F401 - the fixtures: DPO's pack and stored samples

from appliance.errors import ApplianceError
from appliance.store import Workspace
from appliance.train import TrainConfig, run_sft
from appliance.train.successes import select_successes

REPO = Path(__file__).resolve().parents[1]


def test_the_first_success_of_each_training_task_and_never_a_held_out_one(workspace, pack_dir):
    selection = select_successes(workspace, load(pack_dir), "train", "grpo-1")
    assert [(row["task_id"], row["completion"]) for row in selection.rows] == [
        ("t0", good("Carlos")),  # "ambiguous" was stored as a success and a failure: left out
        ("t1", good("Nadia")),  # its unsafe sample is not a success
    ]  # t3: failures only; t4: stored as successes, but it asks for Omar (judged again); t6: a val task
    assert selection.rows[0]["from"] == {"table": "rollouts", "id": "grpo-1", "step": 1, "sample_index": 0}
    assert selection.counts == {"tasks_with_samples": 4, "tasks_with_success": 3, "stale_verdicts": 1,
                                "calls": 2, "declines": 0}
    workspace.append("rollouts", [{"run_id": "grpo-1", "step": 2, "task_id": "t4", "sample_index": i,
                                   "completion": text, "bucket": "success"}
                                  for i, text in enumerate((good("Omar") + " ", good("Omar")))])
    again = select_successes(workspace, load(pack_dir), "train", "grpo-1")
    assert again.rows[-1]["task_id"] == "t4" and again.rows[-1]["completion"] == good("Omar")  # the first by index
    assert select_successes(workspace, load(pack_dir), "train", "eval-2").rows == []  # a held-out eval: nothing
    with pytest.raises(ApplianceError, match="--successes-from grpo-other holds samples of pack 'other'"):
        select_successes(workspace, load(pack_dir), "train", "grpo-other")  # its task ids are another pack's


def successes_config(tiny_model_dir, tmp_path, pack_dir, **overrides) -> TrainConfig:
    settings = dict(model=str(tiny_model_dir), pack=str(pack_dir), backend="cpu", steps=2, learning_rate=1e-2,
                    lora_r=4, lora_alpha=8, eval_every=2, batch_size=2, max_seq_length=256,
                    successes_from="grpo-1", output=str(tmp_path / "checkpoints"), workspace=str(tmp_path / "runs"))
    return TrainConfig(**{**settings, **overrides})


def test_an_sft_run_on_its_own_successes_trains_and_keeps_what_it_chose(tiny_model_dir, tmp_path, pack_dir,
                                                                        workspace):
    import torch
    from safetensors.torch import load_file

    seen = []
    result = run_sft(successes_config(tiny_model_dir, tmp_path, pack_dir), sink=seen.append, workspace=workspace)
    weights = load_file(str(Path(result.final_adapter) / "adapter_model.safetensors"))
    assert any(torch.count_nonzero(w) > 0 for k, w in weights.items() if "lora_B" in k)  # B starts at zero
    saved = json.loads((Path(result.run_dir) / "successes.json").read_text())
    assert [row["task_id"] for row in saved["rows"]] == ["t0", "t1"] and saved["rules"]["source"] == "grpo-1"
    assert any(e.type == "log" and e.message.startswith("expert iteration: 2 rows") for e in seen)


def test_too_few_successes_is_one_sentence_before_the_model_loads(tiny_model_dir, tmp_path, pack_dir, workspace,
                                                                 monkeypatch):
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "load_for_training", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(ApplianceError, match=r"Only 0 verified successes on train tasks in eval-1 \(need 2"):
        run_sft(successes_config(tiny_model_dir, tmp_path, pack_dir, successes_from="eval-1"), workspace=workspace)
    with pytest.raises(ApplianceError, match=r"eval-2 sampled `val`, whose tasks never become training rows"):
        run_sft(successes_config(tiny_model_dir, tmp_path, pack_dir, successes_from="eval-2"), workspace=workspace)
    with pytest.raises(ApplianceError, match="No rollouts or eval samples are stored for 'nope'"):
        run_sft(successes_config(tiny_model_dir, tmp_path, pack_dir, successes_from="nope"), workspace=workspace)
    _, runs = workspace.query("SELECT count(*) FROM runs WHERE kind = 'sft'")
    assert runs == [(0,)]  # refused before a run was recorded


def no_op_copy(tmp_path: Path) -> str:
    """A copy of workplace-single whose ws-train_rl-0009 and -0021 ask for the values their records already hold
    (the generator drew such requests before session 38); the copy's name."""
    import shutil

    root = tmp_path / "tasks" / "workplace-single"
    shutil.copytree(REPO / "tasks" / "workplace-single", root)
    held = {"ws-train_rl-0009": ("Backlog", "Completed"), "ws-train_rl-0021": ("Back end", "Design")}
    lines = []
    for line in (root / "train_rl.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["id"] in held:
            asked, current = held[row["id"]]
            row["messages"][0]["content"] = row["messages"][0]["content"].replace(asked, current)
            row["expected"][0]["arguments"]["new_value"] = current
        lines.append(json.dumps(row))
    (root / "train_rl.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "workplace-single"


def test_a_stored_success_todays_verifier_does_not_pass_is_left_out(tmp_path):
    """A task that asks to move a task to the board it is on (as the generator drew some before session 38).
    Before session 37 the verifier passed a call the tool refuses there (WorkBench's state rule); such verdicts
    stay in older stores, so each success is judged again."""
    from appliance.packs import load_pack
    from appliance.packs.check import changes_nothing
    from appliance.prompting import render_completion

    pack = load_pack(no_op_copy(tmp_path), root=str(tmp_path / "tasks"))
    tasks = {t.id: t for t in pack.tasks("train_rl")}
    assert changes_nothing(tasks["ws-train_rl-0021"]) and changes_nothing(tasks["ws-train_rl-0009"])
    refused = json.dumps({"name": "project_management_update_task",
                          "arguments": {"task_id": "00000231", "field": "list_name", "new_value": "Design"}})
    answers = {"ws-train_rl-0021": refused, **{task_id: render_completion(tasks[task_id].expected)
                                                for task_id in ("ws-train_rl-0000", "ws-train_rl-0009")}}
    ws = Workspace.open(tmp_path / "ws")
    ws.append("evals", [{"id": "eval-old", "pack": pack.name, "split": "train_rl"}])
    ws.append("eval_samples", [{"eval_id": "eval-old", "task_id": t, "sample_index": 0, "completion": o,
                                "bucket": "success", "v_unsafe": False} for t, o in answers.items()])
    selection = select_successes(ws, pack, "train_rl", "eval-old")
    # ws-train_rl-0009 changes nothing too, but its success is the expected call itself: kept.
    assert [row["task_id"] for row in selection.rows] == ["ws-train_rl-0000", "ws-train_rl-0009"]
    assert selection.counts["stale_verdicts"] == 1 and selection.counts["tasks_with_success"] == 3


def test_a_multi_turn_pack_is_refused_before_anything_is_read(tmp_path):
    from appliance.packs import load_pack
    from appliance.train.successes import successes_or_fail

    config = TrainConfig(pack="workplace-multi", successes_from="any-eval")
    with pytest.raises(ApplianceError, match="pack 'workplace-multi' is multi-turn"):
        successes_or_fail(config, load_pack("workplace-multi", root=str(REPO / "tasks")), Workspace.open(tmp_path))


def test_a_resumed_run_trains_on_the_rows_it_started_with(tiny_model_dir, tmp_path, pack_dir, workspace):
    import dataclasses

    first = run_sft(successes_config(tiny_model_dir, tmp_path, pack_dir), workspace=workspace)
    saved = (Path(first.run_dir) / "successes.json").read_text()
    workspace.append("rollouts", [{"run_id": "grpo-1", "step": 2, "task_id": "t3", "sample_index": 0,
                                   "completion": good("Ana"), "bucket": "success"}])  # a new success for t3
    assert "t3" in [row["task_id"] for row in select_successes(workspace, load(pack_dir), "train", "grpo-1").rows]
    resumed = run_sft(dataclasses.replace(successes_config(tiny_model_dir, tmp_path, pack_dir), steps=3,
                                          resume_from=first.run_id), workspace=workspace)
    assert resumed.run_id == first.run_id and (Path(resumed.run_dir) / "successes.json").read_text() == saved


def test_successes_are_the_models_answers_as_they_are():
    with pytest.raises(ApplianceError, match="successes_from trains on the model's own answers"):
        TrainConfig(successes_from="eval-1", policy_checks=True)
