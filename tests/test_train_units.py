"""Unit tests for training pieces that need no model: presets, alarms, versions, config, filtering, isolation."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from appliance.errors import ApplianceError
from appliance.train import PRESETS, TrainConfig, check_reward_hacking, check_versions, grpo_options, pick_backend
from appliance.train.callbacks import declined, rename_metrics
from appliance.train.loss_masks import (drop_zero_variance_groups, leave_decisions_out, negatives_at_divergence,
                                        shared_prefixes_once)
from appliance.train.config import field_help


# ---------------------------------------------------------------- presets

EXPECTED = {
    "grpo": {"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "token",
             "epsilon": 0.2, "epsilon_high": 0.2, "mask_truncated_completions": False},
    "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none", "importance_sampling_level": "token",
                "epsilon": 0.2, "epsilon_high": 0.2, "mask_truncated_completions": False},
    "dapo": {"loss_type": "dapo", "scale_rewards": "group", "importance_sampling_level": "token",
             "epsilon": 0.2, "epsilon_high": 0.28, "mask_truncated_completions": True},
    "gspo": {"loss_type": "grpo", "scale_rewards": "group", "importance_sampling_level": "sequence",
             "epsilon": 3e-4, "epsilon_high": 4e-4, "mask_truncated_completions": False},
}


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_preset_maps_to_explicit_trl_options(preset, tmp_path):
    from trl import GRPOConfig

    options = grpo_options(preset, beta=0.0)
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=4, num_generations=4,
                      report_to="none", **options)
    for name, value in {**EXPECTED[preset], "beta": 0.0, "num_iterations": 1,
                        "vllm_importance_sampling_correction": True}.items():
        assert getattr(args, name) == value, (preset, name)


def test_presets_table_is_complete_and_overrides_apply():
    assert set(PRESETS) == set(EXPECTED)
    assert grpo_options("grpo", beta=0.04, epsilon=0.1)["epsilon_high"] == 0.1
    assert grpo_options("dapo", beta=0, epsilon=0.1)["epsilon_high"] == 0.28
    assert grpo_options("gspo", beta=0, epsilon_high=1e-3)["epsilon_high"] == 1e-3
    assert grpo_options("dr_grpo", beta=0.04)["beta"] == 0.04
    assert grpo_options("dapo", beta=0, scale_rewards="batch")["scale_rewards"] == "batch"
    assert grpo_options("dapo", beta=0)["scale_rewards"] == "group"


def test_an_unknown_reward_scaling_is_one_sentence():
    with pytest.raises(ApplianceError, match="reward scaling 'max'; choose one of group, batch, none"):
        TrainConfig(stage="grpo", scale_rewards="max").validate()


# ---------------------------------------------------------------- zero-variance filtering

def test_drop_zero_variance_groups_masks_only_flat_groups():
    import torch

    output = {"advantages": torch.tensor([0.0, 0.0, 0.0, 1.0, -1.0, 0.0]),
              "completion_mask": torch.ones(6, 3, dtype=torch.long)}
    dropped = drop_zero_variance_groups(output, group_size=3)
    assert dropped == pytest.approx(0.5)
    assert output["tool_mask"][:, 0].tolist() == [0, 0, 0, 1, 1, 1]
    assert int(output["num_items_in_batch"]) == 9


def test_a_group_split_across_two_processes_is_judged_whole():
    """Two training processes hold two rows each of one group of 4 (TRL's process slices)."""
    import torch

    slices = [torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), torch.tensor([0.7, -0.7, 0.0, 0.0, 0.0, 0.0])]
    gathered = torch.cat(slices)  # groups: rows 0-3 flat, rows 4-7 informative (split), rows 8-11 flat
    masks = []
    for index, local in enumerate(slices):
        output = {"advantages": local, "completion_mask": torch.ones(6, 2, dtype=torch.long)}
        dropped = drop_zero_variance_groups(output, group_size=4, gather=lambda t: gathered, process_index=index)
        assert dropped == pytest.approx(2 / 3)
        masks.append(output["tool_mask"][:, 0].tolist())
    assert masks == [[0, 0, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0]]


# ---------------------------------------------------------------- negatives_at_divergence

def test_a_below_mean_sample_keeps_only_the_token_where_it_leaves_its_closest_above_mean_sibling():
    import torch

    eos, pad = 2, 0
    # Group 1: a right call, a wrong value at position 2, a call cut short (EOS at 2), and a wrong first token.
    # Group 2: no sample above the mean.
    ids = torch.tensor([[5, 6, 7, 8, eos], [5, 6, 9, 8, eos], [5, 6, eos, pad, pad], [4, 6, 7, 8, eos],
                        [5, 6, 7, 8, eos], [5, 6, 9, 8, eos], [5, 6, 7, eos, pad], [5, 6, 7, 8, eos]])
    mask = (torch.arange(5) < torch.tensor([5, 5, 3, 5, 5, 5, 4, 5])[:, None]).long()
    output = {"advantages": torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, -0.5, -0.5, 0.0]), "completion_ids": ids,
              "completion_mask": mask, "num_items_in_batch": mask.sum()}
    kept = negatives_at_divergence(output, group_size=4)
    assert output["tool_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0], [1, 0, 0, 0, 0],
                                            [1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert kept == pytest.approx(3 / (5 + 3 + 5 + 5 + 4))
    assert output["advantages"].tolist() == [1.5, -0.5, -0.5, -0.5, 0.0, -0.5, -0.5, 0.0]  # only the mask moves
    assert int(output["num_items_in_batch"]) == int(mask.sum())  # the normaliser is left as it was


# ---------------------------------------------------------------- shared_prefixes_once

def test_a_prefix_the_above_mean_samples_share_is_reinforced_once_and_their_own_tokens_in_full():
    import torch

    eos, pad = 2, 0
    # Above the mean: one decline twice (tokens 7 8), two calls that part at their third token; below: one row.
    ids = torch.tensor([[7, 8, eos, pad], [7, 8, eos, pad], [4, 5, 10, eos], [4, 5, 11, eos], [4, 9, 9, eos]])
    mask = (torch.arange(4) < torch.tensor([3, 3, 4, 4, 4])[:, None]).long()
    output = {"advantages": torch.tensor([0.5, 0.5, 1.0, 0.2, -1.0]), "completion_ids": ids,
              "completion_mask": mask, "num_items_in_batch": mask.sum()}
    mean_weight = shared_prefixes_once(output)
    weights = (output["tool_mask"] * mask).tolist()
    assert weights[:2] == [[0.5, 0.5, 0.5, 0.0]] * 2
    assert weights[2:4] == [[0.5, 0.5, 1.0, 1.0]] * 2
    assert weights[4] == [1.0, 1.0, 1.0, 1.0]  # below the mean: as it was
    assert mean_weight == pytest.approx((6 * 0.5 + 4 * 0.5 + 4 * 1.0) / 14)
    assert int(output["num_items_in_batch"]) == int(mask.sum())


def test_positive_only_and_negatives_at_divergence_are_refused_together():
    with pytest.raises(ApplianceError, match="choose one"):
        TrainConfig(stage="grpo", positive_only=True, negatives_at_divergence=True)


# ---------------------------------------------------------------- keep_decisions

def test_keep_decisions_masks_declines_and_first_tokens_and_ranks_calls_among_themselves():
    import torch

    # Group 1: a decline, a right call (1.2) and two wrong ones (0.2). Group 2: three declines and one call.
    output = {"advantages": torch.zeros(8), "completion_mask": torch.ones(8, 3, dtype=torch.long)}
    rewards = [0.0, 1.2, 0.2, 0.2, 0.0, 0.0, 1.2, 0.0]
    declines = [True, False, False, False, True, True, False, True]
    share = leave_decisions_out(output, declines, rewards, group_size=4, scale_rewards="group")
    assert share == pytest.approx(0.5)
    calls = torch.tensor([1.2, 0.2, 0.2])
    expected = (calls - calls.mean()) / (calls.std() + 1e-4)  # TRL's group scaling, over the calls only
    assert output["advantages"][1:4].tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    assert output["advantages"][1] > 0 > output["advantages"][2]  # a wrong call is never lifted by a decline
    assert output["advantages"][[0, 4, 5, 6, 7]].tolist() == [0.0] * 5  # one call in a group teaches nothing
    assert output["tool_mask"].tolist() == [[0, 0, 0], [0, 1, 1], [0, 1, 1], [0, 1, 1],
                                            [0, 0, 0], [0, 0, 0], [0, 1, 1], [0, 0, 0]]
    assert int(output["num_items_in_batch"]) == 8


def test_keep_decisions_without_declines_gives_trls_advantages_less_the_first_token():
    import torch

    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 2.0, 1.0, 1.0, -1.0])
    for scale, divide in (("group", rewards.view(-1, 4).std(dim=1).repeat_interleave(4) + 1e-4),
                          ("batch", rewards.std() + 1e-4), ("none", 1.0)):
        output = {"advantages": torch.zeros(8), "completion_mask": torch.ones(8, 2, dtype=torch.long),
                  "tool_mask": torch.tensor([[1, 0]] * 8)}
        leave_decisions_out(output, [False] * 8, rewards.tolist(), group_size=4, scale_rewards=scale)
        centred = rewards - rewards.view(-1, 4).mean(dim=1).repeat_interleave(4)
        assert output["advantages"].tolist() == pytest.approx((centred / divide).tolist(), abs=1e-5)
        assert output["tool_mask"].sum() == 0  # the given loss mask is kept, the first token taken out of it


def test_a_decline_is_an_answer_that_parsed_and_calls_nothing():
    assert declined({"v_parse_ok": True, "v_n_calls": 0})
    assert not declined({"v_parse_ok": True, "v_n_calls": 1})
    assert not declined({"v_parse_ok": False, "v_n_calls": 0})  # a format error attempted a call


# ---------------------------------------------------------------- reward hacking alarm

def test_alarm_when_train_reward_rises_but_heldout_is_flat():
    history = [{"step": 4, "train_reward": 0.2, "heldout_success": 0.30},
               {"step": 8, "train_reward": 0.5, "heldout_success": 0.30}]
    alarm = check_reward_hacking(history, run_id="r")
    assert alarm is not None and alarm.kind == "reward_hacking" and alarm.step == 8 and alarm.run_id == "r"


def test_alarm_when_shaped_reward_rises_but_strict_success_falls():
    history = [{"step": 4, "shaped_reward": 0.3, "strict_success": 0.23},
               {"step": 8, "shaped_reward": 0.6, "strict_success": 0.15}]
    alarm = check_reward_hacking(history)
    assert alarm is not None and "shaping" in alarm.message


@pytest.mark.parametrize("history", [
    [],
    [{"step": 4, "train_reward": 0.2, "heldout_success": 0.3}],
    [{"step": 4, "train_reward": 0.2, "heldout_success": 0.3}, {"step": 8, "train_reward": 0.5, "heldout_success": 0.4}],
    [{"step": 4, "train_reward": 0.5, "heldout_success": 0.3}, {"step": 8, "train_reward": 0.3, "heldout_success": 0.2}],
    [{"step": 4, "shaped_reward": 0.3, "strict_success": 0.2}, {"step": 8, "shaped_reward": 0.6, "strict_success": 0.2}],
    [{"step": 4, "train_reward": 0.2}, {"step": 8, "train_reward": 0.9}],  # no held-out numbers: no claim
])
def test_no_alarm_when_success_follows_reward(history):
    assert check_reward_hacking(history) is None


# ---------------------------------------------------------------- versions and backends

def test_check_versions_flags_drift_per_path():
    good_gpu = {"torch": "2.14.0+cu128", "transformers": "5.17.0", "trl": "1.15.0", "peft": "0.21.2",
                "vllm": "0.33.0", "unsloth": "2026.10.9", "bitsandbytes": "0.50.2"}
    assert check_versions("gpu", installed=good_gpu) == []
    drifted = {**good_gpu, "trl": "1.16.0", "vllm": None}
    warnings = check_versions("gpu", installed=drifted)
    assert len(warnings) == 2 and any("trl 1.16.0" in w for w in warnings) and any("vllm" in w for w in warnings)
    cpu = {"torch": "2.13.0", "transformers": "5.17.0", "trl": "1.16.3", "peft": "0.21.2"}
    assert check_versions("cpu", installed=cpu) == []
    assert check_versions("cpu", installed={**cpu, "trl": "1.15.0"})
    assert check_versions(installed=cpu) == []  # no unsloth: the cpu path is inferred


def test_pick_backend_on_this_machine():
    name, reason = pick_backend("auto")
    assert name == "cpu" and reason
    with pytest.raises(ApplianceError):
        pick_backend("tpu")


def test_importing_train_loads_no_backend_or_heavy_library():
    code = ("import sys, json, appliance.train, appliance.checkpoints; "
            "print(json.dumps([m for m in ('unsloth', 'vllm', 'torch', 'trl', 'transformers', 'peft', "
            "'appliance.train.unsloth_backend', 'appliance.train.cpu') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


# ---------------------------------------------------------------- config

def test_config_round_trips_and_documents_every_field(tmp_path):
    config = TrainConfig(stage="sft", steps=3, lora_targets="q_proj, v_proj")
    assert TrainConfig.load(config.save(tmp_path / "c.json")) == config
    assert config.target_modules == ["q_proj", "v_proj"]
    assert config.effective_learning_rate == 1e-3
    assert all(text.strip() for text in field_help().values())
    with pytest.raises(ApplianceError):
        TrainConfig.from_dict({"stepz": 3})
    with pytest.raises(ApplianceError):
        TrainConfig(preset="ppo")
    with pytest.raises(ApplianceError):
        TrainConfig(num_generations=1)


def test_lora_layers_pick_the_last_layers_and_spell_out_all_linear():
    assert TrainConfig(lora_layers=0).peft_targets(30, backend_default=10) == {"target_modules": "all-linear"}
    assert TrainConfig().peft_targets(30) == {"target_modules": "all-linear"}
    assert TrainConfig().peft_targets(30, backend_default=10)["layers_to_transform"] == list(range(20, 30))
    assert TrainConfig(lora_layers=40).peft_targets(30) == {"target_modules": "all-linear"}
    subset = TrainConfig(lora_layers=3).peft_targets(30)
    assert subset["layers_to_transform"] == [27, 28, 29]
    assert "q_proj" in subset["target_modules"] and "down_proj" in subset["target_modules"]
    assert TrainConfig(lora_layers=2, lora_targets="q_proj").peft_targets(4)["target_modules"] == ["q_proj"]
    with pytest.raises(ApplianceError):
        TrainConfig(lora_layers=-1)


def test_continuing_an_adapter_trains_only_its_chosen_layers_and_modules(tmp_path):
    """What both backends and the multi-GPU recipe apply to init_adapter: lora_layers and lora_targets."""
    from peft import LoraConfig, get_peft_model

    from appliance.tiny import build_tiny_model
    from appliance.train.backends import freeze_untrained_adapter_weights

    model = get_peft_model(build_tiny_model(64, layers=3), LoraConfig(r=2, target_modules="all-linear"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"target_modules": ["q_proj", "up_proj", "down_proj"]}))
    config = TrainConfig(stage="grpo", init_adapter=str(tmp_path), lora_layers=2, lora_targets="up_proj,down_proj")
    freeze_untrained_adapter_weights(model, config)
    trained = {name.split(".lora_")[0].split("layers.")[1] for name, param in model.named_parameters()
               if param.requires_grad}
    assert trained == {"1.mlp.up_proj", "1.mlp.down_proj", "2.mlp.up_proj", "2.mlp.down_proj"}
    with pytest.raises(ApplianceError, match="v_proj"):  # a module the adapter has no LoRA on
        freeze_untrained_adapter_weights(model, TrainConfig(init_adapter=str(tmp_path), lora_targets="v_proj"))


def test_metric_names_follow_our_vocabulary():
    metrics = rename_metrics({"reward": 0.5, "rewards/exact/mean": 0.25, "completions/clipped_ratio": 0.1,
                              "step_time": 2.0, "note": "text"})
    assert metrics == {"reward/mean": 0.5, "reward/exact/mean": 0.25, "completion/clipped_ratio": 0.1,
                       "time/step_s": 2.0}


def test_flat_groups_raise_a_no_learning_signal_alarm_once_they_persist():
    from appliance.train.alarms import check_no_learning_signal

    flat = [{"step": s, "frac_reward_zero_std": 1.0, "reward/mean": 0.0} for s in (1, 2, 3)]
    alarm = check_no_learning_signal(flat, run_id="r")
    assert alarm is not None and alarm.kind == "no_learning_signal" and "SFT first" in alarm.message
    assert check_no_learning_signal(flat[:2]) is None  # too early to tell
    mixed = flat[:2] + [{"step": 3, "frac_reward_zero_std": 0.5, "reward/mean": 0.2}]
    assert check_no_learning_signal(mixed) is None
    solved = [{"step": s, "frac_reward_zero_std": 1.0, "reward/mean": 1.0} for s in (1, 2, 3)]
    assert "harder tasks" in check_no_learning_signal(solved).message


def test_cpu_fused_head_scores_only_labelled_positions_and_keeps_the_loss(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    import trl.trainer.utils as trl_utils
    from appliance.train.cpu import score_only_labelled_positions

    assert score_only_labelled_positions() and score_only_labelled_positions()  # idempotent
    assert trl_utils._use_triton(torch.device("cpu"))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    ids = torch.randint(3, model.config.vocab_size, (2, 12))
    labels = ids.clone()
    labels[:, :8] = -100  # a prompt without loss, as in completion-only SFT
    expected = model(input_ids=ids, labels=labels).loss
    add_fused_lm_head(model)
    fused = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert torch.allclose(fused.loss, expected, atol=1e-5)
    assert (fused.log_probs[:, :7] == 0).all() and (fused.log_probs[:, 7:] < 0).all()


def test_shared_prefix_rollout_returns_one_completion_per_repeated_prompt(tiny_model_dir):
    import types

    from appliance.models import load_model
    from appliance.train.rollout import SharedPrefixRollout

    model, tokenizer = load_model(tiny_model_dir, for_training=True)
    model.train()
    prompts = ["<|im_start|>user\nDelete the task.<|im_end|>\n"] * 3 + ["<|im_start|>user\nPlot it.<|im_end|>\n"] * 3
    config = TrainConfig(num_generations=3, max_completion_tokens=7, temperature=1.0)
    out = SharedPrefixRollout(tokenizer, config)(prompts, types.SimpleNamespace(model=model))
    assert out["logprobs"] is None and len(out["completion_ids"]) == len(prompts) == len(out["prompt_ids"])
    assert out["prompt_ids"][0] == tokenizer(prompts[0], add_special_tokens=False)["input_ids"]
    assert all(0 < len(ids) <= 7 for ids in out["completion_ids"])
    eos = tokenizer.eos_token_id
    assert all(len(ids) == 7 or ids[-1] == eos for ids in out["completion_ids"])  # EOS kept when it stopped
    assert model.training  # back in training mode for the update


def test_guided_rollout_puts_the_reference_answer_last_in_groups_without_a_success(tiny_model_dir):
    import types

    from appliance.models import load_model
    from appliance.train.rollout import Guide, SharedPrefixRollout

    model, tokenizer = load_model(tiny_model_dir, for_training=True)
    delete, plot = "<|im_start|>user\nDelete the task.<|im_end|>\n", "<|im_start|>user\nPlot it.<|im_end|>\n"
    answer = '{"name": "delete_task", "arguments": {"task_id": "7"}}'
    reference = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    config = TrainConfig(num_generations=3, max_completion_tokens=7, temperature=1.0)
    trainer = types.SimpleNamespace(model=model)
    prompts = [delete] * 3 + [plot] * 3

    never = Guide({delete: ("t1", answer)}, succeeded=lambda task_id, text: False)  # `plot` has no reference
    out = SharedPrefixRollout(tokenizer, config, never)(prompts, trainer)
    assert out["guided"] == [False, False, True, False, False, False]
    assert out["completion_ids"][2] == reference and len(out["completion_ids"]) == 6
    assert all(len(ids) <= 7 for i, ids in enumerate(out["completion_ids"]) if i != 2)

    seen = []
    always = Guide({delete: ("t1", answer)}, succeeded=lambda task_id, text: seen.append(task_id) or True)
    out = SharedPrefixRollout(tokenizer, config, always)(prompts, trainer)
    assert out["guided"] == [False] * 6 and reference not in out["completion_ids"]
    assert seen == ["t1"]  # one success is enough; a prompt without a reference is not verified


def test_dynamic_sampling_replaces_only_flat_groups_with_unused_prompts_for_a_limited_number_of_rounds():
    from types import SimpleNamespace

    from appliance.train.rollout import FlatGroupRefill

    rows = [{"prompt": p, "task_id": f"t-{p}", "prompt_tokens": len(p)} for p in ("a", "b", "c", "d", "e")]
    scored = []

    def score(task_ids, texts):  # a sample is right when its text names its own task
        scored.append(task_ids[0])
        return [float(text == task_id) for task_id, text in zip(task_ids, texts)]

    def samples(*texts):
        return [SimpleNamespace(text=t) for t in texts]

    drawn = []

    def sample(prompts, size):  # "c" and "d" come back flat, anything else mixed
        drawn.append(list(prompts))
        return [samples(*["x"] * size) if p in ("c", "d") else samples(f"t-{p}", *["x"] * (size - 1)) for p in prompts]

    refill = FlatGroupRefill(rows, score, rounds=2, seed=0)
    groups, kept = refill.refill([("a", 2), ("b", 2)], [samples("t-a", "x"), samples("x", "x")], sample)
    assert groups[0] == ("a", 2) and kept[0][0].text == "t-a"  # informative: kept in its slot
    assert groups[1][0] not in ("a", "b") and [len(d) for d in drawn] in ([1], [1, 1])  # one slot refilled
    assert all(p not in ("a", "b") for d in drawn for p in d) and len({p for d in drawn for p in d}) == len(drawn)
    refilled = groups[1][0]
    assert refill.columns(groups) == {"task_id": ["t-a", "t-a", f"t-{refilled}", f"t-{refilled}"],
                                      "prompt_tokens": [1, 1, 1, 1], "sampled_prompt": ["a", "a", refilled, refilled]}

    drawn.clear()
    flat = FlatGroupRefill(rows, lambda ids, texts: [0.0] * len(texts), rounds=3, seed=1)
    groups, _ = flat.refill([("a", 2), ("b", 2)], [samples("x", "x"), samples("x", "x")], sample)
    assert [len(d) for d in drawn] == [2, 1]  # 3 unused prompts: two, then the last one, then none left
    assert flat.last_refilled == 3
    assert {groups[0][0], groups[1][0]} <= {"c", "d", "e"}

    drawn.clear()
    none = FlatGroupRefill(rows, score, rounds=0)
    assert none.refill([("b", 2)], [samples("x", "x")], sample)[0] == [("b", 2)] and drawn == []


def test_under_keep_decisions_a_group_is_flat_unless_two_of_its_calls_differ():
    from appliance.train.rollout import FlatGroupRefill

    rows = [{"prompt": "a", "task_id": "t-a", "prompt_tokens": 1}]

    def score(task_ids, texts):  # "no": a decline, left out of the loss; "right" / "wrong": calls
        return [None if text == "no" else float(text == "right") for text in texts]

    refill = FlatGroupRefill(rows, score, rounds=1)
    assert refill.is_flat("a", ["right", "no", "no"])  # a call against declines teaches nothing
    assert refill.is_flat("a", ["wrong", "wrong", "no"]) and refill.is_flat("a", ["no", "no", "no"])
    assert not refill.is_flat("a", ["right", "wrong", "no"])


def test_keep_decisions_refill_scores_a_decline_as_left_out():
    from types import SimpleNamespace

    from appliance.train.grpo import flat_group_refill_for

    def verify(task_id, text):
        return SimpleNamespace(parse_ok=text != "garbled", n_calls=0 if text in ("no", "garbled") else 1)

    reward = [lambda prompts, completions, task_id: [float(c == "right") for c in completions]]
    rows = [{"prompt": "a", "task_id": "t-a"}]
    for keep, expected in ((True, [1.0, None, 0.0]), (False, [1.0, 0.0, 0.0])):
        run = SimpleNamespace(config=TrainConfig(stage="grpo", resample_flat_groups=1, keep_decisions=keep))
        refill = flat_group_refill_for(run, rows, reward, None, verify)
        assert refill.score(["t-a"] * 3, ["right", "no", "garbled"]) == expected


@pytest.mark.parametrize("option, capability", [("guide_failed_groups", "supports_guidance"),
                                                ("sft_anchor", "supports_sft_anchor"),
                                                ("keep_decisions", "supports_loss_masks"),
                                                ("negatives_at_divergence", "supports_loss_masks"),
                                                ("negatives_without_copies", "supports_loss_masks"),
                                                ("shared_prefixes_once", "supports_loss_masks"),
                                                ("resample_flat_groups", "supports_resampling")])
def test_an_option_of_our_trainer_is_refused_on_a_backend_that_cannot_take_it(option, capability):
    from types import SimpleNamespace

    from appliance.errors import ApplianceError
    from appliance.train.grpo import refuse_unsupported_options

    updates, events = [], []
    value = {"sft_anchor": 1.0, "resample_flat_groups": 2}.get(option, True)
    run = SimpleNamespace(run_id="r", config=TrainConfig(**{option: value}),
                          emit=events.append,
                          pack=SimpleNamespace(name="single", max_turns=1),
                          writer=SimpleNamespace(update_run=lambda **row: updates.append(row)),
                          backend=SimpleNamespace(name="unsloth"))
    with pytest.raises(ApplianceError, match=f"{option} is not available on the unsloth backend"):
        refuse_unsupported_options(run)
    assert updates[0]["status"] == "failed" and events[0].type == "run_failed"
    setattr(run.backend, capability, True)
    assert refuse_unsupported_options(run) is None


def test_grpo_warns_when_expected_answers_exceed_the_sampling_budget():
    from types import SimpleNamespace

    from appliance.task import Task, ToolCall
    from appliance.train.grpo import warn_unreachable_answers

    class Chars:  # one token per character
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(text)}

    tasks = [Task(id=f"t{i}", messages=[{"role": "user", "content": "hi"}],
                  expected=(ToolCall("send_email", {"to": "x" * n}),)) for i, n in enumerate((1, 80))]
    seen = []
    run = SimpleNamespace(config=TrainConfig(stage="grpo", max_completion_tokens=64), run_id="r", emit=seen.append,
                          pack=SimpleNamespace(max_turns=1, tasks=lambda split: tasks))
    assert warn_unreachable_answers(run, Chars(), "train_rl") == 1
    assert seen and "1 of 2 train_rl tasks" in seen[0].message and "--max-completion-tokens" in seen[0].message
    run.config = TrainConfig(stage="grpo", max_completion_tokens=200)
    seen.clear()
    assert warn_unreachable_answers(run, Chars(), "train_rl") == 0 and not seen


def test_variance_chance_and_uncertain_selection():
    from appliance.train.screen import ScreenedTask, select_uncertain, variance_chance

    assert variance_chance(0.5, 4) == pytest.approx(0.875)
    assert variance_chance(0.0, 4) == 0.0 and variance_chance(1.0, 4) == 0.0
    assert variance_chance(0.1, 8) > variance_chance(0.1, 2)  # larger groups vary more often
    scored = [ScreenedTask(f"t{i}", -1.0, chance) for i, chance in enumerate([0.1, 0.9, 0.5, 0.9])]
    assert [t.task_id for t in select_uncertain(scored, 2) if t.selected] == ["t1", "t3"]
    assert not any(t.selected for t in select_uncertain(scored, 0))
    with pytest.raises(ApplianceError, match="task selection"):
        TrainConfig(task_selection="hard")


def test_screening_sample_keeps_order_is_seeded_and_bounded():
    from types import SimpleNamespace

    from appliance.train.screen import screening_sample

    rows = [{"task_id": f"t{i}"} for i in range(50)]
    config = SimpleNamespace(screen_limit=8, seed=0)
    sample = screening_sample(rows, config)
    assert len(sample) == 8 and sample == sorted(sample, key=lambda r: int(r["task_id"][1:]))
    assert sample == screening_sample(rows, config)
    assert sample != screening_sample(rows, SimpleNamespace(screen_limit=8, seed=1))
    assert screening_sample(rows, SimpleNamespace(screen_limit=None, seed=0)) == rows
    assert screening_sample(rows[:5], config) == rows[:5]


def test_quick_pipeline_screens_a_sample_of_grpo_pool():
    from appliance.pipeline import QUICK_PROMPTS_PER_STEP, QUICK_SCREEN_LIMIT, PipelineSettings

    assert PipelineSettings(quick=True).grpo_args() == ["--screen-limit", str(QUICK_SCREEN_LIMIT),
                                                        "--prompts-per-step", str(QUICK_PROMPTS_PER_STEP)]
    assert PipelineSettings().grpo_args() == []


def test_uncertain_by_template_takes_each_templates_best_in_turn():
    from appliance.train.screen import ScreenedTask, select_uncertain, select_uncertain_by_template

    chances = {"short1": 0.9, "short2": 0.8, "short3": 0.7, "long1": 0.2, "long2": 0.1, "new1": 0.05}
    scored = [ScreenedTask(t, -1.0, c) for t, c in chances.items()]
    template_of = {t: t.rstrip("0123456789") for t in chances}
    by_template = select_uncertain_by_template(scored, 3, template_of)
    assert {t.task_id for t in by_template if t.selected} == {"short1", "long1", "new1"}
    assert {t.task_id for t in select_uncertain(scored, 3) if t.selected} == {"short1", "short2", "short3"}
    assert {t.task_id for t in select_uncertain_by_template(scored, 4, template_of) if t.selected} == {
        "short1", "long1", "new1", "short2"}
    assert not any(t.selected for t in select_uncertain_by_template(scored, 0, template_of))


def test_no_call_cap_keeps_ranking_past_the_capped_tasks():
    from appliance.train.screen import ScreenedTask, select_uncertain

    chances = {"refuse1": 0.9, "refuse2": 0.85, "chat1": 0.8, "send1": 0.5, "send2": 0.4, "send3": 0.3}
    scored = [ScreenedTask(t, -1.0, c) for t, c in chances.items()]
    no_call = frozenset({"refuse1", "refuse2", "chat1"})
    picked = lambda **kw: {t.task_id for t in select_uncertain(scored, 4, no_call=no_call, **kw) if t.selected}  # noqa: E731
    assert picked() == {"refuse1", "refuse2", "chat1", "send1"}
    assert picked(max_no_call=1) == {"refuse1", "send1", "send2", "send3"}
    assert picked(max_no_call=0) == {"send1", "send2", "send3"}  # fewer than keep: the pool ran out
    with pytest.raises(ApplianceError, match="max_no_call_share"):
        TrainConfig(max_no_call_share=1.5)


def test_resume_refuses_flags_that_would_change_the_saved_run(tmp_path):
    from appliance.cli import build_parser
    from appliance.errors import ApplianceError
    from appliance.train.cli_glue import config_from_args
    from appliance.train.config import TrainConfig

    TrainConfig(stage="grpo", steps=30, eval_every=8).save(tmp_path / "grpo-1" / "config.json")
    parse = lambda *flags: build_parser().parse_args(  # noqa: E731
        ["train", "grpo", "--resume", "grpo-1", "--workspace", str(tmp_path), *flags])
    assert config_from_args(parse("--steps", "60")).steps == 60  # a larger --steps extends the run
    assert config_from_args(parse("--eval-every", "8")).eval_every == 8  # the saved value is no change
    with pytest.raises(ApplianceError, match=r"cannot change eval_every \(saved 8, given 15\)"):
        config_from_args(parse("--eval-every", "15"))


def test_the_doctor_says_which_precision_a_cpu_run_trains_in(monkeypatch):
    """A CPU without native bf16 trains in fp32, 2.2x slower (docs/learning.md, session 11): say so up front."""
    from appliance import doctor
    from appliance.train import cpu

    monkeypatch.setattr(doctor, "_gpu", lambda: {"gpu": "none"})
    monkeypatch.setattr("appliance.train.backends.pick_backend", lambda requested: ("cpu", "test"))
    for native, words in ((True, "bf16 autocast"), (False, "fp32")):
        monkeypatch.setattr(cpu, "use_bf16_autocast", lambda precision, native=native: native)
        assert doctor.collect()["cpu_training_precision"].startswith(words)
