"""The backend seam: one protocol, one module per backend, imported only when chosen.

Shared orchestration (sft.py, grpo.py) talks to a `Backend` and never asks
which one it has. `cpu` (transformers fp32 + PEFT + TRL, no vLLM) lives in
cpu.py; `unsloth` (4-bit LoRA, colocated vLLM) lives in unsloth_backend.py and
is imported only when selected, because importing unsloth patches TRL globally.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..errors import ApplianceError

if TYPE_CHECKING:  # pragma: no cover
    from .config import TrainConfig
    from .multiturn import AgentEpisodes

BACKEND_MODULES = {"cpu": "appliance.train.cpu", "unsloth": "appliance.train.unsloth_backend"}


class Backend(Protocol):
    """What the shared training code needs from a backend."""

    name: str
    supports_multi_turn: bool  # whether make_grpo_trainer takes `episodes` (packs with max_turns > 1)
    supports_screening: bool  # whether task_selection=uncertain can score tasks with the training model

    def load_for_training(self, config: "TrainConfig") -> tuple[Any, Any]:
        """Return (peft_model, tokenizer): the base model with a trainable LoRA (new or from init_adapter)."""

    def make_sft_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: "TrainConfig",
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        """A TRL SFTTrainer (or a subclass) with `args` as SFTConfig keyword arguments."""

    def make_grpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: "TrainConfig",
                          args: dict[str, Any], reward_funcs: list[Callable], callbacks: list[Any],
                          trainer_mixin: type | None = None, episodes: "AgentEpisodes | None" = None) -> Any:
        """A TRL GRPOTrainer (optionally with our mixin first in the MRO) with `args` as GRPOConfig kwargs.

        `episodes` (an `appliance.train.multiturn.AgentEpisodes`) makes every rollout a multi-turn episode.
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


def get_backend(name: str, config: "TrainConfig | None" = None) -> Backend:
    """Import the chosen backend module and build its Backend object."""
    if name not in BACKEND_MODULES:
        raise ApplianceError(f"Unknown backend {name!r}; choose cpu or unsloth.")
    module = importlib.import_module(BACKEND_MODULES[name])
    return module.make_backend(config)


def build_sft_trainer(model: Any, tokenizer: Any, dataset: Any, args: dict[str, Any], callbacks: list[Any]) -> Any:
    """TRL's SFTTrainer from SFTConfig kwargs (after unsloth is imported, TRL's classes are its patched ones)."""
    from trl import SFTConfig, SFTTrainer

    return SFTTrainer(model=model, args=SFTConfig(**args), train_dataset=dataset, processing_class=tokenizer,
                      callbacks=callbacks)


def build_grpo_trainer(model: Any, tokenizer: Any, dataset: Any, args: dict[str, Any],
                       reward_funcs: list[Callable], callbacks: list[Any], trainer_mixin: type | None = None,
                       rollout_func: Callable | None = None) -> Any:
    """TRL's GRPOTrainer (our mixin first in the MRO when given) from GRPOConfig kwargs."""
    from trl import GRPOConfig, GRPOTrainer

    trainer_cls = GRPOTrainer if trainer_mixin is None else type(
        "ApplianceGRPOTrainer", (trainer_mixin, GRPOTrainer), {})
    extra = {} if rollout_func is None else {"rollout_func": rollout_func}
    return trainer_cls(model=model, reward_funcs=reward_funcs, args=GRPOConfig(**args), train_dataset=dataset,
                       processing_class=tokenizer, callbacks=callbacks, **extra)
