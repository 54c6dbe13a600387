"""Our GRPO trainer class on the pinned trl's real GRPOTrainer (use_vllm=False), on the tiny model.

trl 1.15 cannot take a training step on a CPU: its fused LM head needs Triton's
kernels (trl/trainer/utils.py:504-508 sets `_ChunkedLogProbFunction = None`
without them), which is why the CPU path installs 1.16. A generation step does not
use that head when no old or reference log-probabilities are needed (one
iteration per generation, no vLLM, beta 0: grpo_trainer.py:2568-2583, :2636),
so this runs one through TRL 1.15's own code with what we put around it: the
trainer class both backends build (ApplianceGRPOMixin, RenderedPromptIds before
GRPOTrainer), our reward functions and rollout recorder, the dapo preset's
zero-variance filter, and the CPU backend's rollout_func.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOOLS = [{"type": "function", "function": {"name": "send_email", "description": "Send an email",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                                                          "required": ["to"]}}}]


def write_mini_pack(folder: Path) -> Path:
    """One tool, four train tasks, no world (as tests/test_train.py's)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pack.toml").write_text(
        'name = "mini"\ndescription = "Email requests."\nversion = "1"\nworld = "none"\n'
        'tools = "tools.json"\nreward_scheme = "shaped"\nmax_turns = 1\n'
        'system_prompt = "Reply with one JSON tool call."\n\n[splits]\ntrain = "train.jsonl"\nval = "val.jsonl"\n')
    (folder / "tools.json").write_text(json.dumps(TOOLS))
    rows = [{"id": f"m{i}", "messages": [{"role": "user", "content": f"Email {name} about the budget."}],
             "expected": [{"name": "send_email", "arguments": {"to": name}}], "kind": "single_step", "tags": {}}
            for i, name in enumerate(["Carlos", "Nadia", "Sam", "Ana", "Omar"])]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (folder / "val.jsonl").write_text(json.dumps(rows[4]) + "\n")
    return folder


def length_reward(prompts, completions, **kwargs):
    """Varies across a group even for a random model, so advantages are not all zero."""
    return [min(len(c), 40) / 40 for c in completions]


def test_one_generation_step_of_our_trainer_on_trl_1_15(tiny_model_dir, tmp_path, monkeypatch, pins):
    import trl

    from appliance.store import Workspace
    from appliance.train import grpo as grpo_module
    from appliance.train.backends import RenderedPromptIds
    from appliance.train.callbacks import ApplianceGRPOMixin
    from appliance.train.config import TrainConfig

    assert trl.__version__ == pins["trl"]
    seen: dict[str, Any] = {}

    def one_generation_step(run: Any, trainer: Any) -> None:  # in place of trainer.train()
        trainer.model.train()
        batch = next(iter(trainer.get_train_dataloader()))
        seen["trainer"], seen["output"] = trainer, trainer._generate_and_score_completions(batch)
        seen["written"] = trainer.appliance_recorder.flush(1)

    monkeypatch.setattr(grpo_module, "train_with_guard", one_generation_step)
    config = TrainConfig(model=str(tiny_model_dir), pack=str(write_mini_pack(tmp_path / "mini")), backend="cpu",
                         preset="dapo", beta=0.0, steps=1, lora_r=4, lora_alpha=8, num_generations=4,
                         prompts_per_step=2, max_completion_tokens=12, temperature=1.0, eval_every=1, batch_size=4,
                         max_seq_length=256, precision="fp32", output=str(tmp_path / "checkpoints"),
                         workspace=str(tmp_path / "runs"))
    grpo_module.run_grpo(config, reward_funcs=[length_reward], reward_weights=[1.0])

    trainer, output = seen["trainer"], seen["output"]
    assert type(trainer).__mro__[1:4] == (ApplianceGRPOMixin, RenderedPromptIds, trl.GRPOTrainer)
    samples = config.prompts_per_step * config.num_generations
    # The keys our mixin reads and writes are TRL 1.15's.
    assert {"prompt_ids", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
            "tool_mask"} <= set(output)
    assert output["advantages"].shape == (samples,) and output["tool_mask"].shape == output["completion_mask"].shape
    metrics = trainer._metrics["train"]
    assert len(metrics["timing/generate_score_s"]) == 1 and 0.0 <= metrics["frac_groups_dropped"][0] <= 1.0

    assert seen["written"] == samples
    with Workspace.open(tmp_path / "runs") as workspace:
        _, rows = workspace.query("SELECT task_id, sample_index, advantage FROM rollouts")
    tasks = {task for task, _, _ in rows}
    assert len(rows) == samples and len(tasks) == config.prompts_per_step
    assert sorted((task, index) for task, index, _ in rows) == sorted(
        (task, index) for task in tasks for index in range(config.num_generations))
    assert sorted(round(a, 5) for *_, a in rows) == sorted(round(a, 5) for a in output["advantages"].tolist())
