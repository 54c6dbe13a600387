"""The GPU backend: Unsloth 4-bit LoRA with a colocated vLLM engine sharing the base weights.

Import order matters: `UNSLOTH_VLLM_STANDBY` must be in the environment before
unsloth is imported, and unsloth must be imported before trl/transformers are
used so its patches apply. This module is imported only when the unsloth
backend is selected (appliance.train.backends.get_backend), never by
`import appliance.train`.

Verified API (unsloth 2026.10.9, trl 1.15.0, vllm 0.33.0; DESIGN.md):
FastLanguageModel.from_pretrained(model_name, max_seq_length, load_in_4bit=True,
fast_inference=True, max_lora_rank, gpu_memory_utilization) starts vLLM and
builds the training model from vLLM's tensors; get_peft_model(...) adds the
LoRA; importing unsloth patches GRPOTrainer for colocated generation. Unsloth
also changes GRPO defaults (loss_type, beta, vLLM importance-sampling
correction); our presets set those explicitly (appliance.train.presets).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from ..errors import ApplianceError
from .backends import build_grpo_trainer, build_sft_trainer
from .config import ALL_LINEAR, ALL_LINEAR_MODULES, TrainConfig
from .multiturn import MULTI_TURN_CPU_ONLY


def _import_unsloth(standby: bool) -> Any:
    if standby:
        os.environ["UNSLOTH_VLLM_STANDBY"] = "1"
    import unsloth  # noqa: F401  (patches transformers/trl/peft on import)
    from unsloth import FastLanguageModel

    return FastLanguageModel


class UnslothBackend:
    name = "unsloth"
    supports_multi_turn = False  # TRL samples through the colocated vLLM engine, one turn per prompt
    # Screening runs a plain transformers forward with a KV cache (HFGenerator.completion_logprobs);
    # Unsloth patches that forward and the path has not run on a GPU yet, so it trains on every task.
    supports_screening = False

    def __init__(self, config: TrainConfig | None = None) -> None:
        self.FastLanguageModel = _import_unsloth(config.standby if config else True)

    def _target_modules(self, config: TrainConfig) -> list[str]:
        targets = config.target_modules
        return list(ALL_LINEAR_MODULES) if targets == ALL_LINEAR else list(targets)

    def load_for_training(self, config: TrainConfig) -> tuple[Any, Any]:
        from ..models import local_model_dir, resolve_model

        r, alpha, targets = config.lora_r, config.lora_alpha, self._target_modules(config)
        layers = None
        if config.init_adapter:  # the LoRA shape must match the adapter being continued
            adapter_cfg = json.loads((Path(config.init_adapter) / "adapter_config.json").read_text())
            r, alpha = int(adapter_cfg["r"]), int(adapter_cfg.get("lora_alpha", alpha))
            targets = sorted(adapter_cfg.get("target_modules") or targets)
            layers = adapter_cfg.get("layers_to_transform")
        model, tokenizer = self.FastLanguageModel.from_pretrained(
            model_name=local_model_dir(resolve_model(config.model)),
            max_seq_length=config.max_seq_length,
            load_in_4bit=True,
            fast_inference=config.stage == "grpo",  # vLLM only where we sample
            max_lora_rank=max(config.max_lora_rank, r),
            gpu_memory_utilization=config.gpu_memory_utilization,
        )
        if not config.init_adapter:
            layers = config.lora_layer_indices(model.config.num_hidden_layers)
        model = self.FastLanguageModel.get_peft_model(
            model, r=r, target_modules=targets, lora_alpha=alpha, lora_dropout=config.lora_dropout,
            use_gradient_checkpointing="unsloth", random_state=config.seed,
            **({"layers_to_transform": layers} if layers else {}),
        )
        if config.init_adapter:
            _load_adapter_weights(model, Path(config.init_adapter))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer

    def backend_args(self) -> dict[str, Any]:
        from unsloth import is_bfloat16_supported

        bf16 = bool(is_bfloat16_supported())
        return {"bf16": bf16, "fp16": not bf16, "optim": "adamw_8bit"}

    def make_sft_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        return build_sft_trainer(model, tokenizer, dataset, {**args, **self.backend_args()}, callbacks)

    def make_grpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                          args: dict[str, Any], reward_funcs: list[Callable], callbacks: list[Any],
                          trainer_mixin: type | None = None, episodes: Any = None) -> Any:
        if episodes is not None:
            raise ApplianceError(MULTI_TURN_CPU_ONLY)
        # Unsloth patched TRL's classes on import: colocate mode samples through its shared-weight vLLM engine.
        colocated = {"use_vllm": True, "vllm_mode": "colocate",
                     "vllm_gpu_memory_utilization": config.gpu_memory_utilization}
        return build_grpo_trainer(model, tokenizer, dataset, {**args, **self.backend_args(), **colocated},
                                  reward_funcs, callbacks, trainer_mixin)

    def save_adapter(self, model: Any, out_dir: str | Path) -> None:
        # save_lora writes the same PEFT files as save_pretrained, from the live LoRA tensors.
        saver = getattr(model, "save_lora", None) or model.save_pretrained
        saver(str(out_dir))

    def peak_memory_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated())

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        return isinstance(error, torch.OutOfMemoryError) or "CUDA out of memory" in str(error)


def _load_adapter_weights(model: Any, adapter_dir: Path) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(adapter_dir / "adapter_model.safetensors")))


def make_backend(config: TrainConfig | None = None) -> UnslothBackend:
    return UnslothBackend(config)
