"""GPU self-check parts, each run as `python -m appliance.gpu_smoke PART [--shape SHAPE]` in its own process.

  bnb      bitsandbytes 4-bit load + PEFT LoRA + TRL GRPOTrainer (no vLLM), two steps, adapter save,
           HF sampling from the trained model
  unsloth  Unsloth 4-bit + two GRPO steps + adapter save; with vLLM installed, the colocated engine
           (fast_inference) samples for GRPO and then with the saved adapter (the appliance's GPU loop);
           without it, Unsloth's HF generation does both and the engine's line says it was skipped
  vllm     a standalone vLLM engine: sampling with n>1, then with a PEFT adapter via LoRARequest

Every part builds its model from a config with random weights (no hub access):
`tiny` is a small Llama, `qwen2.5-1.5b` a Qwen2 with Qwen2.5-1.5B's dimensions, so step time
and VRAM are the real size's. Both use the tiny offline tokenizer (its ids are a subset of the
embedding). Each part prints `name: value` lines: step time, peak VRAM, tokens/s. A part whose
library is not installed prints one `PART: skipped (...)` line and exits EXIT_SKIPPED.
Written against the pinned APIs (unsloth 2026.10.9, vllm 0.33.0, trl 1.15.0,
transformers 5.17.0, peft 0.21.2, bitsandbytes 0.50.2).

This module imports only the standard library at the top: `appliance doctor` reads PARTS,
SHAPES and `missing_library` from it without loading torch.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, Sequence

from appliance.errors import ERROR_PREFIX

# vLLM's attention kernels want a real head size (64); 4-bit needs dims divisible by the block size.
TINY = {"hidden_size": 256, "layers": 2, "heads": 4, "kv_heads": 4}
# Qwen/Qwen2.5-1.5B(-Instruct) config.json: the shape that costs the memory and the time.
QWEN2_5_1_5B = {"hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                "intermediate_size": 8960, "vocab_size": 151936, "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True}
SHAPES = ("tiny", "qwen2.5-1.5b")
PROMPTS = ["Schedule a meeting with Carlos on Friday", "Reply to the email from Nadia"]
# The top-level modules each part imports; the first one missing makes the part skip.
PART_NEEDS = {"bnb": ("torch", "transformers", "datasets", "peft", "trl", "bitsandbytes"),
              "unsloth": ("torch", "transformers", "datasets", "peft", "trl", "bitsandbytes", "unsloth", "unsloth_zoo"),
              "vllm": ("torch", "transformers", "peft", "vllm")}
EXIT_SKIPPED = 3  # the part's library is not installed: reported, not a failure unless asked for


def _print(name: str, value: Any) -> None:
    print(f"{name}: {value}", flush=True)


# ---------------------------------------------------------------- which parts can run here

def missing_library(part: str, search_path: Sequence[str] | None = None) -> str | None:
    """The first module `part` needs that is not importable from `search_path` (default sys.path), or None.

    Finds without importing (PathFinder), so the parent can ask cheaply with the children's path.
    """
    path = list(search_path) if search_path is not None else None
    return next((lib for lib in PART_NEEDS[part] if PathFinder.find_spec(lib, path) is None), None)


def skip_line(part: str, lib: str) -> str:
    if lib == "vllm":
        why = "its wheel is too large to bring to an offline machine; run this part where vLLM is installed"
    else:
        why = "add its wheel to the folder given with --wheels to run this part"
    return f"{part}: skipped ({lib} not installed; {why})"


def _importable(lib: str) -> bool:
    return PathFinder.find_spec(lib) is not None


# ---------------------------------------------------------------- the model, from a config

def qwen2_5_1_5b_config(**token_ids: int) -> Any:
    """A transformers Qwen2Config with Qwen2.5-1.5B's dimensions (no hub)."""
    from transformers import Qwen2Config

    shape = dict(QWEN2_5_1_5B)
    rope_theta = shape.pop("rope_theta")
    return Qwen2Config(**shape, rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
                       use_sliding_window=False, **token_ids)


def save_smoke_model(directory: Path, shape: str) -> tuple[Path, Any]:
    """Build a random model of `shape` with the tiny tokenizer, save both to `directory`; returns (dir, model).

    The qwen2.5-1.5b shape is built in bf16 straight on the GPU (seconds, where a CPU init takes
    minutes); the caller drops the model and resets the peak-memory counter before measuring.
    """
    import torch

    from appliance.tiny import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    if shape == "tiny":
        model = build_tiny_model(len(tokenizer), **TINY)
    else:
        from transformers import AutoModelForCausalLM

        # The tiny tokenizer's special ids (pad 0, <|im_start|> 1, <|im_end|> 2 as EOS).
        config = qwen2_5_1_5b_config(pad_token_id=0, bos_token_id=1, eos_token_id=2)
        torch.manual_seed(0)
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.generation_config.pad_token_id = 0
        model.generation_config.eos_token_id = 2
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    _print("model_params_m", round(sum(p.numel() for p in model.parameters()) / 1e6, 1))
    return directory, model


def _save_and_release(directory: Path, shape: str) -> Path:
    import torch

    model_dir, model = save_smoke_model(directory, shape)
    del model
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return model_dir


# ---------------------------------------------------------------- shared pieces

def _length_reward(completions: list[Any], **_: Any) -> list[float]:
    """A trivial verifiable reward: prefer short completions (enough to get non-zero advantages)."""
    return [-len(str(c)) / 100.0 for c in completions]


def _chat_prompts(tokenizer: Any, repeat: int) -> list[str]:
    return [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in PROMPTS * repeat]


def _dataset(tokenizer: Any) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"prompt": _chat_prompts(tokenizer, 8)})


def _step_timer() -> Any:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._t = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self._t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            self.times.append(time.perf_counter() - self._t)

    return StepTimer()


def _mean_step_s(timer: Any) -> float:
    return round(sum(timer.times) / max(1, len(timer.times)), 3)


def _grpo_args(out: Path, **extra: Any) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(out), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, learning_rate=1e-4, logging_steps=1, report_to=[], bf16=True,
                      save_strategy="no", beta=0.0, loss_type="grpo", **extra)


def _hf_tokens_per_s(model: Any, tokenizer: Any, new_tokens: int = 32) -> float:
    """Sample a fixed number of new tokens for a batch of prompts with HF generate; tokens per second."""
    import torch

    model.eval()
    tokenizer.padding_side = "left"
    inputs = tokenizer(_chat_prompts(tokenizer, 4), return_tensors="pt", padding=True).to(model.device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                             pad_token_id=tokenizer.pad_token_id)
    torch.cuda.synchronize()
    tokens = (out.shape[1] - inputs["input_ids"].shape[1]) * out.shape[0]
    return round(tokens / (time.perf_counter() - t0), 1)


# ---------------------------------------------------------------- the parts

def part_bnb(work: Path, shape: str) -> None:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
    from trl import GRPOTrainer

    model_dir = _save_and_release(work / "model", shape)
    t0 = time.perf_counter()
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=quant, device_map={"": 0})
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    _print("bnb_load_s", round(time.perf_counter() - t0, 2))
    timer = _step_timer()
    trainer = GRPOTrainer(model=model, reward_funcs=[_length_reward], args=_grpo_args(work / "bnb"),
                          train_dataset=_dataset(tokenizer), processing_class=tokenizer,
                          peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                 task_type="CAUSAL_LM"),
                          callbacks=[timer])
    trainer.train()
    trainer.model.save_pretrained(work / "bnb-adapter")
    _print("bnb_grpo_step_s", _mean_step_s(timer))
    _print("bnb_generate_tokens_per_s", _hf_tokens_per_s(trainer.model, tokenizer))
    _print("bnb_peak_vram_gib", round(torch.cuda.max_memory_allocated() / 2**30, 3))
    _print("bnb_adapter_saved", int((work / "bnb-adapter" / "adapter_config.json").exists()))


def part_unsloth(work: Path, shape: str) -> None:
    fast = _importable("vllm")  # an offline machine cannot bring vLLM: train and sample without the engine
    if not fast:
        print("unsloth_vllm: skipped (vllm not installed; its wheel is too large to bring to an offline machine, "
              "so GRPO samples with Unsloth's HF generation instead of the colocated engine)", flush=True)
    os.environ["UNSLOTH_VLLM_STANDBY"] = "1" if fast else "0"  # must be set before unsloth is imported
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")  # it fetches a file from the hub otherwise
    from unsloth import FastLanguageModel  # noqa: I001 - unsloth must be imported before trl
    import torch
    from trl import GRPOTrainer

    from appliance.train.unsloth_backend import _keep_vllm_scratch_in

    model_dir = _save_and_release(work / "model", shape)
    t0 = time.perf_counter()
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(model_dir), max_seq_length=512, load_in_4bit=True, fast_inference=fast,
        max_lora_rank=8, gpu_memory_utilization=0.3)
    model = FastLanguageModel.get_peft_model(
        model, r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"],
        use_gradient_checkpointing="unsloth", random_state=0)
    _print("unsloth_load_s", round(time.perf_counter() - t0, 2))
    _keep_vllm_scratch_in(model, work / "vllm_lora")  # the trainer's ./vllm_gen_lora, out of the cwd
    timer = _step_timer()
    args = _grpo_args(work / "unsloth", use_vllm=fast, vllm_mode="colocate", importance_sampling_level="token")
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[_length_reward], args=args,
                          train_dataset=_dataset(tokenizer), callbacks=[timer])
    trainer.train()
    _print("unsloth_grpo_step_s", _mean_step_s(timer))
    adapter = work / "unsloth-adapter"
    if fast:
        _unsloth_vllm_sampling(model, adapter)
    else:
        model.save_pretrained(str(adapter))
        FastLanguageModel.for_inference(model)
        _print("unsloth_generate_tokens_per_s", _hf_tokens_per_s(model, tokenizer))
    _print("unsloth_peak_vram_gib", round(torch.cuda.max_memory_allocated() / 2**30, 3))
    _print("unsloth_adapter_saved", int((adapter / "adapter_config.json").exists()))


def _unsloth_vllm_sampling(model: Any, adapter: Path) -> None:
    from vllm import SamplingParams

    model.save_lora(str(adapter))
    params = SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=0)
    t0 = time.perf_counter()
    outputs = model.fast_generate(PROMPTS, sampling_params=params, lora_request=model.load_lora(str(adapter)))
    elapsed = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    _print("unsloth_vllm_lora_tokens_per_s", round(tokens / elapsed, 1))


def part_vllm(work: Path, shape: str) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    model_dir, base = save_smoke_model(work / "model", shape)
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False, task_type="CAUSAL_LM"))
    peft_model.save_pretrained(work / "adapter")
    del base, peft_model
    torch.cuda.empty_cache()
    llm = LLM(model=str(model_dir), enable_lora=True, max_lora_rank=8, gpu_memory_utilization=0.3,
              max_model_len=512, enforce_eager=True, dtype="bfloat16")
    params = SamplingParams(n=4, temperature=1.0, max_tokens=32, seed=0)
    for label, lora in (("base", None), ("lora", LoRARequest("smoke", 1, str(work / "adapter")))):
        t0 = time.perf_counter()
        outputs = llm.generate(PROMPTS * 8, params, lora_request=lora)
        elapsed = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        _print(f"vllm_{label}_tokens_per_s", round(tokens / elapsed, 1))
    _vllm_strict(llm, LoRARequest("smoke", 1, str(work / "adapter")))
    # vLLM's engine core is another process: read the device's memory, not this process's allocator.
    free, total = torch.cuda.mem_get_info()
    _print("vllm_vram_in_use_gib", round((total - free) / 2**30, 3))


def _vllm_strict(llm: Any, lora: Any) -> None:
    """Strict decoding through vLLM's structured outputs with a LoRA: every finished answer must parse."""
    from vllm import SamplingParams

    from appliance.generate.vllm import structured_outputs_for
    from appliance.parsing import parse_tool_calls

    tool = {"type": "function", "function": {"name": "calendar_delete_event", "parameters": {
        "type": "object", "properties": {"event_id": {"type": "string"}}, "required": ["event_id"]}}}
    held = structured_outputs_for([tool])
    params = [SamplingParams(n=4, temperature=1.0, max_tokens=64, seed=0, structured_outputs=held) for _ in PROMPTS]
    outputs = llm.generate(PROMPTS, params, lora_request=lora)
    finished = [c.text for o in outputs for c in o.outputs if c.finish_reason == "stop"]
    valid = sum(parse_tool_calls(text).ok for text in finished)
    _print("vllm_strict_finished", len(finished))
    _print("vllm_strict_valid_of_finished", valid)
    if valid != len(finished):
        raise RuntimeError(f"strict decoding through vLLM let {len(finished) - valid} of {len(finished)} finished "
                           "answers break the grammar")


PARTS = {"bnb": part_bnb, "unsloth": part_unsloth, "vllm": part_vllm}


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m appliance.gpu_smoke")
    parser.add_argument("part", choices=list(PARTS))
    parser.add_argument("--shape", choices=SHAPES, default=SHAPES[0])
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse(argv)
    lib = missing_library(args.part)
    if lib is not None:
        print(skip_line(args.part, lib), flush=True)
        return EXIT_SKIPPED
    import torch

    if not torch.cuda.is_available():
        print(ERROR_PREFIX + "no CUDA GPU is visible; the GPU smoke needs one (the CPU path is tested by `make test`).",
              file=sys.stderr)
        return 2
    _print("model_shape", args.shape)
    with tempfile.TemporaryDirectory(prefix="appliance-gpu-smoke-") as tmp:
        try:
            PARTS[args.part](Path(tmp), args.shape)
        except ModuleNotFoundError as err:
            # The part's own libraries were found; one of their dependencies was not brought.
            print(ERROR_PREFIX + f"the {args.part} part failed to import {err.name!r} ({err}); add the wheel that "
                  f"provides it to the --wheels folder, or install the GPU extra: pip install -e '.[gpu]'.",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
