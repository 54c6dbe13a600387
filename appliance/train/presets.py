"""Named GRPO variants, each mapped onto explicit TRL `GRPOConfig` options.

Every preset sets the loss, the reward scaling, the importance-sampling level,
the clipping range and the KL weight explicitly, because importing Unsloth
changes TRL's GRPO defaults (unsloth 2026.10.9, models/rl.py:3355-3367 and
:3521-3582): it leaves loss_type, beta and mask_truncated_completions unset and
then resolves them itself: loss_type "dapo" (TRL >= 0.22), beta 0.0 for dapo and
dr_grpo, else 0.001; mask_truncated_completions True and epsilon_high 0.28 only
for a dapo the caller asked for, else False; it also switches the vLLM
importance-sampling correction and the MoE router auxiliary loss off, and for
dr_grpo replaces scale_rewards True/"group" by False. An explicit value keeps a
preset meaning the same thing on both backends. (Its TrainingArguments changes,
weight_decay, warmup_steps and the NaN-loss filter, are set for every run in
common.FIXED_TRAINER_ARGS.)

| preset  | loss_type | scale_rewards | importance_sampling_level | epsilon | epsilon_high | mask_truncated_completions | drop zero-variance groups |
|---------|-----------|---------------|---------------------------|---------|--------------|----------------------------|---------------------------|
| grpo    | grpo      | group         | token                     | 0.2     | 0.2          | False                      | no                        |
| dr_grpo | dr_grpo   | none          | token                     | 0.2     | 0.2          | False                      | no                        |
| dapo    | dapo      | group         | token                     | 0.2     | 0.28         | True                       | yes (ours, see below)     |
| gspo    | grpo      | group         | sequence                  | 3e-4    | 4e-4         | False                      | no                        |

All presets: beta = TrainConfig.beta (default 0), num_iterations=1,
vllm_importance_sampling_correction=True (TRL's own default, restored),
multi_objective_aggregation="sum_then_normalize", router_aux_loss_coef=0.0
(no MoE load-balancing loss: Unsloth's optimized GRPO forward cannot compute
it, rl.py:3364, and TRL otherwise takes the model config's coefficient).
With beta > 0 the KL reference is the starting adapter under TRL but the base
model under Unsloth (see TrainConfig.beta).

Notes on the choices:
- dr_grpo: TRL 1.16 accepts scale_rewards in {"group", "batch", "none"}
  (True/False are mapped to "group"/"none"); Dr. GRPO drops the std division.
- gspo: the GSPO paper normalises each sequence's loss by its own length
  (a per-sequence mean, then a mean over the group) which is TRL's "grpo"
  aggregation; its clipping range is tiny (3e-4 / 4e-4) because sequence-level
  ratios are geometric means of token ratios.
- dapo "dynamic sampling": TRL has no option for it. DAPO over-samples until
  every group has reward variance; we do the cheaper half of that: groups whose
  rewards are all equal (advantage 0 for every member) are removed from the
  loss *normaliser* too (their tokens are masked through TRL's `tool_mask`
  loss mask, which does not touch attention), so they no longer dilute the
  gradient of the informative groups. No extra prompts are sampled; the
  fraction dropped is logged as `frac_reward_zero_std` as before.
- User overrides: TrainConfig.epsilon / epsilon_high replace the preset's
  clipping values, TrainConfig.scale_rewards its reward scaling, when set
  (None keeps the preset's).
"""
from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {
        "loss_type": "grpo",
        "scale_rewards": "group",
        "importance_sampling_level": "token",
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "mask_truncated_completions": False,
    },
    "dr_grpo": {
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
        "importance_sampling_level": "token",
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "mask_truncated_completions": False,
    },
    "dapo": {
        "loss_type": "dapo",
        "scale_rewards": "group",
        "importance_sampling_level": "token",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "mask_truncated_completions": True,
    },
    "gspo": {
        "loss_type": "grpo",
        "scale_rewards": "group",
        "importance_sampling_level": "sequence",
        "epsilon": 3e-4,
        "epsilon_high": 4e-4,
        "mask_truncated_completions": False,
    },
}

# Presets whose zero-variance groups our trainer wrapper drops from the loss.
FILTERS_ZERO_VARIANCE = {"dapo"}

# Options set the same way for every preset, so backend defaults cannot change them.
COMMON_OPTIONS: dict[str, Any] = {
    "num_iterations": 1,
    "multi_objective_aggregation": "sum_then_normalize",
    "vllm_importance_sampling_correction": True,
    "router_aux_loss_coef": 0.0,  # 0.0 is allowed for a dense model (trl 1.16 grpo_trainer.py:827: `if coef and`)
}


def grpo_options(preset: str, *, beta: float, epsilon: float | None = None,
                 epsilon_high: float | None = None, scale_rewards: str | None = None) -> dict[str, Any]:
    """The explicit GRPOConfig keyword arguments for `preset`.

    `epsilon`/`epsilon_high` override the preset's clipping and `scale_rewards` its reward scaling when given.
    """
    options = {**COMMON_OPTIONS, **PRESETS[preset], "beta": float(beta)}
    if scale_rewards is not None:
        options["scale_rewards"] = scale_rewards
    if epsilon is not None:
        options["epsilon"] = float(epsilon)
        if epsilon_high is None and preset in ("grpo", "dr_grpo"):
            options["epsilon_high"] = float(epsilon)  # symmetric presets stay symmetric
    if epsilon_high is not None:
        options["epsilon_high"] = float(epsilon_high)
    return options


def filters_zero_variance(preset: str) -> bool:
    return preset in FILTERS_ZERO_VARIANCE
