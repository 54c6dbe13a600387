"""The CPU backend: transformers in fp32, a PEFT LoRA, the stock TRL trainers (SFT, GRPO, DPO).

No quantisation and no vLLM: GRPO samples with our batched transformers
generator through a TRL `rollout_func` (appliance.train.rollout). Four settings
make a CPU step 4-5x faster than TRL's defaults (bench/bench_train_step.py):
no gradient checkpointing, the fused LM head scoring only labelled positions,
LoRA on the last third of the layers, and that shared-prefix sampler. Below the
LoRA, the prompts' shared heads are computed once, not at every step
(appliance.train.frozen_heads). Needs
trl >= 1.16 (1.15's GRPOTrainer patches a fused LM head whose kernels need
Triton, which a CPU does not have). Also works on a CUDA
machine without Unsloth (then `use_cpu` is off and the GPU is used in fp32).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .backends import build_grpo_trainer, build_sft_trainer, check_adapter_loaded, freeze_untrained_adapter_weights
from .config import TrainConfig


def use_bf16_autocast(precision: str) -> bool:
    """bf16 mixed precision where the hardware runs it natively.

    On a CPU with AMX/AVX512-BF16 it makes a LoRA step on SmolLM2-135M about 3x faster than fp32
    (8 x 700 tokens: 15 s vs 45 s, measured); without native support it would be slower, so auto
    keeps fp32 there.
    """
    if precision in ("fp32", "bf16"):
        return precision == "bf16"
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def auto_precision_in_force() -> str:
    """What `precision=auto` trains in on this machine, and why (`appliance doctor` shows it)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if use_bf16_autocast("auto"):
        return f"bf16 autocast ({capability}, native bf16)"
    # Measured in session 11 (docs/learning.md): SFT steps 21.5 s on an AVX2 EPYC vs 9.67 s with AMX.
    return f"fp32 ({capability}, no native bf16: training steps about 2.2x as long as with AMX)"


def cpu_default_lora_layers(model: Any) -> int:
    """The last third of the decoder layers: backward through the rest is most of a CPU step's cost."""
    return -(-int(model.config.num_hidden_layers) // 3)


def score_only_labelled_positions() -> bool:
    """Make TRL's fused LM head project only the positions that have a label, on a CPU too.

    TRL 1.16 scores every position when Triton is not in use (to keep tile shapes fixed on
    compilers like Neuron's); on a CPU that means the 49k-word LM head runs over the whole
    ~650-token prompt although only the ~45 completion tokens carry loss. Deciding "compact"
    as on CUDA keeps TRL's own torch kernels and made a SmolLM2 step 2.5x faster in an ad-hoc
    run (8 x 640 tokens: 13.4 s -> 5.4 s); bench/bench_train_step.py measures it with the rest. Returns False, changing nothing, if TRL's internals moved.
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None or getattr(decide, "_appliance_compact", False):
        return decide is not None

    def compact_on_cpu(device: Any) -> bool:
        return device.type == "cpu" or decide(device)

    compact_on_cpu._appliance_compact = True  # type: ignore[attr-defined]
    trl_utils._use_triton = compact_on_cpu
    return True


def reuse_frozen_heads(model: Any, prompts: list[list[int]]) -> Any:
    """Skip the frozen lower layers on the prompt heads the dataset's prompts share (appliance.train.frozen_heads).

    `prompts` are the dataset's prompt ids (`prompt_ids`). Returns the head cache, or None where it does not apply.
    """
    from .frozen_heads import install_frozen_heads

    return install_frozen_heads(model, prompts) if prompts else None


def prompt_ids(tokenizer: Any, dataset: Any) -> list[list[int]]:
    """The dataset's text prompts as TRL tokenizes them (no special tokens added: they are rendered chat
    templates), in row order; empty when it has none."""
    prompts = [p for p in dataset["prompt"] if isinstance(p, str)] if "prompt" in dataset.column_names else []
    return tokenizer(prompts, add_special_tokens=False)["input_ids"] if prompts else []


class CpuBackend:
    name = "cpu"
    supports_multi_turn = True
    supports_screening = True
    supports_guidance = True  # make_grpo_trainer takes `guide` (guide_failed_groups)
    supports_resampling = True  # make_grpo_trainer takes `refill` (resample_flat_groups)
    supports_sft_anchor = True  # ApplianceGRPOMixin.compute_loss adds it to TRL's loss (anchor.py)
    supports_decision_weight = True  # its SFT loss is TRL's fused-head one (appliance.train.sft.DecisionWeightedLoss)
    supports_batch_order = True  # its SFTTrainer takes appliance.train.batches' sampler
    supports_loss_masks = True  # ApplianceGRPOMixin masks TRL's loss (keep_decisions, the negative-half options)
    kl_reference = "start"  # TRL keeps a frozen copy of init_adapter as the KL reference

    def __init__(self, config: TrainConfig | None = None) -> None:
        import torch

        self.use_cpu = not torch.cuda.is_available()
        self.bf16 = use_bf16_autocast(config.precision if config else "auto")
        score_only_labelled_positions()

    def load_for_training(self, config: TrainConfig) -> tuple[Any, Any]:
        from peft import LoraConfig, get_peft_model
        from transformers import set_seed

        from ..models import load_model

        set_seed(config.seed)  # the LoRA A init is random: same seed, same starting adapter
        if config.init_adapter:
            model, tokenizer = load_model(config.model, adapter=config.init_adapter, dtype="float32",
                                          for_training=True)
            check_adapter_loaded(model, config.init_adapter)  # PeftModel.from_pretrained only warns
            freeze_untrained_adapter_weights(model, config)
            return model, tokenizer
        model, tokenizer = load_model(config.model, dtype="float32", for_training=True)
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          bias="none", task_type="CAUSAL_LM",
                          **config.peft_targets(model.config.num_hidden_layers, cpu_default_lora_layers(model)))
        return get_peft_model(model, lora), tokenizer

    def backend_args(self) -> dict[str, Any]:
        # Weights and optimizer stay fp32; bf16 only autocasts the matmuls (mixed precision).
        # TRL turns gradient checkpointing on by default; a small model on a CPU has memory to spare,
        # and checkpointing makes PEFT require input grads, so backward would run through every
        # layer even when only the last few are adapted (a 4x slower step, measured).
        return {"use_cpu": self.use_cpu, "bf16": self.bf16, "fp16": False, "gradient_checkpointing": False}

    def make_sft_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        from .batches import row_heads
        from .sft import SFTTrainerMixin

        trainer = build_sft_trainer(model, tokenizer, dataset, {**args, **self.backend_args()}, callbacks,
                                    SFTTrainerMixin)
        trainer.appliance_decision_weight = config.decision_weight
        prompts = prompt_ids(tokenizer, dataset)  # once, for the batch order and the head cache
        if config.batch_order == "by_head":
            trainer.appliance_row_heads = row_heads(prompts)
        reuse_frozen_heads(trainer.model, prompts)
        return trainer

    def make_grpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                          args: dict[str, Any], reward_funcs: list[Callable], callbacks: list[Any],
                          trainer_mixin: type | None = None, episodes: Any = None, guide: Any = None,
                          tools_by_prompt: dict[str, Any] | None = None, refill: Any = None) -> Any:
        rollout = self.rollout_func(tokenizer, config, episodes, guide, tools_by_prompt, refill)
        trainer = build_grpo_trainer(model, tokenizer, dataset, {**args, **self.backend_args(), "use_vllm": False},
                                     reward_funcs, callbacks, trainer_mixin, rollout_func=rollout)
        reuse_frozen_heads(trainer.model, prompt_ids(tokenizer, dataset))
        return trainer

    def make_dpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        from .dpo import build_dpo_trainer

        return build_dpo_trainer(model, tokenizer, dataset, {**args, **self.backend_args()}, callbacks)

    def rollout_func(self, tokenizer: Any, config: TrainConfig, episodes: Any = None, guide: Any = None,
                     tools_by_prompt: dict[str, Any] | None = None, refill: Any = None) -> Callable:
        """Sampling that prefills each prompt once per group (appliance.train.rollout; with `guide`, failed
        groups get the reference answer; with `refill`, flat groups are replaced by fresh prompts), or, given
        `episodes`, whole multi-turn episodes in the tasks' worlds (appliance.train.multiturn)."""
        import os

        from .multiturn import MultiTurnRollout
        from .rollout import SharedPrefixRollout

        # TRL warns that rollout_func is experimental on every run; we chose it knowingly (pinned TRL).
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        if episodes is not None:
            return MultiTurnRollout(tokenizer, config, episodes)
        return SharedPrefixRollout(tokenizer, config, guide, tools_by_prompt, refill)

    def save_adapter(self, model: Any, out_dir: str | Path) -> None:
        # DPO adds a frozen "ref" copy of the starting adapter (trl dpo_trainer.py:666-690); only the trained one is saved.
        if "ref" in (getattr(model, "peft_config", None) or {}):
            model.save_pretrained(str(out_dir), selected_adapters=["default"])
            return
        model.save_pretrained(str(out_dir))

    def peak_memory_bytes(self) -> int | None:
        """Peak resident memory of this process (CPU) or peak CUDA allocation."""
        import torch

        if not self.use_cpu:
            return int(torch.cuda.max_memory_allocated())
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        return isinstance(error, torch.OutOfMemoryError)


def make_backend(config: TrainConfig | None = None) -> CpuBackend:
    return CpuBackend(config)
