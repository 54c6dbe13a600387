"""export-recipe: the files it writes, and the exported script run on two CPU processes (gloo).

The launch test runs the exported train_grpo.py under `accelerate launch` with
two processes, the tiny model and use_vllm=False for two GRPO steps, then checks
the store: one run, each step's whole batch once (a group of 4 split 2 + 2
over the ranks), no duplicate (step, task, sample) and rows from both ranks.
About 30 s of CPU time; minutes of wall time on a busy 2-core machine.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.recipe.export import STRATEGIES, export_recipe
from appliance.train.config import TrainConfig
from appliance.train.recorder import RolloutRecorder

REPO = Path(__file__).resolve().parents[1]


def small_config(model: Path, tmp_path: Path) -> TrainConfig:
    return TrainConfig(model=str(model), pack="workplace-single", backend="cpu", steps=2, prompts_per_step=1,
                       num_generations=4, max_completion_tokens=8, task_selection="all",
                       workspace=str(tmp_path / "runs"), output=str(tmp_path / "checkpoints"))


def test_export_writes_script_configs_and_commands(tiny_model_dir, tmp_path):
    config = dataclasses.replace(small_config(tiny_model_dir, tmp_path), prompts_per_step=7)
    run_dir = tmp_path / "runs" / "grpo-x"
    config.save(run_dir / "config.json")
    recipe = export_recipe("grpo-x", tmp_path / "out", workspace=tmp_path / "runs", strategy="zero2", gpus=8)
    out = tmp_path / "out"
    assert TrainConfig.load(out / "config.json") == config
    assert (out / "train_grpo.py").read_text() == (REPO / "appliance/recipe/train_grpo.py").read_text()
    for name in STRATEGIES:
        text = (out / "accelerate" / f"{name}.yaml").read_text()
        assert "num_processes: 7\n" in text and "mixed_precision: bf16\n" in text and "{" not in text
    readme = (out / "README.md").read_text()
    assert f"CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model {tiny_model_dir}" in readme
    assert "CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 accelerate launch --config_file accelerate/zero2.yaml train_grpo.py" in readme
    assert recipe.train_processes == 7


def test_export_refuses_a_batch_that_does_not_split(tiny_model_dir, tmp_path):
    small_config(tiny_model_dir, tmp_path).save(tmp_path / "config.json")  # 4 completions per step
    with pytest.raises(ApplianceError, match="does not split over 7"):
        export_recipe(tmp_path / "config.json", tmp_path / "out", gpus=8)
    with pytest.raises(ApplianceError, match="No run or config"):
        export_recipe(tmp_path / "nothing", tmp_path / "out")


@pytest.mark.parametrize("option, value", [("keep_decisions", True), ("positive_only", True), ("sft_anchor", 0.5),
                                           ("shared_prefixes_once", True), ("resample_flat_groups", 2)])
def test_export_and_script_refuse_an_option_the_recipe_would_drop(tiny_model_dir, tmp_path, option, value):
    from appliance.recipe.train_grpo import main

    config = dataclasses.replace(small_config(tiny_model_dir, tmp_path), **{option: value})
    config.save(tmp_path / "config.json")
    with pytest.raises(ApplianceError, match=f"does not carry {option}"):
        export_recipe(tmp_path / "config.json", tmp_path / "out", gpus=5)
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(SystemExit, match=f"does not carry {option}"):  # a config.json edited after the export
        main(["--config", str(tmp_path / "config.json"), "--no-vllm"])
    assert not (tmp_path / "runs").exists()  # refused before the store or the model


def test_script_sets_real_grpo_config_fields():
    """The vLLM server options are spelled as the installed TRL's GRPOConfig spells them."""
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    script = (REPO / "appliance/recipe/train_grpo.py").read_text()
    for option in ("use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port", "per_device_train_batch_size"):
        assert option in names and f'"{option}"' in script


def test_recorder_numbers_a_group_split_over_ranks():
    written: list[dict] = []
    everyone = [["a", "a", "b"], ["b", "b", "a"]]  # rank 0's and rank 1's slices of one batch

    def reward(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    for rank, ids in enumerate(everyone):
        recorder = RolloutRecorder("run", [reward], None, None, written.extend, rank=rank,
                                   gather_task_ids=lambda local: everyone)
        recorder.wrapped[0](prompts=["p"] * 3, completions=["c"] * 3, task_id=ids)
        recorder.flush(1)
    keys = sorted((r["task_id"], r["sample_index"]) for r in written)
    assert keys == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]


def test_exported_script_runs_on_two_cpu_processes(tiny_model_dir, tmp_path):
    from appliance.store import Workspace

    small_config(tiny_model_dir, tmp_path).save(tmp_path / "config.json")
    export_recipe(tmp_path / "config.json", tmp_path / "recipe", gpus=3)  # 2 training processes
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONPATH": str(REPO)}
    # `--cpu` alone makes accelerate start one process; --multi_gpu starts two (torchrun), which find no
    # GPU and join over gloo.
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", "29517", str(tmp_path / "recipe" / "train_grpo.py"),
               "--no-vllm", "--model", str(tiny_model_dir), "--no-save"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]

    with Workspace.open(tmp_path / "runs") as workspace:
        _, runs = workspace.query("SELECT run_id, status FROM runs")
        _, rows = workspace.query("SELECT run_id, step, task_id, sample_index FROM rollouts")
    assert len(runs) == 1 and runs[0][1] == "finished"
    run_id = runs[0][0]
    stored = [(step, task, sample) for rid, step, task, sample in rows if rid == run_id]
    assert len(stored) == len(rows) == 2 * 4  # two steps x 1 prompt x 4 generations
    assert len(set(stored)) == len(stored)
    for step in (1, 2):
        assert sorted(s for st, _, s in stored if st == step) == [0, 1, 2, 3]  # one group, numbered across ranks

    per_rank = []
    for rank in (0, 1):
        lines = (tmp_path / "runs" / run_id / f"rollouts-rank{rank}.jsonl").read_text().splitlines()
        per_rank.append({(e["step"], e["task_id"], e["sample_index"]) for e in map(json.loads, lines)})
    assert len(per_rank[0]) == len(per_rank[1]) == 4  # each rank scored and stored half of every step
    assert not per_rank[0] & per_rank[1]
    assert per_rank[0] | per_rank[1] == set(stored)
