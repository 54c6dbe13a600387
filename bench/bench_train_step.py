"""CPU training-step settings, side by side: what TRL does by default vs what the cpu backend does.

One SFT-shaped batch (8 rows x 640 tokens, the last 46 of each row labelled, as
with completion-only loss on workplace-single) goes forward and backward through
TRL's fused LM head with a PEFT LoRA, under bf16 autocast, alternating:

* `trl_default`: gradient checkpointing on (TRL's default) and every position
  projected through the 49k-word LM head (what TRL 1.16 does without Triton);
* `appliance`: no checkpointing and only the labelled positions projected
  (`appliance.train.cpu`), LoRA on the last third of the layers;
* `appliance_all_layers`: the same with LoRA on every layer;
* `appliance_frozen_heads`: `appliance` plus the rows' shared heads computed once
  (appliance.train.frozen_heads: the frozen lower layers skip them, the adapted
  layers run each once for its rows): two heads of 560 tokens, four rows each, as a
  pack's system prompt + tool list (90% of workplace-single's SFT tokens).

    .venv/bin/python bench/bench_train_step.py [--model smollm2-135m] [--rounds 3]

Prints `name: value` lines: seconds per step (median) and the speedup ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see bench_generate.py

HEAD_TOKENS = 560  # the leading tokens each half of the batch shares (a system prompt and tool list)


def build(model_spec: str, *, lora_layers: int | None, checkpointing: bool, heads: list | None = None):
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from appliance.models import load_model
    from appliance.train import TrainConfig
    from appliance.train.cpu import cpu_default_lora_layers

    model, _ = load_model(model_spec, dtype="float32", for_training=True)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # what SFTTrainer adds
    config = TrainConfig(lora_layers=lora_layers)
    targets = config.peft_targets(model.config.num_hidden_layers, cpu_default_lora_layers(model))
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", **targets))
    if checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()  # what Trainer does for a PEFT model with checkpointing
    if heads is not None:
        from appliance.train.frozen_heads import install_frozen_heads

        install_frozen_heads(model, heads)
    model.train()
    return model


def step_seconds(model, batch, labels) -> float:
    import torch

    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=batch, labels=labels, fused_lm_head=True).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch
    import trl.trainer.utils as trl_utils

    from appliance.train.cpu import score_only_labelled_positions

    torch.manual_seed(0)
    batch = torch.randint(100, 40000, (8, 640))
    batch[:4, :HEAD_TOKENS], batch[4:, :HEAD_TOKENS] = batch[0, :HEAD_TOKENS], batch[4, :HEAD_TOKENS]
    prompts = [row[:HEAD_TOKENS + 4].tolist() for row in batch]
    labels = batch.clone()
    labels[:, :-46] = -100
    trl_decides = trl_utils._use_triton
    setups = {
        "trl_default": (lambda: build(args.model, lora_layers=0, checkpointing=True), False),
        "appliance": (lambda: build(args.model, lora_layers=None, checkpointing=False), True),
        "appliance_all_layers": (lambda: build(args.model, lora_layers=0, checkpointing=False), True),
        "appliance_frozen_heads": (lambda: build(args.model, lora_layers=None, checkpointing=False, heads=prompts),
                                   True),
    }
    models = {name: make() for name, (make, _) in setups.items()}
    times: dict[str, list[float]] = {name: [] for name in setups}
    for round_index in range(args.rounds + 1):  # round 0 warms up
        for name, (_, compact) in setups.items():
            trl_utils._use_triton = trl_decides  # undo, then apply only where this setup wants it
            if compact:
                score_only_labelled_positions()
            seconds = step_seconds(models[name], batch, labels)
            if round_index:
                times[name].append(seconds)
    trl_utils._use_triton = trl_decides
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name}_step_s: {value:.2f}")
    print(f"speedup_vs_trl_default: {medians['trl_default'] / medians['appliance']:.2f}")
    print(f"speedup_all_layers_vs_trl_default: {medians['trl_default'] / medians['appliance_all_layers']:.2f}")
    print(f"speedup_frozen_heads_vs_appliance: {medians['appliance'] / medians['appliance_frozen_heads']:.2f}")


if __name__ == "__main__":
    main()
