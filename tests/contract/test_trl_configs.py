"""Every GRPOConfig, SFTConfig and DPOConfig our trainers build, built by the pinned trl (the `gpu` extra's 1.15.0).

The configs come from our own builders, end to end: TrainConfig → grpo_args /
sft_args → the backend's make_*_trainer → backends.build_*_trainer →
`trl.GRPOConfig(**args)`. Only TRL's trainer classes are stood in for (they
would need a model); the config classes are TRL's. Each config must accept
every key we pass and keep every value after its `__post_init__`.

The Unsloth backend runs with a stand-in `unsloth` module (the real one needs
CUDA) that reports no bf16, so it asks for fp16, as on a T4: trl refuses
bf16=True on a machine without bf16, which a CPU is. What Unsloth's own
generated config changes on top is read from its source: a field whose
default Unsloth rewrites must be one we set or one LEFT_TO_UNSLOTH names, and
the code it runs on the GRPO options is checked in test_unsloth_sentinels.py.
"""
from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("cpu", "unsloth")
# What TrainingArguments itself rewrites, value for value: "none" means "no integrations".
NORMALISED = {"report_to": ("none", [])}
# Config fields whose default Unsloth changes (its models/rl.py `replacements`) and that we leave to it,
# each with the reason that is safe. Any other field whose default it changes must be set by our builders
# (common.FIXED_TRAINER_ARGS, presets), so a run means the same on both backends: a new change in an
# Unsloth upgrade fails here.
LEFT_TO_UNSLOTH = {
    "per_device_eval_batch_size": "eval only: our held-out evals do not run through the trainer",
    "eval_accumulation_steps": "eval only",
    "torch_empty_cache_steps": "memory only: how often the CUDA cache is emptied",
    "include_num_input_tokens_seen": "logging only",
    "generation_kwargs": "{} instead of None: no extra sampling options either way",
    "padding_free": "SFT batch layout only (Unsloth enables it per model); the same loss. DPO turns it off "
                    "(trl 1.15 dpo_trainer.py:721-728)",
}
# GRPO settings beyond the defaults: a KL term and a user's clipping override reach the config too.
GRPO_VARIATIONS = {"defaults": {}, "kl_and_clip_override": {"beta": 0.04, "epsilon": 0.1, "epsilon_high": 0.3}}


class CapturedTrainer:
    """Stands in for TRL's trainer classes: keeps what our code handed over."""

    def __init__(self, *, model: Any, args: Any, train_dataset: Any, processing_class: Any, callbacks: Any,
                 reward_funcs: Any = None, **extra: Any) -> None:
        self.model, self.args = model, args
        self.reward_funcs = reward_funcs
        self.extra = extra


@pytest.fixture
def trl(pins):
    import trl

    assert trl.__version__ == pins["trl"], f"the venv has trl {trl.__version__}, the gpu extra pins {pins['trl']}"
    return trl


@pytest.fixture
def built(trl, monkeypatch):
    """Swap TRL's trainers for CapturedTrainer and record the kwargs each config class receives.

    Returns the real config classes and `kwargs`: class name → the keyword arguments it was built with.
    """
    received: dict[str, dict[str, Any]] = {}
    real = types.SimpleNamespace(GRPOConfig=trl.GRPOConfig, SFTConfig=trl.SFTConfig, DPOConfig=trl.DPOConfig,
                                 kwargs=received)

    def recording(config_cls: type) -> Any:
        def build(**kwargs: Any) -> Any:
            received[config_cls.__name__] = kwargs
            return config_cls(**kwargs)
        return build

    monkeypatch.setattr(trl, "GRPOConfig", recording(trl.GRPOConfig))
    monkeypatch.setattr(trl, "SFTConfig", recording(trl.SFTConfig))
    monkeypatch.setattr(trl, "DPOConfig", recording(trl.DPOConfig))
    monkeypatch.setattr(trl, "GRPOTrainer", CapturedTrainer)
    monkeypatch.setattr(trl, "SFTTrainer", CapturedTrainer)
    monkeypatch.setattr(trl, "DPOTrainer", CapturedTrainer)
    # The cpu backend patches the built trainer's model for frozen-head reuse; there is no model here.
    monkeypatch.setattr("appliance.train.cpu.reuse_frozen_heads", lambda *args, **kwargs: None)
    return real


@pytest.fixture
def make_backend(monkeypatch):
    def make(name: str, config: Any) -> Any:
        from appliance.train.backends import get_backend

        if name == "unsloth":
            stand_in = types.ModuleType("unsloth")
            stand_in.FastLanguageModel = object
            stand_in.is_bfloat16_supported = lambda: False
            monkeypatch.setitem(sys.modules, "unsloth", stand_in)
            monkeypatch.delenv("UNSLOTH_VLLM_STANDBY", raising=False)  # the backend sets it; restored afterwards
        return get_backend(name, config)
    return make


def _run(config: Any, tmp_path: Path) -> Any:
    from appliance.packs import load_pack

    from .sources import ROOT

    return types.SimpleNamespace(trainer_dir=tmp_path / "trainer", pack=load_pack(config.pack, root=ROOT / "tasks"))


def _problems(config_cls: type, config: Any, kwargs: dict[str, Any]) -> list[str]:
    fields = {field.name for field in dataclasses.fields(config_cls)}
    problems = [f"{config_cls.__name__} has no field {key!r}" for key in sorted(set(kwargs) - fields)]
    for key, ours in kwargs.items():
        theirs = getattr(config, key, None)
        if NORMALISED.get(key) == (ours, theirs) or theirs == ours:
            continue
        problems.append(f"{key}: we pass {ours!r}, {config_cls.__name__} keeps {theirs!r}")
    return problems


def _left_to_unsloth(trainer_file: str, config_cls: type, kwargs: dict[str, Any]) -> list[str]:
    """Fields whose default Unsloth changes, that we do not set and LEFT_TO_UNSLOTH does not name."""
    from .sources import unsloth_default_replacements

    defaults = {field.name: field.default for field in dataclasses.fields(config_cls)}
    return [f"Unsloth changes the default of {key} from {defaults[key]!r} to {value!r} and we do not set it: "
            f"set it (common.FIXED_TRAINER_ARGS) or name it in LEFT_TO_UNSLOTH with the reason it is safe"
            for key, value in unsloth_default_replacements(trainer_file).items()
            if key in defaults and defaults[key] != value and key not in kwargs and key not in LEFT_TO_UNSLOTH]


@pytest.mark.parametrize("variation", list(GRPO_VARIATIONS))
@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo", "gspo"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_grpo_config_keeps_our_values(trl, built, make_backend, tmp_path, backend, preset, variation):
    from appliance.train.callbacks import ApplianceGRPOMixin
    from appliance.train.config import TrainConfig
    from appliance.train.grpo import grpo_args
    from appliance.train.presets import PRESETS, grpo_options

    assert set(PRESETS) == {"grpo", "dr_grpo", "dapo", "gspo"}, "a preset was added: parametrize it here"
    config = TrainConfig(backend=backend, stage="grpo", preset=preset, precision="fp32", **GRPO_VARIATIONS[variation])
    run = _run(config, tmp_path)
    trainer = make_backend(backend, config).make_grpo_trainer(
        None, None, None, config, grpo_args(config, run), [], [], trainer_mixin=ApplianceGRPOMixin)
    assert isinstance(trainer.args, built.GRPOConfig)
    assert not _problems(built.GRPOConfig, trainer.args, built.kwargs["GRPOConfig"])
    # The preset's own options arrive as such (nothing in between overrode them).
    expected = grpo_options(preset, beta=config.beta, epsilon=config.epsilon, epsilon_high=config.epsilon_high)
    assert {key: getattr(trainer.args, key) for key in expected} == expected
    if backend == "unsloth":
        assert not _left_to_unsloth("grpo_trainer", built.GRPOConfig, built.kwargs["GRPOConfig"])
        assert (trainer.args.use_vllm, trainer.args.vllm_mode) == (True, "colocate")
        assert trainer.args.vllm_gpu_memory_utilization == config.gpu_memory_utilization
    else:
        assert trainer.args.use_vllm is False and "rollout_func" in trainer.extra


@pytest.mark.parametrize("epochs", [None, 2.0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sft_config_keeps_our_values(trl, built, make_backend, tmp_path, backend, epochs):
    from appliance.train.config import TrainConfig
    from appliance.train.sft import sft_args

    config = TrainConfig(backend=backend, stage="sft", precision="fp32", epochs=epochs)
    run = _run(config, tmp_path)
    trainer = make_backend(backend, config).make_sft_trainer(None, None, None, config, sft_args(config, run, 40), [])
    assert isinstance(trainer.args, built.SFTConfig)
    assert not _problems(built.SFTConfig, trainer.args, built.kwargs["SFTConfig"])
    assert trainer.args.completion_only_loss is True and trainer.args.max_length == config.max_seq_length
    if backend == "unsloth":
        assert not _left_to_unsloth("sft_trainer", built.SFTConfig, built.kwargs["SFTConfig"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dpo_config_keeps_our_values(trl, built, make_backend, tmp_path, backend):
    from appliance.train.config import TrainConfig
    from appliance.train.dpo import dpo_args

    config = TrainConfig(backend=backend, stage="dpo", precision="fp32")
    run = _run(config, tmp_path)
    trainer = make_backend(backend, config).make_dpo_trainer(None, None, None, config, dpo_args(config, run), [])
    assert isinstance(trainer.args, built.DPOConfig)
    assert not _problems(built.DPOConfig, trainer.args, built.kwargs["DPOConfig"])
    assert trainer.args.loss_type == ["sigmoid"] and trainer.args.beta == config.beta
    assert trainer.args.max_length == config.max_seq_length and trainer.args.precompute_ref_log_probs is False
    if backend == "unsloth":
        assert not _left_to_unsloth("dpo_trainer", built.DPOConfig, built.kwargs["DPOConfig"])
