"""The GPU path's contract with the pinned sources (unsloth 2026.10.9, unsloth_zoo 2026.10.9, trl 1.15,
vllm 0.33), checked on a CPU with stand-ins for what only a GPU runs: an Unsloth model with
`fast_generate` and no engine, a sealed checkpoint, a LoRA file with a wrong key, a BOS-adding tokenizer.
Each behaviour relied upon is cited (file:line) where the code depends on it.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.errors import ApplianceError
from appliance.generate.vllm import VLLMGenerator
from appliance.train import common, unsloth_backend
from appliance.train.config import TrainConfig
from appliance.train.unsloth_backend import UnslothBackend

GIB = 2**30


# ---------------------------------------------------------------- stand-ins

@dataclasses.dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclasses.dataclass
class FakeRequestOutput:
    prompt_token_ids: list[int]
    outputs: list[FakeCompletion]


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    """vLLM's offline API as appliance.generate.vllm reaches it (not in sys.modules: TRL probes vllm there)."""
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams
    monkeypatch.setattr("appliance.generate.vllm.import_vllm", lambda: module)
    return module


class CharTokenizer:
    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) for c in text] for text in texts]}


class UnslothModelWithoutEngine:
    """An Unsloth model loaded with fast_inference=False: `fast_generate` is transformers' generate
    (unsloth models/llama.py:4222) and there is no `vllm_engine` and no `load_lora`."""

    def fast_generate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("this is transformers' generate, not a vLLM engine")


class UnslothModelWithEngine:
    """An Unsloth model with its colocated engine, whose `load_lora` behaves as unsloth_zoo's:
    with load_tensors=True it serves the live tensors and writes the live adapter_config.json
    into the folder (vllm_utils.py:7215-7218, :5562); otherwise it points vLLM at the folder."""

    def __init__(self) -> None:
        self.vllm_engine = self
        self.calls: list[Any] = []
        self.loads: list[tuple[str, bool]] = []

    def get_tokenizer(self) -> Any:
        return CharTokenizer()

    def load_lora(self, save_directory: str, load_tensors: bool = False) -> Any:
        self.loads.append((save_directory, load_tensors))
        if load_tensors:
            Path(save_directory).mkdir(parents=True, exist_ok=True)
            (Path(save_directory) / "adapter_config.json").write_text('{"r": 16, "live": true}')
            return ("live-tensors", save_directory)
        return ("folder", save_directory)

    def fast_generate(self, prompts, sampling_params=None, lora_request=None, use_tqdm=True):
        self.calls.append((prompts, lora_request))
        return [FakeRequestOutput(p["prompt_token_ids"], [FakeCompletion("{}", [5])]) for p in prompts]


class FakeWriter:
    last_step = -1

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def update_run(self, **kwargs: Any) -> None:
        self.rows.append(kwargs)

    def record(self, event: Any) -> None:
        pass


class FakeWorkspace:
    def new_id(self, stage: str) -> str:
        return f"{stage}-1"

    def writer(self, run_id: str) -> FakeWriter:
        return FakeWriter()


FAKE_PACK = SimpleNamespace(name="toy", data_hash=lambda: "sha256:0")


def bare_unsloth_backend() -> UnslothBackend:
    """The backend object without importing unsloth (its __init__ does that)."""
    return UnslothBackend.__new__(UnslothBackend)


def run_context(tmp_path: Path, backend: Any = None, **config: Any) -> common.RunContext:
    return common.RunContext(config=TrainConfig(**config), run_id="grpo-1", run_dir=tmp_path, workspace=None,
                             writer=None, backend=backend, sink=lambda event: None, pack=FAKE_PACK)


# ---------------------------------------------------------------- 1. an engine, not an attribute

def test_an_unsloth_model_without_vllm_is_not_offered_to_eval_as_an_engine(tmp_path):
    run = run_context(tmp_path, stage="sft")
    assert "engine" not in run._eval_context(UnslothModelWithoutEngine())
    with_engine = UnslothModelWithEngine()
    assert run._eval_context(with_engine)["engine"] is with_engine
    with pytest.raises(ApplianceError, match="without fast_inference"):
        VLLMGenerator(UnslothModelWithoutEngine())


# ---------------------------------------------------------------- 2. the memory share in force

def test_standby_replaces_gpu_memory_utilization_by_the_gpu_size_rule():
    grpo = TrainConfig(stage="grpo", gpu_memory_utilization=0.6)
    # unsloth_zoo vllm_utils.py:4470-4482 (vLLM >= 0.11): tier by a tenth of the VRAM, then x 0.95.
    for total_gib, tier in ((140, 0.925), (25, 0.9), (20, 0.825), (15, 0.8), (11, 0.775), (8, 0.75)):
        value, why = unsloth_backend.gpu_memory_utilization_in_force(grpo, total_gib * GIB, environ={})
        assert value == round(tier * 0.95, 4) and "standby" in why, total_gib
    no_standby = dataclasses.replace(grpo, standby=False)
    assert unsloth_backend.gpu_memory_utilization_in_force(no_standby, 80 * GIB, environ={})[0] == 0.6
    # vllm_utils.py:4443: the override keeps the caller's value under standby too
    override = {"UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE": "1"}
    assert unsloth_backend.gpu_memory_utilization_in_force(grpo, 80 * GIB, environ=override)[0] == 0.6
    # vllm_utils.py:4427: a standby variable left in the shell turns it on whatever the config says
    assert unsloth_backend.gpu_memory_utilization_in_force(
        no_standby, 80 * GIB, environ={"UNSLOTH_VLLM_STANDBY": "1"})[0] == round(0.925 * 0.95, 4)
    assert unsloth_backend.gpu_memory_utilization_in_force(TrainConfig(stage="sft"), 80 * GIB)[0] is None


def test_out_of_memory_advice_names_the_value_in_force(tmp_path, monkeypatch):
    monkeypatch.setattr(unsloth_backend, "_total_vram_bytes", lambda: 80 * GIB)
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE", raising=False)
    standby = str(common.oom_error(run_context(tmp_path, bare_unsloth_backend(), stage="grpo")))
    assert "0.8788" in standby and "standby" in standby
    assert "gpu_memory_utilization (0.6)" not in standby  # lowering it would change nothing
    monkeypatch.setenv("UNSLOTH_VLLM_STANDBY", "0")
    plain = str(common.oom_error(run_context(tmp_path, bare_unsloth_backend(), stage="grpo", standby=False)))
    assert "gpu_memory_utilization (0.6)" in plain
    cpu = str(common.oom_error(run_context(tmp_path, SimpleNamespace(name="cpu"), stage="grpo")))
    assert "gpu_memory_utilization" not in cpu and "--resume grpo-1 keeps this run's settings" in cpu


def test_doctor_and_the_run_folder_say_which_share_is_in_force(tmp_path, monkeypatch):
    from appliance import doctor

    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE", raising=False)
    monkeypatch.setattr(doctor, "_vram_total_bytes", lambda: 80 * GIB)
    assert doctor.collect()["vllm_gpu_memory_utilization"].startswith("0.8788 (Unsloth's standby target")
    monkeypatch.setattr(doctor, "_vram_total_bytes", lambda: None)
    assert doctor.collect()["vllm_gpu_memory_utilization"].startswith("not used")

    monkeypatch.setattr(unsloth_backend, "_total_vram_bytes", lambda: 80 * GIB)
    run = start_fake_run(tmp_path, monkeypatch, bare_unsloth_backend(), stage="grpo", lora_r=24, max_lora_rank=24)
    in_force = json.loads((run.run_dir / common.IN_FORCE_FILE).read_text())
    assert in_force["gpu_memory_utilization"].startswith("0.8788") and in_force["max_lora_rank"] == 32
    assert TrainConfig.load(run.run_dir / common.CONFIG_FILE).gpu_memory_utilization == 0.6  # still loadable


def start_fake_run(tmp_path: Path, monkeypatch, backend: Any, events: list | None = None,
                   **config: Any) -> common.RunContext:
    monkeypatch.setattr(common, "pick_backend", lambda requested: (backend.name, "test"))
    monkeypatch.setattr(common, "get_backend", lambda name, config: backend)
    monkeypatch.setattr(common, "_describe_base_model", lambda spec: {"id": spec})
    sink = events.append if events is not None else (lambda event: None)
    return common.start_run(TrainConfig(workspace=str(tmp_path), **config), config.get("stage", "grpo"), sink,
                            pack=FAKE_PACK, workspace=FakeWorkspace())


# ---------------------------------------------------------------- 3. defaults Unsloth changes

# unsloth models/rl.py:3310-3341 (every trainer config) and :3355-3367 (GRPOConfig), as of 2026.10.9.
UNSLOTH_DEFAULTS = {
    "logging_nan_inf_filter": False, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
    "weight_decay": 0.001, "seed": 3407, "learning_rate": 5e-05, "logging_steps": 1, "report_to": "none",
    "auto_find_batch_size": False, "warmup_steps": 0.1,
}
UNSLOTH_GRPO_DEFAULTS = {
    "num_generations": 8, "loss_type": None, "beta": None, "vllm_importance_sampling_correction": False,
    "router_aux_loss_coef": 0.0, "mask_truncated_completions": None,
}
# Replaced too, but set by a backend or without effect on what is learned, so not pinned here: optim,
# bf16/fp16 (backend_args), vllm_mode (read only with use_vllm, which the unsloth backend sets with
# "colocate"), generation_kwargs ({} and None both add nothing), torch_empty_cache_steps,
# dataloader_pin_memory, padding_free, include_tokens_per_second, include_num_input_tokens_seen (memory,
# speed, log counters), per_device_eval_batch_size, eval_accumulation_steps (no trainer eval), max_seq_length.


def with_defaults(config_cls: type, defaults: dict[str, Any]) -> type:
    """`config_cls` with other field defaults, as Unsloth's patched config classes have."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    changed = {k: v for k, v in defaults.items() if k in names}
    namespace = {"__annotations__": {k: Any for k in changed}, **changed}
    return dataclasses.dataclass(type(f"Unsloth{config_cls.__name__}", (config_cls,), namespace))


@pytest.mark.parametrize("stage", ["sft", "grpo", "dpo"])
def test_run_arguments_mean_the_same_under_unsloths_defaults(stage, tmp_path):
    from trl import DPOConfig, GRPOConfig, SFTConfig

    from appliance.train.dpo import dpo_args
    from appliance.train.grpo import grpo_args
    from appliance.train.sft import sft_args

    config = TrainConfig(stage=stage)
    run = SimpleNamespace(trainer_dir=tmp_path / "trainer", pack=FAKE_PACK)
    if stage == "sft":
        config_cls, defaults, args = SFTConfig, UNSLOTH_DEFAULTS, sft_args(config, run, 16)
    elif stage == "dpo":  # Unsloth's DPOConfig gets the shared replacements only (rl.py:3310-3338)
        config_cls, defaults, args = DPOConfig, UNSLOTH_DEFAULTS, dpo_args(config, run)
    else:
        config_cls, args = GRPOConfig, grpo_args(config, run)
        defaults = {**UNSLOTH_DEFAULTS, **UNSLOTH_GRPO_DEFAULTS}
    args = {**args, "use_cpu": True, "bf16": False}
    plain, patched = config_cls(**args), with_defaults(config_cls, defaults)(**args)
    for name in defaults:
        if hasattr(plain, name):
            assert getattr(patched, name) == getattr(plain, name), name
    assert (plain.weight_decay, plain.warmup_steps, plain.logging_nan_inf_filter) == (0.0, 0, False)


# ---------------------------------------------------------------- 4. one BOS

@pytest.fixture(scope="module")
def bos_tokenizer():
    """The tiny tokenizer made to add a BOS of its own, with a template that writes one (Llama 3's habit)."""
    from tokenizers.processors import TemplateProcessing

    from appliance.tiny import CHAT_TEMPLATE, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"bos_token": "<|begin_of_text|>"})
    bos = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    tokenizer._tokenizer.post_processor = TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    tokenizer.chat_template = "{{ bos_token }}" + CHAT_TEMPLATE
    assert tokenizer("Plot it.")["input_ids"][0] == bos
    return tokenizer


class FakeLLM:
    """A `vllm.LLM` that records what it is given."""

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def generate(self, prompts, sampling_params=None, lora_request=None, use_tqdm=True):
        self.prompts.extend(prompts)
        return [FakeRequestOutput(p["prompt_token_ids"], [FakeCompletion("{}", [5])]) for p in prompts]


def test_prompt_token_ids_agree_on_every_path_for_a_bos_adding_tokenizer(bos_tokenizer, fake_vllm, monkeypatch):
    from appliance.generate.hf import HFGenerator
    from appliance.prompting import render_prompt
    from appliance.tiny import build_tiny_model
    from appliance.train import backends
    from appliance.train.backends import RenderedPromptIds
    from appliance.train.rollout import SharedPrefixRollout

    tokenizer = bos_tokenizer
    prompts = [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": text}])
               for text in ("Plot it.", "Delete the task.")]
    expected = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    bos = tokenizer.bos_token_id
    assert all(ids[0] == bos and ids[1] != bos for ids in expected)  # the template's BOS, once

    llm = FakeLLM()  # eval through vLLM
    samples = VLLMGenerator(llm, tokenizer=tokenizer).generate(prompts, max_new_tokens=4)
    assert [p["prompt_token_ids"] for p in llm.prompts] == expected
    assert [s[0].prompt_tokens for s in samples] == [len(ids) for ids in expected]

    class FakeTRLTrainer:  # GRPO through TRL's own tokenization (the unsloth backend)
        def __init__(self, **kwargs: Any) -> None:
            self.processing_class = kwargs["processing_class"]

        def _tokenize_prompts(self, prompts):  # trl 1.15 grpo_trainer.py:1716: special tokens added
            return self.processing_class(text=prompts)["input_ids"], None, {}

    monkeypatch.setattr("trl.GRPOTrainer", FakeTRLTrainer)
    monkeypatch.setattr("trl.GRPOConfig", lambda **kwargs: kwargs)
    trainer = backends.build_grpo_trainer(None, tokenizer, None, {}, [], [])
    assert isinstance(trainer, RenderedPromptIds)
    assert trainer._tokenize_prompts(prompts)[0] == expected

    model = build_tiny_model(len(tokenizer))  # eval and GRPO sampling on the CPU
    hf = HFGenerator(model, tokenizer, batch_size=2).generate(prompts, max_new_tokens=2)
    assert [s[0].prompt_tokens for s in hf] == [len(ids) for ids in expected]
    rollout = SharedPrefixRollout(tokenizer, TrainConfig(stage="grpo", max_completion_tokens=2))
    out = rollout([prompts[0]] * 2 + [prompts[1]] * 2, SimpleNamespace(model=model))
    assert out["prompt_ids"] == [expected[0]] * 2 + [expected[1]] * 2


# ---------------------------------------------------------------- 5. an adapter that fits, or an error

@pytest.fixture
def saved_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    from appliance.models import load_model

    model, _ = load_model(tiny_model_dir)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                      task_type="CAUSAL_LM")
    get_peft_model(model, lora).save_pretrained(tmp_path / "adapter")
    return tmp_path / "adapter"


def with_renamed_key(adapter: Path, out: Path) -> Path:
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(adapter, out)
    tensors = load_file(str(out / "adapter_model.safetensors"))
    first = sorted(tensors)[0]
    tensors[first.replace("q_proj", "q_projection")] = tensors.pop(first)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    return out


def test_an_adapter_that_does_not_fit_is_refused_on_both_backends(tiny_model_dir, saved_adapter, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from appliance.models import load_model
    from appliance.train.backends import load_adapter_weights
    from appliance.train.cpu import CpuBackend

    def fresh_lora():
        model, _ = load_model(tiny_model_dir)
        return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                task_type="CAUSAL_LM"))

    wrong = with_renamed_key(saved_adapter, tmp_path / "wrong")
    with pytest.raises(ApplianceError, match="fit no LoRA module.*not in it"):
        load_adapter_weights(fresh_lora(), wrong)  # the unsloth backend's loader
    with pytest.raises(ApplianceError, match="does not fit this model"):
        CpuBackend().load_for_training(TrainConfig(model=str(tiny_model_dir), stage="sft", init_adapter=str(wrong)))

    model = fresh_lora()
    load_adapter_weights(model, saved_adapter)
    saved = load_file(str(saved_adapter / "adapter_model.safetensors"))
    live = {name.replace(".default", ""): p for name, p in model.named_parameters() if "lora_" in name}
    assert all(torch.equal(live[key], value) for key, value in saved.items())


def test_beta_above_zero_from_an_adapter_warns_where_the_reference_is_the_base(tmp_path, monkeypatch):
    unsloth = bare_unsloth_backend()
    grpo = TrainConfig(stage="grpo", beta=0.04, init_adapter="checkpoints/sft-1/step-00040")
    assert "toward the base model" in common.kl_reference_warning(unsloth, grpo)
    assert common.kl_reference_warning(unsloth, dataclasses.replace(grpo, beta=0.0)) is None
    assert common.kl_reference_warning(SimpleNamespace(name="cpu", kl_reference="start"), grpo) is None

    monkeypatch.setattr(unsloth_backend, "_total_vram_bytes", lambda: None)
    adapter = tmp_path / "sft-adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 16, "target_modules": ["q_proj"]}')
    events: list[Any] = []
    start_fake_run(tmp_path, monkeypatch, unsloth, events, stage="grpo", beta=0.04, init_adapter=str(adapter))
    warnings = [e.message for e in events if getattr(e, "level", None) == "warning"]
    assert any("toward the base model" in w for w in warnings)


# ---------------------------------------------------------------- 6. a checkpoint's own files, untouched

def test_evaluating_a_checkpoint_serves_its_own_files_and_writes_nothing_there(tmp_path, fake_vllm):
    sealed = tmp_path / "checkpoints" / "grpo-1" / "step-00008"
    sealed.mkdir(parents=True)
    (sealed / "adapter_config.json").write_text('{"r": 16}')
    (sealed / "adapter_model.safetensors").write_bytes(b"weights")
    before = {p.name: p.read_bytes() for p in sealed.iterdir()}
    engine = UnslothModelWithEngine()
    VLLMGenerator(engine, adapter=sealed).generate(["ab"], max_new_tokens=4)
    assert engine.calls[0][1] == ("folder", str(sealed))
    assert {p.name: p.read_bytes() for p in sealed.iterdir()} == before


def test_an_eval_between_training_steps_wakes_the_sleeping_engine_and_leaves_it_asleep(fake_vllm):
    class SleepingEngine(UnslothModelWithEngine):
        """Standby: TRL sleeps the engine after each generation (trl vllm_generation.py:750-752)."""

        def __init__(self) -> None:
            super().__init__()
            self.asleep, self.events = True, []
            self.llm_engine = SimpleNamespace(is_sleeping=lambda: self.asleep)

        def wake_up(self, tags=None):
            self.asleep = False
            self.events.append("wake_up")

        def sleep(self, level=1):
            self.asleep = True
            self.events.append(f"sleep({level})")

        def fast_generate(self, prompts, **kwargs):
            assert not self.asleep, "a sleeping engine has no KV cache to sample with"
            self.events.append("generate")
            return super().fast_generate(prompts, **kwargs)

    engine = SleepingEngine()
    VLLMGenerator(engine).generate(["ab"], max_new_tokens=4)
    assert engine.events == ["wake_up", "generate", "sleep(2)"] and engine.asleep
    awake = UnslothModelWithEngine()  # no sleep mode: nothing to do
    VLLMGenerator(awake).generate(["ab"], max_new_tokens=4)
    assert len(awake.calls) == 1


def test_the_trainers_live_lora_scratch_stays_in_the_run_folder(tmp_path, monkeypatch):
    built: dict[str, Any] = {}
    monkeypatch.setattr(unsloth_backend, "build_grpo_trainer", lambda *args, **kwargs: built.setdefault("args", args))
    backend = bare_unsloth_backend()
    monkeypatch.setattr(backend, "backend_args", lambda: {})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model = UnslothModelWithEngine()
    trainer_dir = tmp_path / "runs" / "grpo-1" / "trainer"
    backend.make_grpo_trainer(model, None, None, TrainConfig(stage="grpo"), {"output_dir": str(trainer_dir)}, [], [])
    # what the patched trainer calls each step (unsloth models/rl_replacements.py:5557, :5607)
    model.load_lora("vllm_gen_lora", load_tensors=True)
    model.load_lora(str(tmp_path / "elsewhere"), load_tensors=False)  # absolute: unchanged
    assert model.loads == [(str(trainer_dir / "vllm_lora" / "vllm_gen_lora"), True),
                           (str(tmp_path / "elsewhere"), False)]
    assert list(cwd.iterdir()) == []
    assert (trainer_dir / "vllm_lora" / "vllm_gen_lora" / "adapter_config.json").is_file()


def test_strict_colocated_rollouts_are_held_to_the_union_of_the_prompts_tools(monkeypatch, tmp_path):
    """TRL builds one SamplingParams per batch (trl 1.15.0 vllm_generation.py:674-682), so one grammar holds all."""
    import xgrammar as xgr

    from appliance.tiny import build_tiny_tokenizer

    built: dict[str, Any] = {}
    monkeypatch.setattr(unsloth_backend, "build_grpo_trainer", lambda *args, **kwargs: built.setdefault("args", args))
    backend = bare_unsloth_backend()
    monkeypatch.setattr(backend, "backend_args", lambda: {})
    monkeypatch.chdir(tmp_path)

    def tool(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {
            "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}

    strict = {"prompt one": [tool("delete_event")], "prompt two": [tool("delete_task"), tool("delete_event")]}
    backend.make_grpo_trainer(UnslothModelWithEngine(), None, None, TrainConfig(stage="grpo", strict=True),
                              {"output_dir": str(tmp_path / "trainer")}, [], [], tools_by_prompt=strict)
    grammar = built["args"][3]["generation_kwargs"]["structured_outputs"]["grammar"]
    tokenizer = build_tiny_tokenizer()
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer),
                                                                      stop_token_ids=[2])).compile_grammar(grammar)

    def takes(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.accept_token(2)

    assert takes('{"name": "delete_event", "arguments": {"id": "1"}}')
    assert takes('{"name": "delete_task", "arguments": {"id": "1"}}')
    assert not takes('{"name": "delete_task", "arguments": {"id": "1", "field": "x"}}')
    assert not takes('{"name": "update_task", "arguments": {"id": "1"}}')


# ---------------------------------------------------------------- 7. unsloth before transformers

def test_a_run_on_the_unsloth_backend_imports_unsloth_before_transformers(tmp_path):
    fake = tmp_path / "site" / "unsloth"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(textwrap.dedent("""
        import sys
        # What unsloth/_gpu_init.py:20-21 checks when it is imported.
        ALREADY_IMPORTED = [m for m in ("trl", "transformers", "peft") if m in sys.modules]
        class FastLanguageModel: pass
        def is_bfloat16_supported(): return False
    """))
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(fake.parent)!r})
        from types import SimpleNamespace
        from appliance.train import common
        from appliance.train.config import TrainConfig

        class Writer:
            last_step = -1
            def update_run(self, **kw): pass
            def record(self, event): pass

        class Workspace:
            def new_id(self, stage): return stage + "-1"
            def writer(self, run_id): return Writer()

        common.pick_backend = lambda requested: ("unsloth", "test")
        common._describe_base_model = lambda spec: {{"id": spec}}
        common.start_run(TrainConfig(backend="unsloth", stage="sft", workspace={str(tmp_path / "runs")!r}), "sft",
                         lambda event: None, pack=SimpleNamespace(name="toy"), workspace=Workspace())
        import unsloth
        print(json.dumps(unsloth.ALREADY_IMPORTED))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=Path.cwd())
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# ---------------------------------------------------------------- 8. ranks vLLM accepts

def test_lora_ranks_round_up_to_one_vllm_accepts(fake_vllm, tmp_path):
    from appliance.generate.vllm import VLLM_LORA_RANKS, vllm_lora_rank

    assert VLLM_LORA_RANKS == (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm/config/lora.py:27
    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 24, 64, 65, 300, 321, 512)] == \
        [1, 8, 8, 16, 32, 64, 128, 320, 512, 512]
    with pytest.raises(ApplianceError, match="at most 512"):
        vllm_lora_rank(513)
    assert unsloth_backend.max_lora_rank_in_force(TrainConfig(stage="grpo", lora_r=24, max_lora_rank=24)) == 32

    started: dict[str, Any] = {}
    fake_vllm.LLM = lambda **kwargs: started.update(kwargs) or FakeLLM()
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 24}')
    VLLMGenerator.load("model-dir", adapter=adapter, max_lora_rank=16)
    assert started["max_lora_rank"] == 32 and started["enable_lora"] is True


# ---------------------------------------------------------------- 9. DPO on the unsloth backend

@pytest.fixture
def cuda_and_unsloth(monkeypatch):
    """Say whether this machine has CUDA and unsloth, as backends.pick_backend asks."""
    import importlib.util

    from appliance.train import backends

    real_find_spec = importlib.util.find_spec

    def set_to(*, cuda: bool, unsloth: bool) -> None:
        monkeypatch.setattr(backends, "_cuda_available", lambda: cuda)
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: (object() if unsloth else None) if name == "unsloth"
                            else real_find_spec(name, *a))
    return set_to


def test_dpo_takes_either_backend_and_auto_resolves_as_for_sft(cuda_and_unsloth):
    from appliance.train.backends import pick_backend
    from appliance.train.dpo import DPO_BACKENDS, dpo_backend

    assert DPO_BACKENDS[0] == "cpu" and "unsloth" in DPO_BACKENDS
    for backend in ("auto", "cpu", "unsloth"):
        cuda_and_unsloth(cuda=True, unsloth=True)
        config = TrainConfig(stage="dpo", backend=backend)
        assert dpo_backend(config) == config  # the name stays; start_run resolves `auto` as for SFT
    assert pick_backend("auto")[0] == "unsloth"
    cuda_and_unsloth(cuda=False, unsloth=False)
    assert pick_backend("auto")[0] == "cpu"


@pytest.mark.parametrize("cuda, unsloth, sentence", [(False, True, "needs a CUDA GPU"),
                                                     (True, False, "not installed")])
def test_dpo_on_unsloth_without_a_gpu_or_unsloth_is_one_sentence_before_the_pairs(cuda_and_unsloth, cuda,
                                                                                   unsloth, sentence):
    from appliance.train.dpo import run_dpo

    cuda_and_unsloth(cuda=cuda, unsloth=unsloth)
    # The same sentence as `train sft --backend unsloth`, before the pack or the store is opened.
    with pytest.raises(ApplianceError, match=sentence):
        run_dpo(TrainConfig(stage="dpo", backend="unsloth", pack="no-such-pack", workspace="/nonexistent"))


class CapturedDPOTrainer:
    """Stands in for TRL's DPOTrainer (Unsloth's patched one on a GPU): keeps what our code handed over."""

    def __init__(self, *, model: Any, args: Any, train_dataset: Any, processing_class: Any, callbacks: Any) -> None:
        self.model, self.args, self.callbacks = model, args, callbacks


def test_the_unsloth_dpo_trainer_gets_our_arguments_with_unsloths_precision_and_optimizer(tmp_path, monkeypatch):
    from appliance.train.common import FIXED_TRAINER_ARGS
    from appliance.train.dpo import dpo_args

    stand_in = types.ModuleType("unsloth")  # backend_args asks it about bf16 (a T4 has none)
    stand_in.is_bfloat16_supported = lambda: False
    monkeypatch.setitem(sys.modules, "unsloth", stand_in)
    monkeypatch.setattr("trl.DPOTrainer", CapturedDPOTrainer)
    monkeypatch.setattr("trl.DPOConfig", lambda **kwargs: kwargs)
    config = TrainConfig(stage="dpo", beta=0.2, max_seq_length=512, batch_size=4)
    run = SimpleNamespace(trainer_dir=tmp_path / "trainer", pack=FAKE_PACK)
    trainer = bare_unsloth_backend().make_dpo_trainer("model", "tokenizer", [], config, dpo_args(config, run), ["cb"])
    args = trainer.args
    assert (trainer.model, trainer.callbacks) == ("model", ["cb"])
    assert (args["beta"], args["loss_type"], args["precompute_ref_log_probs"]) == (0.2, ["sigmoid"], False)
    # Unsloth caps DPO's max_length at the model's max_seq_length (rl.py:3115-3127): load_for_training
    # gives the model the same number, so nothing is cut that the cpu backend would keep.
    assert args["max_length"] == config.max_seq_length and args["per_device_train_batch_size"] == 4
    assert (args["bf16"], args["fp16"], args["optim"]) == (False, True, "adamw_8bit")  # as for SFT
    assert {key: args[key] for key in FIXED_TRAINER_ARGS} == FIXED_TRAINER_ARGS
    assert not {"use_vllm", "use_cpu", "vllm_mode"} & set(args)  # DPO samples nothing


def test_sgd_replaces_unsloths_8bit_adamw_when_the_config_asks_for_it(tmp_path, monkeypatch):
    from appliance.train.dpo import dpo_args

    stand_in = types.ModuleType("unsloth")
    stand_in.is_bfloat16_supported = lambda: False
    monkeypatch.setitem(sys.modules, "unsloth", stand_in)
    monkeypatch.setattr("trl.DPOTrainer", CapturedDPOTrainer)
    monkeypatch.setattr("trl.DPOConfig", lambda **kwargs: kwargs)
    config = TrainConfig(stage="dpo", optimizer="sgd", learning_rate=0.5)
    run = SimpleNamespace(trainer_dir=tmp_path / "trainer", pack=FAKE_PACK)
    trainer = bare_unsloth_backend().make_dpo_trainer("model", "tokenizer", [], config, dpo_args(config, run), [])
    assert (trainer.args["optim"], trainer.args["learning_rate"]) == ("sgd", 0.5)


class FakeFastLanguageModel:
    """Records what load_for_training asks of Unsloth's loader."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] = {}
        self.peft: dict[str, Any] = {}

    def from_pretrained(self, **kwargs: Any) -> tuple[Any, Any]:
        self.loaded = kwargs
        model = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=6))
        return model, SimpleNamespace(pad_token=None, eos_token="</s>")

    def get_peft_model(self, model: Any, **kwargs: Any) -> Any:
        self.peft = kwargs
        return model


def test_dpo_loads_the_model_as_sft_does_without_vllm(tiny_model_dir):
    loader = FakeFastLanguageModel()
    backend = bare_unsloth_backend()
    backend.FastLanguageModel = loader
    config = TrainConfig(stage="dpo", model=str(tiny_model_dir), max_seq_length=768, lora_r=8)
    _, tokenizer = backend.load_for_training(config)
    assert loader.loaded["fast_inference"] is False and loader.loaded["load_in_4bit"] is True
    assert loader.loaded["max_seq_length"] == 768  # DPO's max_length (above) is capped at this
    assert loader.peft["use_gradient_checkpointing"] == "unsloth" and loader.peft["r"] == 8
    assert tokenizer.pad_token == "</s>"
    assert backend.settings_in_force(config) == {"standby": config.standby}  # no vLLM share to report


def test_grpo_on_unsloth_without_vllm_is_one_sentence_before_the_model_loads(tiny_model_dir, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    loader = FakeFastLanguageModel()
    backend = bare_unsloth_backend()
    backend.FastLanguageModel = loader
    with pytest.raises(ApplianceError, match="GRPO on the unsloth backend samples with a colocated vLLM engine"):
        backend.load_for_training(TrainConfig(stage="grpo", model=str(tiny_model_dir)))
    assert loader.loaded == {}  # refused before Unsloth's loader was asked for anything
    backend.load_for_training(TrainConfig(stage="sft", model=str(tiny_model_dir)))  # SFT samples nothing
    assert loader.loaded["fast_inference"] is False


def test_a_dpo_checkpoint_on_unsloth_holds_the_trained_adapter_not_the_reference(tiny_model_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file

    from appliance.models import load_model

    model, _ = load_model(tiny_model_dir)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], init_lora_weights=False,
                                             task_type="CAUSAL_LM"))
    model.add_adapter("ref", model.peft_config["default"])  # what TRL's DPOTrainer adds (dpo_trainer.py:678)
    for name, param in model.named_parameters():
        if ".ref." in name:
            param.data.zero_()  # unlike the trained adapter, so a mix-up shows
    # Unsloth's save_lora without an engine: save_pretrained over the adapter, keywords passed on
    # (unsloth models/_utils.py:8066-8076).
    model.save_lora = lambda directory, **kwargs: model.save_pretrained(directory, **kwargs)
    bare_unsloth_backend().save_adapter(model, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "ref").exists()  # PEFT writes a non-default adapter into a subfolder
    saved = load_file(str(tmp_path / "ckpt" / "adapter_model.safetensors"))
    trained = {n.replace(".default", ""): p for n, p in model.named_parameters() if ".default." in n}
    assert saved.keys() == trained.keys() and all(torch.equal(saved[k], trained[k]) for k in saved)
