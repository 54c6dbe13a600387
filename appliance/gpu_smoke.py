"""GPU self-check parts, each run as `python -m appliance.gpu_smoke PART` in its own process.

  bnb      bitsandbytes 4-bit load + PEFT LoRA + TRL GRPOTrainer (no vLLM), two steps, adapter save
  unsloth  Unsloth 4-bit + colocated vLLM (fast_inference) + two GRPO steps + save_lora +
           vLLM sampling with the saved adapter through the same engine (the appliance's GPU loop)
  vllm     a standalone vLLM engine: sampling with n>1, then with a PEFT adapter via LoRARequest

Every part uses a tiny random Llama built from a config (no hub access) and
prints `name: value` lines: step time, peak VRAM, tokens/s. Written against the
pinned APIs (unsloth 2026.10.9, vllm 0.33.0, trl 1.15.0, transformers 5.17.0,
peft 0.21.2, bitsandbytes 0.50.2).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# vLLM's attention kernels want a real head size (64); 4-bit needs dims divisible by the block size.
TINY = {"hidden_size": 256, "layers": 2, "heads": 4, "kv_heads": 4}
PROMPTS = ["Schedule a meeting with Carlos on Friday", "Reply to the email from Nadia"]


def _print(name: str, value: Any) -> None:
    print(f"{name}: {value}", flush=True)


def _length_reward(completions: list[Any], **_: Any) -> list[float]:
    """A trivial verifiable reward: prefer short completions (enough to get non-zero advantages)."""
    return [-len(str(c)) / 100.0 for c in completions]


def _dataset(tokenizer: Any) -> Any:
    from datasets import Dataset

    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True) for p in PROMPTS * 8]
    return Dataset.from_dict({"prompt": prompts})


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


def _grpo_args(out: Path, **extra: Any) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(out), max_steps=2, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, learning_rate=1e-4, logging_steps=1, report_to=[], bf16=True,
                      save_strategy="no", beta=0.0, loss_type="grpo", **extra)


def part_bnb(work: Path) -> None:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig
    from trl import GRPOTrainer

    from appliance.tiny import save_tiny_model

    model_dir = save_tiny_model(work / "tiny", **TINY)
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
    _print("bnb_grpo_step_s", round(sum(timer.times) / max(1, len(timer.times)), 3))
    _print("bnb_peak_vram_gib", round(torch.cuda.max_memory_allocated() / 2**30, 3))
    _print("bnb_adapter_saved", int((work / "bnb-adapter" / "adapter_config.json").exists()))


def part_unsloth(work: Path) -> None:
    os.environ.setdefault("UNSLOTH_VLLM_STANDBY", "1")  # must be set before unsloth is imported
    from unsloth import FastLanguageModel  # noqa: I001 - unsloth must be imported before trl
    import torch
    from trl import GRPOTrainer
    from vllm import SamplingParams

    from appliance.tiny import save_tiny_model
    from appliance.train.unsloth_backend import _keep_vllm_scratch_in

    model_dir = save_tiny_model(work / "tiny", **TINY)
    t0 = time.perf_counter()
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(model_dir), max_seq_length=512, load_in_4bit=True, fast_inference=True,
        max_lora_rank=8, gpu_memory_utilization=0.3)
    model = FastLanguageModel.get_peft_model(
        model, r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"],
        use_gradient_checkpointing="unsloth", random_state=0)
    _print("unsloth_load_s", round(time.perf_counter() - t0, 2))
    _keep_vllm_scratch_in(model, work / "vllm_lora")  # the trainer's ./vllm_gen_lora, out of the cwd
    timer = _step_timer()
    args = _grpo_args(work / "unsloth", use_vllm=True, vllm_mode="colocate", importance_sampling_level="token")
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[_length_reward], args=args,
                          train_dataset=_dataset(tokenizer), callbacks=[timer])
    trainer.train()
    _print("unsloth_grpo_step_s", round(sum(timer.times) / max(1, len(timer.times)), 3))
    adapter = work / "unsloth-adapter"
    model.save_lora(str(adapter))
    params = SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=0)
    t0 = time.perf_counter()
    outputs = model.fast_generate(PROMPTS, sampling_params=params, lora_request=model.load_lora(str(adapter)))
    elapsed = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    _print("unsloth_vllm_lora_tokens_per_s", round(tokens / elapsed, 1))
    _print("unsloth_peak_vram_gib", round(torch.cuda.max_memory_allocated() / 2**30, 3))


def part_vllm(work: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    from appliance.tiny import build_tiny_model, build_tiny_tokenizer

    model_dir = work / "tiny"
    tokenizer = build_tiny_tokenizer()
    base = build_tiny_model(len(tokenizer), **TINY)
    base.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 init_lora_weights=False, task_type="CAUSAL_LM"))
    peft_model.save_pretrained(work / "adapter")
    llm = LLM(model=str(model_dir), enable_lora=True, max_lora_rank=8, gpu_memory_utilization=0.3,
              max_model_len=512, enforce_eager=True, dtype="bfloat16")
    params = SamplingParams(n=4, temperature=1.0, max_tokens=32, seed=0)
    for label, lora in (("base", None), ("lora", LoRARequest("smoke", 1, str(work / "adapter")))):
        t0 = time.perf_counter()
        outputs = llm.generate(PROMPTS * 8, params, lora_request=lora)
        elapsed = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        _print(f"vllm_{label}_tokens_per_s", round(tokens / elapsed, 1))
    # vLLM's engine core is another process: read the device's memory, not this process's allocator.
    free, total = torch.cuda.mem_get_info()
    _print("vllm_vram_in_use_gib", round((total - free) / 2**30, 3))


PARTS = {"bnb": part_bnb, "unsloth": part_unsloth, "vllm": part_vllm}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PARTS:
        print(f"usage: python -m appliance.gpu_smoke {{{','.join(PARTS)}}}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("error: torch is not installed; run `make setup` first.", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA GPU is visible; the GPU smoke needs one (the CPU path is tested by `make test`).",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="appliance-gpu-smoke-") as tmp:
        try:
            PARTS[argv[0]](Path(tmp))
        except ImportError as err:
            print(f"error: {argv[0]} part needs a package that is missing ({err}); "
                  "install the GPU extra: pip install -e '.[gpu]'.", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
