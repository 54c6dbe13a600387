"""GRPO's negative half, dropped (positive_only), kept where a sample diverges (negatives_at_divergence) or kept
without its copies of the request (negatives_without_copies), and the positive half's shared prefixes weighted
once (shared_prefixes_once), on the real GRPOTrainer with the tiny model."""
from __future__ import annotations

from typing import Any

from appliance.train.config import TrainConfig

from contract.test_trl_grpo_trainer import length_reward, write_mini_pack


def _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, **changes) -> dict[str, Any]:
    """Sample and score one step with our trainer class; what the loss would get and what the store holds."""
    from appliance.store import Workspace
    from appliance.train import grpo as grpo_module

    seen: dict[str, Any] = {}

    def one_generation_step(run: Any, trainer: Any) -> None:  # in place of trainer.train()
        trainer.model.train()
        batch = next(iter(trainer.get_train_dataloader()))
        seen["task_ids"] = [row["task_id"] for row in batch]  # the output's rows, in order
        output = trainer._generate_and_score_completions(batch)
        seen["advantages"] = output["advantages"].tolist()
        seen["loss_mask"] = (output["completion_mask"] * output.get("tool_mask", 1)).tolist()
        seen["num_items"] = int(output["num_items_in_batch"])
        seen["completions"] = [row[:int(n)].tolist() for row, n in zip(output["completion_ids"],
                                                                      output["completion_mask"].sum(dim=1))]
        trainer.appliance_recorder.flush(1)

    monkeypatch.setattr(grpo_module, "train_with_guard", one_generation_step)
    folder = tmp_path / ("-".join(changes) or "both")
    settings = dict(model=str(tiny_model_dir), pack=str(write_mini_pack(folder / "mini")), backend="cpu",
                    preset="dr_grpo", beta=0.0, steps=1, lora_r=4, lora_alpha=8, num_generations=4, prompts_per_step=2,
                    max_completion_tokens=12, temperature=1.0, eval_every=1, max_seq_length=256, precision="fp32",
                    output=str(folder / "checkpoints"), workspace=str(folder / "runs"), seed=3)
    config = TrainConfig(**{**settings, **changes})
    grpo_module.run_grpo(config, reward_funcs=[length_reward], reward_weights=[1.0])
    with Workspace.open(folder / "runs") as workspace:
        _, rows = workspace.query("SELECT advantage FROM rollouts")
    seen["stored"] = sorted(round(a, 5) for (a,) in rows)
    return seen


def test_negative_advantages_become_zero_and_the_rest_stay_as_trl_computed_them(tiny_model_dir, tmp_path,
                                                                                 monkeypatch):
    both = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch)
    positive = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, positive_only=True)
    assert min(both["advantages"]) < 0 < max(both["advantages"])  # the same seed samples the same answers
    assert positive["advantages"] == [max(a, 0.0) for a in both["advantages"]]
    assert positive["stored"] == sorted(round(a, 5) for a in positive["advantages"])  # rollouts hold what trained


def test_below_mean_samples_keep_one_token_and_the_normaliser_stays(tiny_model_dir, tmp_path, monkeypatch):
    both = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch)
    divergence = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, negatives_at_divergence=True)
    assert divergence["advantages"] == both["advantages"]  # the same seed samples the same answers
    rows = list(zip(divergence["advantages"], divergence["loss_mask"], both["loss_mask"]))
    assert any(advantage < 0 for advantage, _, _ in rows)
    for advantage, mask, before in rows:
        assert sum(mask) <= 1 if advantage < 0 else mask == before
    assert divergence["num_items"] == both["num_items"]


def test_below_mean_samples_lose_the_tokens_marked_as_copies_of_their_own_request(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    from appliance.train import loss_masks

    asked: list[tuple[list[int], str]] = []

    def first_token_is_a_copy(decode, ids, request):  # the random model copies nothing: mark one token a row
        assert isinstance(decode(ids), str)
        asked.append((list(ids), request))
        return [position == 0 for position in range(len(ids))]

    both = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch)
    monkeypatch.setattr(loss_masks, "copied_tokens", first_token_is_a_copy)
    without = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, negatives_without_copies=True)
    assert without["advantages"] == both["advantages"]  # the same seed samples the same answers
    below = [r for r, advantage in enumerate(without["advantages"]) if advantage < 0]
    assert len(below) > 0
    requests = {f"m{i}": f"Email {name} about the budget." for i, name in enumerate(["Carlos", "Nadia", "Sam", "Ana"])}
    assert asked == [(without["completions"][r], requests[without["task_ids"][r]]) for r in below]
    for r, (mask, before) in enumerate(zip(without["loss_mask"], both["loss_mask"])):
        assert mask == ([0] + before[1:] if r in below else before)
    assert without["num_items"] == both["num_items"]


def test_each_prefix_the_above_mean_samples_share_weighs_one_sample_in_all(tiny_model_dir, tmp_path, monkeypatch):
    # At 0.8 two of seed 3's above-mean samples share their first token (at 1.0 none do).
    both = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, temperature=0.8)
    once = _one_generation_step(tiny_model_dir, tmp_path, monkeypatch, temperature=0.8, shared_prefixes_once=True)
    assert once["completions"] == both["completions"]  # the same seed samples the same answers
    above = [r for r, advantage in enumerate(once["advantages"]) if advantage > 0]
    assert len(above) > 1
    weight_of_prefix: dict[tuple[int, ...], float] = {}
    for r in above:
        for end in range(1, len(once["completions"][r]) + 1):
            prefix = tuple(once["completions"][r][:end])
            weight_of_prefix[prefix] = weight_of_prefix.get(prefix, 0.0) + once["loss_mask"][r][end - 1]
    assert all(abs(total - 1.0) < 1e-6 for total in weight_of_prefix.values())
    assert any(once["loss_mask"][r][0] == 0.5 for r in above)  # the two that share a first token
    for r, advantage in enumerate(once["advantages"]):
        if advantage <= 0:
            assert once["loss_mask"][r] == both["loss_mask"][r]
    assert once["num_items"] == both["num_items"]
