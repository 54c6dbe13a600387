"""Training: SFT, GRPO (grpo, dr_grpo, dapo, gspo presets) and DPO of a LoRA, with versioned checkpoints.

    from appliance.train import TrainConfig, run_sft, run_grpo
    result = run_grpo(TrainConfig(pack="workplace-single", steps=16), sink=print_event)

Importing this package is cheap: torch/transformers/trl/peft are imported when
a run starts, and a backend module (cpu.py or unsloth_backend.py) only when
it is selected, because importing unsloth patches TRL for the whole process.
"""
from __future__ import annotations

from typing import Any

from .alarms import check_reward_hacking
from .backends import Backend, get_backend, pick_backend
from .common import TrainResult
from .config import TrainConfig, field_help
from .presets import PRESETS, grpo_options
from .versions import check_versions


def run_sft(config: TrainConfig, **kwargs: Any) -> TrainResult:
    from .sft import run_sft as _run_sft

    return _run_sft(config, **kwargs)


def run_grpo(config: TrainConfig, **kwargs: Any) -> TrainResult:
    from .grpo import run_grpo as _run_grpo

    return _run_grpo(config, **kwargs)


def run_dpo(config: TrainConfig, **kwargs: Any) -> TrainResult:
    from .dpo import run_dpo as _run_dpo

    return _run_dpo(config, **kwargs)


__all__ = ["Backend", "PRESETS", "TrainConfig", "TrainResult", "check_reward_hacking", "check_versions",
           "field_help", "get_backend", "grpo_options", "pick_backend", "run_dpo", "run_grpo", "run_sft"]
