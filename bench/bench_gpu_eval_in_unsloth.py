"""The eval's own HF generator, before and after Unsloth loads a model in the same process (GPU only).

`appliance train sft --backend unsloth` loads its model through Unsloth, which patches the Llama
classes, and without vLLM its held-out evals decode with a second, plain copy of the model. This
measures what that costs and checks that the answers do not change: one process, the same tiny
random model (or `--model`), float32 so greedy answers are comparable, the same val tasks.

    python bench/bench_gpu_eval_in_unsloth.py [--model DIR] [--limit 32] [--max-new-tokens 48]

Prints `name: value` lines: plain_eval_s, after_unsloth_load_eval_s, slowdown_ratio, same_completions.
Session 27 (one H200, torch 2.11, unsloth 2026.10.9, the tiny model): 20.4 s, 76.8 s, 3.8, 32 of 32.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time


def one_eval(model: str, limit: int, max_new_tokens: int) -> tuple[float, dict[str, str]]:
    from appliance.evaluate.runner import EvalSettings, run_eval
    from appliance.generate.hf import HFGenerator

    generator = HFGenerator.load(model, dtype="float32", batch_size=32)
    started = time.perf_counter()
    report = run_eval(EvalSettings(model=model, split="val", limit=limit, max_new_tokens=max_new_tokens),
                      workspace=None, generator=generator)
    return time.perf_counter() - started, {s.task_id: s.completion for s in report.samples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local model folder (default: a tiny random model built here)")
    parser.add_argument("--limit", type=int, default=32, help="val tasks to evaluate (default: 32)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("This bench needs a CUDA GPU and unsloth: it measures Unsloth's patching of the eval's model.")
        return 2
    model = args.model
    if model is None:
        from appliance.tiny import save_tiny_model

        model = str(save_tiny_model(tempfile.mkdtemp(prefix="tiny-")))
    plain_s, plain = one_eval(model, args.limit, args.max_new_tokens)
    from unsloth import FastLanguageModel  # patches the model classes, as the unsloth training backend does

    FastLanguageModel.from_pretrained(model_name=model, max_seq_length=2048, load_in_4bit=True)
    patched_s, patched = one_eval(model, args.limit, args.max_new_tokens)
    same = sum(plain[task] == patched.get(task) for task in plain)
    print(f"plain_eval_s: {plain_s:.1f}")
    print(f"after_unsloth_load_eval_s: {patched_s:.1f}")
    print(f"slowdown_ratio: {patched_s / plain_s:.2f}")
    print(f"same_completions: {same} of {len(plain)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
