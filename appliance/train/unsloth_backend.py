"""The GPU backend: Unsloth 4-bit LoRA with a colocated vLLM engine sharing the base weights.

Import order matters: `UNSLOTH_VLLM_STANDBY` must be in the environment before
unsloth is imported, and unsloth must be imported before trl/transformers/peft
(unsloth/_gpu_init.py:20-21), so `start_run` builds this backend before anything
else loads them. This module imports nothing heavy itself (the doctor reads its
memory rule); unsloth is imported when the backend is built, which happens only
when it is selected (appliance.train.backends.get_backend).

Verified API (unsloth 2026.10.9, unsloth_zoo 2026.10.9, trl 1.15.0, vllm 0.33.0):
- FastLanguageModel.from_pretrained(model_name, max_seq_length, load_in_4bit=True,
  fast_inference, max_lora_rank, gpu_memory_utilization) starts vLLM (only with
  fast_inference=True) and builds the training model from vLLM's tensors; the
  engine is `model.vllm_engine` (unsloth models/llama.py:4295).
- Under standby (`UNSLOTH_VLLM_STANDBY=1`, our default) gpu_memory_utilization is
  replaced by a target from the GPU's size (unsloth_zoo vllm_utils.py:4445-4495);
  `standby_gpu_memory_utilization` follows that rule, so the value in force is
  reported (doctor, runs/<id>/in_force.json, every checkpoint manifest).
- Importing unsloth patches GRPOTrainer: colocated generation with the live LoRA,
  `loss_type`/`beta`/`mask_truncated_completions` left at None and resolved by
  Unsloth (our presets set them: appliance.train.presets), vLLM importance-sampling
  correction off (presets turn it back on), and changed TrainingArguments defaults
  (common.FIXED_TRAINER_ARGS sets those).
- The patched GRPOTrainer drops TRL's frozen copy of a pretrained adapter (unsloth
  models/rl.py:3779-3793), so with beta > 0 the KL reference is the base model
  (`kl_reference = "base"`; the run says so when it starts from init_adapter).
- Each generation step serves the live LoRA through `load_lora(<relative dir>,
  load_tensors=True)` (unsloth models/rl_replacements.py:5557, :5607; rl.py:4327),
  which writes adapter_config.json into that dir (unsloth_zoo vllm_utils.py:5562);
  `_keep_vllm_scratch_in` roots those dirs in the run folder instead of the cwd.
- Importing unsloth rebuilds DPOTrainer/DPOConfig the same way (models/llama.py:5591
  -> rl.py:5393, :4454-4473 walk every trl.trainer.*_trainer; :3946-3972 rebind
  trl.DPOTrainer/DPOConfig), with the TrainingArguments defaults above (rl.py:3310-3338;
  none DPO-only) and `max_length` capped at the model's max_seq_length (rl.py:3115-3127;
  ours are equal). It keeps TRL's frozen "ref" copy of the starting adapter (trl
  dpo_trainer.py:655-683): the removal above is GRPO-only (rl.py:3737), patch_functions'
  needs GRPO's `args.beta != 0.0` (rl.py:4118-4122), and Unsloth's LoRA kernels read the
  active adapter (unsloth kernels/utils.py:516-528), so TRL's `use_adapter(model, "ref")`
  (dpo_trainer.py:1304-1312) scores the reference: DPO from init_adapter is pulled toward
  that adapter, as on the cpu backend.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from ..errors import ApplianceError
from ..models import adapter_config
from .backends import build_grpo_trainer, build_sft_trainer, freeze_untrained_adapter_weights, load_adapter_weights
from .common import optimizer_args
from .config import ALL_LINEAR, ALL_LINEAR_MODULES, TrainConfig
from .multiturn import MULTI_TURN_CPU_ONLY

# Where the patched trainer's per-step live-LoRA configs go, inside the trainer folder.
VLLM_SCRATCH_DIR = "vllm_lora"


def _import_unsloth(standby: bool) -> Any:
    # Both values, so the config decides rather than a variable left in the shell
    # (unsloth_zoo vllm_utils.py:4427 reads it when the engine starts).
    os.environ["UNSLOTH_VLLM_STANDBY"] = "1" if standby else "0"
    import unsloth  # noqa: F401  (patches transformers/trl/peft on import)
    from unsloth import FastLanguageModel

    return FastLanguageModel


def standby_gpu_memory_utilization(total_vram_bytes: int) -> float:
    """The gpu_memory_utilization Unsloth uses under standby on a GPU of this size (vLLM >= 0.11).

    unsloth_zoo vllm_utils.py:4445-4482: tiers by a tenth of the VRAM in GiB, then x 0.95;
    :4487-4495 replace any other value with it, lower or higher.
    """
    tenth_gib = total_vram_bytes / 2**30 * 0.1
    tiers = ((4.0, 0.925), (2.5, 0.9), (2.0, 0.825), (1.4, 0.8), (1.0, 0.775))
    target = next((util for floor, util in tiers if tenth_gib >= floor), 0.75)
    return target * 0.95


def gpu_memory_utilization_in_force(config: TrainConfig, total_vram_bytes: int,
                                    environ: Any = os.environ) -> tuple[float | None, str]:
    """(value, why): the share of the GPU the colocated vLLM engine reserves for this run."""
    if config.stage != "grpo":
        return None, "no vLLM engine: SFT and DPO load the model without fast_inference"
    standby = config.standby or environ.get("UNSLOTH_VLLM_STANDBY", "0") != "0"
    if standby and environ.get("UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE", "0") == "0":
        value = round(standby_gpu_memory_utilization(total_vram_bytes), 4)
        return value, (f"Unsloth's standby target for a {total_vram_bytes / 2**30:.0f} GiB GPU; under standby it "
                       f"replaces gpu_memory_utilization ({config.gpu_memory_utilization} configured)")
    return config.gpu_memory_utilization, "gpu_memory_utilization as configured"


def _total_vram_bytes() -> int | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info()[1])  # what Unsloth reads (unsloth_zoo vllm_utils.py:4445, :250)


def lora_shape(config: TrainConfig) -> dict[str, Any]:
    """r, lora_alpha, target_modules and layers_to_transform (None = the config's) for this run's LoRA:
    those of init_adapter when it continues one, since the shape must match the adapter's."""
    targets = config.target_modules
    shape = {"r": config.lora_r, "lora_alpha": config.lora_alpha,
             "target_modules": list(ALL_LINEAR_MODULES) if targets == ALL_LINEAR else list(targets),
             "layers_to_transform": None}
    if config.init_adapter:
        adapter_cfg = adapter_config(config.init_adapter)
        shape.update(r=int(adapter_cfg["r"]), lora_alpha=int(adapter_cfg.get("lora_alpha", config.lora_alpha)),
                     target_modules=sorted(adapter_cfg.get("target_modules") or shape["target_modules"]),
                     layers_to_transform=adapter_cfg.get("layers_to_transform"))
    return shape


def max_lora_rank_in_force(config: TrainConfig) -> int:
    """vLLM's max_lora_rank for this run: room for the LoRA, rounded up to a rank vLLM accepts."""
    from ..generate.vllm import vllm_lora_rank

    return vllm_lora_rank(max(config.max_lora_rank, lora_shape(config)["r"]))


def require_vllm_for_sampling() -> None:
    """GRPO here samples through the colocated vLLM engine; without vLLM, say so before the model loads.

    Unsloth's loader raises a bare ImportError instead (unsloth 2026.10.9 models/loader.py:1383, "Please install
    vLLM before enabling `fast_inference`"), which would reach the user as an internal error. A GPU without vLLM
    is real: the H200 lent in session 26 ran our Unsloth SFT but could not have run its GRPO.
    """
    from ..generate.vllm import vllm_available

    if not vllm_available():
        raise ApplianceError("GRPO on the unsloth backend samples with a colocated vLLM engine and vLLM is not "
                             "installed; install the GPU extra (pip install 'rl-appliance[gpu]') or use --backend cpu.")


def _keep_vllm_scratch_in(model: Any, folder: Path) -> None:
    """Root the relative folders the patched trainer hands `load_lora` (./vllm_gen_lora, ...) in `folder`.

    The trainer captures `model.load_lora` when it builds its vLLM wrapper (rl_replacements.py:5490-5491)
    or looks it up per call (rl.py:4327), so this must run before the trainer is built. Absolute
    paths (an eval's checkpoint folder) pass through unchanged.
    """
    load_lora = getattr(model, "load_lora", None)
    if load_lora is None or getattr(load_lora, "_appliance_rooted", None) == str(folder):
        return

    def rooted_load_lora(save_directory: Any, *args: Any, **kwargs: Any) -> Any:
        path = Path(save_directory)
        return load_lora(str(path if path.is_absolute() else folder / path), *args, **kwargs)

    rooted_load_lora._appliance_rooted = str(folder)  # type: ignore[attr-defined]
    model.load_lora = rooted_load_lora


class UnslothBackend:
    name = "unsloth"
    supports_multi_turn = False  # TRL samples through the colocated vLLM engine, one turn per prompt
    # Screening runs a plain transformers forward with a KV cache (HFGenerator.completion_logprobs);
    # Unsloth patches that forward and the path has not run on a GPU yet, so it trains on every task.
    supports_screening = False
    # GRPO's KL reference (see the module docstring: Unsloth removes TRL's reference adapter there);
    # DPO keeps TRL's, the starting adapter, as on the cpu backend.
    kl_reference = "base"

    def __init__(self, config: TrainConfig | None = None) -> None:
        self.FastLanguageModel = _import_unsloth(config.standby if config else True)

    def settings_in_force(self, config: TrainConfig) -> dict[str, Any]:
        """Settings Unsloth replaces or rounds, as this run gets them (common.start_run records them)."""
        standby = config.standby or os.environ.get("UNSLOTH_VLLM_STANDBY", "0") != "0"
        settings: dict[str, Any] = {"standby": standby}
        if config.stage == "grpo":
            settings["max_lora_rank"] = max_lora_rank_in_force(config)
            total = _total_vram_bytes()
            if total is not None:
                value, why = gpu_memory_utilization_in_force(config, total)
                settings["gpu_memory_utilization"] = f"{value} ({why})"
        return settings

    def memory_knobs(self, config: TrainConfig) -> list[str]:
        """The settings that set vLLM's share of the GPU, for the out-of-memory advice."""
        if config.stage != "grpo":
            return []
        total = _total_vram_bytes()
        value, why = gpu_memory_utilization_in_force(config, total) if total else (None, "")
        if value is not None and value != config.gpu_memory_utilization:
            return [f"vLLM's share of the GPU ({value}: {why}; to choose it, put \"standby\": false and a lower "
                    f"\"gpu_memory_utilization\" in a --config file)"]
        return [f"gpu_memory_utilization ({config.gpu_memory_utilization})"]

    def load_for_training(self, config: TrainConfig) -> tuple[Any, Any]:
        from ..models import local_model_dir, resolve_model

        shape = lora_shape(config)
        grpo = config.stage == "grpo"
        if grpo:
            require_vllm_for_sampling()
        model, tokenizer = self.FastLanguageModel.from_pretrained(
            model_name=local_model_dir(resolve_model(config.model)),
            max_seq_length=config.max_seq_length,
            load_in_4bit=True,
            fast_inference=grpo,  # vLLM only where we sample
            max_lora_rank=max_lora_rank_in_force(config) if grpo else max(config.max_lora_rank, shape["r"]),
            gpu_memory_utilization=config.gpu_memory_utilization,
        )
        layers = shape["layers_to_transform"]
        if not config.init_adapter:
            layers = config.lora_layer_indices(model.config.num_hidden_layers)
        model = self.FastLanguageModel.get_peft_model(
            model, r=shape["r"], target_modules=shape["target_modules"], lora_alpha=shape["lora_alpha"],
            lora_dropout=config.lora_dropout, use_gradient_checkpointing="unsloth", random_state=config.seed,
            **({"layers_to_transform": layers} if layers else {}),
        )
        if config.init_adapter:
            load_adapter_weights(model, Path(config.init_adapter))
            freeze_untrained_adapter_weights(model, config)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return model, tokenizer

    def backend_args(self) -> dict[str, Any]:
        from unsloth import is_bfloat16_supported

        bf16 = bool(is_bfloat16_supported())
        return {"bf16": bf16, "fp16": not bf16, "optim": "adamw_8bit"}

    def _with_backend(self, args: dict[str, Any], config: TrainConfig) -> dict[str, Any]:
        """The run's arguments with this backend's; SGD, when the config asks for it, replaces 8-bit AdamW."""
        return {**args, **self.backend_args(), **optimizer_args(config)}

    def make_sft_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        return build_sft_trainer(model, tokenizer, dataset, self._with_backend(args, config), callbacks)

    def make_grpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                          args: dict[str, Any], reward_funcs: list[Callable], callbacks: list[Any],
                          trainer_mixin: type | None = None, episodes: Any = None, guide: Any = None,
                          tools_by_prompt: dict[str, Any] | None = None, refill: Any = None) -> Any:
        if episodes is not None:
            raise ApplianceError(MULTI_TURN_CPU_ONLY)
        # grpo.py refuses both before the model loads (supports_guidance and supports_resampling are not set)
        if guide is not None:
            raise ApplianceError("guide_failed_groups is not available on the unsloth backend yet.")
        if refill is not None:
            raise ApplianceError("resample_flat_groups is not available on the unsloth backend yet.")
        _keep_vllm_scratch_in(model, Path(args["output_dir"]).resolve() / VLLM_SCRATCH_DIR)
        # Unsloth patched TRL's classes on import: colocate mode samples through its shared-weight vLLM engine.
        colocated = {"use_vllm": True, "vllm_mode": "colocate",
                     "vllm_gpu_memory_utilization": config.gpu_memory_utilization}
        if tools_by_prompt is not None:
            colocated["generation_kwargs"] = {"structured_outputs": union_grammar(tools_by_prompt.values())}
        return build_grpo_trainer(model, tokenizer, dataset, {**self._with_backend(args, config), **colocated},
                                  reward_funcs, callbacks, trainer_mixin)

    def make_dpo_trainer(self, model: Any, tokenizer: Any, dataset: Any, config: TrainConfig,
                         args: dict[str, Any], callbacks: list[Any]) -> Any:
        from .dpo import build_dpo_trainer

        # trl's DPOTrainer/DPOConfig are Unsloth's patched ones by now (module docstring); no vLLM options:
        # DPO samples nothing.
        return build_dpo_trainer(model, tokenizer, dataset, self._with_backend(args, config), callbacks)

    def save_adapter(self, model: Any, out_dir: str | Path) -> None:
        # save_lora writes the same PEFT files as save_pretrained, from the live LoRA tensors, and passes
        # keywords on to it (unsloth models/_utils.py:8066-8076; unsloth_zoo vllm_utils.py:5485-5496).
        # DPO's frozen "ref" copy of the starting adapter stays out: only the trained one is saved.
        saver = getattr(model, "save_lora", None) or model.save_pretrained
        with_ref = "ref" in (getattr(model, "peft_config", None) or {})
        saver(str(out_dir), **({"selected_adapters": ["default"]} if with_ref else {}))

    def peak_memory_bytes(self) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated())

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        return isinstance(error, torch.OutOfMemoryError) or "CUDA out of memory" in str(error)


def union_grammar(tool_lists: Any) -> dict[str, str]:
    """TRL's colocated sampling takes one SamplingParams for the whole batch, so strict rollouts are held to the
    union of the prompts' tools (no unknown tool, no undeclared argument). trl 1.15.0
    generation/vllm_generation.py:674-682 turns a `structured_outputs` dict in `generation_kwargs` into
    vLLM's StructuredOutputsParams(**dict); an EBNF `grammar` goes to its xgrammar backend. Unsloth 2026.10.9
    keeps that path: its generate wrapper calls TRL's own (unsloth models/rl_replacements.py:5561-5640) and
    rebuilds SamplingParams only when `vllm_sampling_params` is set (:5627); with a structured output set it
    scores the update over the whole vocabulary instead (unsloth_zoo rl_replacements.py:1662-1665, :1760)."""
    from ..generate.strict import answer_grammar

    tools: dict[str, Any] = {}
    for tool in (tool for tools in tool_lists for tool in tools):
        name = tool.get("function", tool)["name"]
        if tools.setdefault(name, tool) != tool:
            raise ApplianceError(f"Two different tools are named {name!r} in this pack's prompts; strict rollouts "
                                 "on the vLLM backend hold every prompt to one union of tools, so give them "
                                 "distinct names or train without --strict.")
    return {"grammar": answer_grammar(list(tools.values()))}


def make_backend(config: TrainConfig | None = None) -> UnslothBackend:
    return UnslothBackend(config)
