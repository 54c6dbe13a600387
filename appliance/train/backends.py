"""The backend seam: one protocol, one module per backend, imported only when chosen.

Shared orchestration (sft.py, grpo.py) talks to a `Backend` and never asks
which one it has. `cpu` (transformers fp32 + PEFT + TRL, no vLLM) lives in
cpu.py; `unsloth` (4-bit LoRA, colocated vLLM) lives in unsloth_backend.py and
is imported only when selected, because importing unsloth patches TRL globally.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..errors import ApplianceError
from ..models import adapter_config
from .config import ALL_LINEAR

if TYPE_CHECKING:  # pragma: no cover
    from .config import TrainConfig
    from .multiturn import AgentEpisodes
    from .rollout import FlatGroupRefill, Guide

BACKEND_MODULES = {"cpu": "appliance.train.cpu", "unsloth": "appliance.train.unsloth_backend"}


class Backend(Protocol):
    """What the shared training code needs from a backend."""

    name: str
    supports_multi_turn: bool  # whether make_grpo_trainer takes `episodes` (packs with max_turns > 1)
    supports_screening: bool  # whether task_selection=uncertain can score tasks with the training model
    # Optional (read with getattr): `supports_guidance` (make_grpo_trainer accepts a `guide`, an
    # appliance.train.rollout.Guide, for guide_failed_groups; grpo.py), `supports_resampling` (it accepts a
    # `refill`, an appliance.train.rollout.FlatGroupRefill, for resample_flat_groups), `supports_sft_anchor` and
    # `supports_loss_masks` (its GRPO loss is TRL's, which our trainer mixin extends), `supports_decision_weight`
    # (its SFT loss is TRL's fused-head one, which appliance.train.sft.DecisionWeightedLoss scales), `kl_reference`
    # ("start": with beta > 0 the KL term is against the starting adapter, TRL's rule; "base": against the base model),
    # `settings_in_force(config)` (settings the backend replaces, as the run gets them) and
    # `memory_knobs(config)` (settings to name in out-of-memory advice besides the run's sizes).

    def load_for_training(self, config: "TrainConfig") -> tuple[Any, Any]:
        """Return (peft_model, tokenizer): the base model with a trainable LoRA (new or from init_adapter)."""

    def make_sft_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: "TrainConfig",
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        """A TRL SFTTrainer (or a subclass) with `args` as SFTConfig keyword arguments."""

    def make_grpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: "TrainConfig",
                          args: dict[str, Any], reward_funcs: list[Callable], callbacks: list[Any],
                          trainer_mixin: type | None = None, episodes: "AgentEpisodes | None" = None,
                          guide: "Guide | None" = None, tools_by_prompt: dict[str, Any] | None = None,
                          refill: "FlatGroupRefill | None" = None) -> Any:
        """A TRL GRPOTrainer (optionally with our mixin first in the MRO) with `args` as GRPOConfig kwargs.

        `episodes` (an `appliance.train.multiturn.AgentEpisodes`) makes every rollout a multi-turn episode;
        `guide` (only where `supports_guidance`) gives failed groups the reference answer; `tools_by_prompt`
        (prompt text → tools) holds the rollouts to those tools' schemas (appliance.generate.strict); `refill`
        (only where `supports_resampling`) replaces flat groups by fresh prompts (resample_flat_groups).
        """

    def save_adapter(self, model: Any, out_dir: str) -> None:
        """Write the LoRA as a PEFT folder (adapter_model.safetensors + adapter_config.json)."""

    def peak_memory_bytes(self) -> int | None:
        """Peak memory of this run so far (CUDA allocation or process RSS)."""

    def is_out_of_memory(self, error: BaseException) -> bool:
        """True for the backend's out-of-memory error."""


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pick_backend(requested: str = "auto") -> tuple[str, str]:
    """Choose a backend name and say why, without importing it."""
    if requested == "cpu":
        return "cpu", "requested"
    has_unsloth = importlib.util.find_spec("unsloth") is not None
    has_cuda = _cuda_available()
    if requested == "unsloth":
        if not has_cuda:
            raise ApplianceError("The unsloth backend needs a CUDA GPU and none is visible; use --backend cpu.")
        if not has_unsloth:
            raise ApplianceError("The unsloth backend is not installed; install the GPU extra: pip install 'rl-appliance[gpu]'.")
        return "unsloth", "requested"
    if requested != "auto":
        raise ApplianceError(f"Unknown backend {requested!r}; choose auto, cpu or unsloth.")
    if has_cuda and has_unsloth:
        return "unsloth", "CUDA GPU and unsloth available"
    if has_cuda:
        return "cpu", "CUDA GPU found but unsloth is not installed (pip install 'rl-appliance[gpu]'); using the cpu backend"
    return "cpu", "no CUDA GPU visible"


def auto_backend_name() -> str:
    """The backend `auto` picks (`pick_backend`), without importing torch where unsloth, the only other one, is
    not installed."""
    return "cpu" if importlib.util.find_spec("unsloth") is None else pick_backend()[0]


def get_backend(name: str, config: "TrainConfig | None" = None) -> Backend:
    """Import the chosen backend module and build its Backend object."""
    if name not in BACKEND_MODULES:
        raise ApplianceError(f"Unknown backend {name!r}; choose cpu or unsloth.")
    module = importlib.import_module(BACKEND_MODULES[name])
    return module.make_backend(config)


def build_sft_trainer(model: Any, tokenizer: Any, dataset: Any, args: dict[str, Any], callbacks: list[Any],
                      trainer_mixin: type | None = None) -> Any:
    """TRL's SFTTrainer (our mixin first in the MRO when given) from SFTConfig kwargs (after unsloth is imported,
    TRL's classes are its patched ones)."""
    from trl import SFTConfig, SFTTrainer

    trainer_cls = SFTTrainer if trainer_mixin is None else type("ApplianceSFTTrainer", (trainer_mixin, SFTTrainer), {})
    return trainer_cls(model=model, args=SFTConfig(**args), train_dataset=dataset, processing_class=tokenizer,
                       callbacks=callbacks)


class RenderedPromptIds:
    """GRPOTrainer mixin: a text prompt's token ids are `tokenizer(text, add_special_tokens=False)`.

    Our prompts are rendered chat templates that already begin with the BOS; TRL tokenizes text
    prompts with special tokens (trl 1.15 grpo_trainer.py:1716, 1.16 :1758), which doubles the BOS
    for tokenizers that add one, and the ids it builds are what vLLM samples from
    (trl/generation/vllm_generation.py:716). Eval (generate/hf.py, generate/vllm.py), the CPU rollout
    and TRL's SFT tokenization (sft_trainer.py:438, :445) already follow this rule.
    """

    def _tokenize_prompts(self, prompts: list):  # signature of trl 1.15 grpo_trainer.py:1642
        if prompts and all(isinstance(prompt, str) for prompt in prompts):
            ids = self.processing_class(text=list(prompts), add_special_tokens=False)["input_ids"]
            return ids, None, {}
        return super()._tokenize_prompts(prompts)  # conversational prompts: TRL's chat-template path


def build_grpo_trainer(model: Any, tokenizer: Any, dataset: Any, args: dict[str, Any],
                       reward_funcs: list[Callable], callbacks: list[Any], trainer_mixin: type | None = None,
                       rollout_func: Callable | None = None) -> Any:
    """TRL's GRPOTrainer (our mixin first in the MRO when given) from GRPOConfig kwargs."""
    from trl import GRPOConfig, GRPOTrainer

    bases = (*([trainer_mixin] if trainer_mixin is not None else []), RenderedPromptIds, GRPOTrainer)
    trainer_cls = type("ApplianceGRPOTrainer", bases, {})
    extra = {} if rollout_func is None else {"rollout_func": rollout_func}
    return trainer_cls(model=model, reward_funcs=reward_funcs, args=GRPOConfig(**args), train_dataset=dataset,
                       processing_class=tokenizer, callbacks=callbacks, **extra)


# ---------------------------------------------------------------- starting from an adapter

def adapter_key_mismatch(model: Any, adapter_dir: str | Path) -> tuple[list[str], list[str]]:
    """(missing, unexpected): the model's LoRA tensors the folder lacks, and the folder's that fit no module.

    Keys are compared as PEFT saves them (`get_peft_model_state_dict`, adapter name removed), so
    the check does not depend on how the weights were loaded.
    """
    from peft import get_peft_model_state_dict
    from safetensors import safe_open

    with safe_open(str(Path(adapter_dir) / "adapter_model.safetensors"), framework="pt") as handle:
        saved = set(handle.keys())
    expected = set(get_peft_model_state_dict(model))
    return sorted(expected - saved), sorted(saved - expected)


def check_adapter_loaded(model: Any, adapter_dir: str | Path) -> None:
    """Raise unless every LoRA tensor of `model` came from `adapter_dir` and every tensor there was used.

    PEFT loads with strict=False (peft utils/save_and_load.py:649) and warns at most, so an adapter
    from another model, or with renamed keys, would otherwise start training from a fresh LoRA.
    """
    missing, unexpected = adapter_key_mismatch(model, adapter_dir)
    if missing or unexpected:
        parts = []
        if unexpected:
            parts.append(f"{len(unexpected)} of its tensors fit no LoRA module of the model (first: {unexpected[0]})")
        if missing:
            parts.append(f"{len(missing)} of the model's LoRA tensors are not in it (first: {missing[0]})")
        raise ApplianceError(f"The adapter {adapter_dir} does not fit this model: {'; '.join(parts)}. "
                             f"Start from an adapter trained on the same base model.")


_LAYER_INDEX = re.compile(r"\.layers\.(\d+)\.")


def freeze_untrained_adapter_weights(model: Any, config: TrainConfig) -> None:
    """Continuing init_adapter: only its LoRA weights in the last `lora_layers` layers, on `lora_targets`, train.

    The rest stay as loaded (and are saved with the adapter); backward then stops at the lowest layer
    that trains, as with a fresh LoRA on the last N layers.
    """
    if not config.init_adapter:
        return
    require_targets_in_adapter(config)
    layers = config.lora_layer_indices(model.config.num_hidden_layers)  # None: every layer
    modules = None if config.target_modules == ALL_LINEAR else set(config.target_modules)
    for name, param in model.named_parameters():
        if "lora_" not in name:
            continue
        layer = _LAYER_INDEX.search(name)
        outside_layers = layers is not None and layer is not None and int(layer.group(1)) not in layers
        outside_modules = modules is not None and _lora_module_name(name) not in modules
        if outside_layers or outside_modules:
            param.requires_grad_(False)


def _lora_module_name(parameter_name: str) -> str:
    """`...layers.3.mlp.up_proj.lora_A.default.weight` -> `up_proj`."""
    return parameter_name.split(".lora_", 1)[0].rsplit(".", 1)[-1]


def require_targets_in_adapter(config: TrainConfig) -> None:
    """One sentence when lora_targets names a module init_adapter has no LoRA on (checked before a model loads)."""
    if not config.init_adapter or config.target_modules == ALL_LINEAR:
        return
    adapted = adapter_config(config.init_adapter).get("target_modules") or []
    if isinstance(adapted, str):  # a regex or `all-linear`: PEFT resolves it only against a loaded model
        return
    missing = [name for name in config.target_modules if name not in adapted]
    if missing:
        raise ApplianceError(f"lora_targets names {', '.join(missing)}, which the adapter {config.init_adapter} has no "
                             f"LoRA on; with init_adapter choose among its modules: {', '.join(sorted(adapted))}.")


def load_adapter_weights(model: Any, adapter_dir: str | Path) -> None:
    """Copy a PEFT folder's LoRA tensors into `model`'s LoRA of the same shape, refusing a partial fit."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    check_adapter_loaded(model, adapter_dir)  # the keys first: nothing is half-loaded
    result = set_peft_model_state_dict(model, load_file(str(Path(adapter_dir) / "adapter_model.safetensors")))
    if result.unexpected_keys:  # peft's own remapping disagreed with get_peft_model_state_dict
        raise ApplianceError(f"The adapter {adapter_dir} does not fit this model: {len(result.unexpected_keys)} of "
                             f"its tensors were not used (first: {result.unexpected_keys[0]}).")
