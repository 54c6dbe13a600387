"""The eval's HF generator before and after Unsloth loads a model in the same process (GPU only).

`appliance train sft --backend unsloth` loads its model through Unsloth, which patches the Llama
classes, and without vLLM its held-out evals decode with a second, plain copy of the model. This
measures what that costs, which KV cache explains it, and whether generating with the training
model itself (Unsloth's `for_inference`) is faster: one process, the same tiny random model (or
`--model`), the same val tasks, greedy.

    python bench/bench_gpu_eval_in_unsloth.py [--model DIR] [--limit 32] [--max-new-tokens 48]

Prints `name: value` lines:
  plain_eval_s / plain_dynamic_eval_s             a plain float32 copy, StaticCache / DynamicCache, before Unsloth
  dynamic_speedup, same_completions_static_vs_dynamic   the two caches before Unsloth (the generator's GPU default
                                                  is the DynamicCache)
  after_unsloth_load_eval_s / ..._dynamic_eval_s  the same after Unsloth has loaded the training model
  slowdown_ratio, slowdown_ratio_dynamic          after / before, per cache
  same_completions, same_completions_dynamic      after vs before (float32 copies: should be all)
  training_model_eval_s                           the 4-bit training model + LoRA, for_inference, DynamicCache
  training_model_reference_eval_s                 the same without shared-head caches (each row prefilled whole)
  training_model_same_completions                 with vs without shared heads
  train_step_after_eval                           ok when a forward/backward runs after for_training
Session 27 (one H200, torch 2.11, unsloth 2026.10.9, the tiny model): 20.4 s, 76.8 s, 3.8, 32 of 32.
Session 28 (the same): dynamic_speedup 13.84 (18.0 s static, 1.3 s dynamic, 32 of 32 the same); after Unsloth
87.2 s static, 2.2 s dynamic; the training model 6.2 s without shared heads, and it fails with them.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any


def generator_class() -> Any:
    from appliance.generate.hf import HFGenerator

    class Variant(HFGenerator):
        """HFGenerator with its decode cache (static or dynamic) and its shared-head caches chosen here."""

        def __init__(self, model: Any, tokenizer: Any, *, static: bool, heads: bool = True) -> None:
            super().__init__(model, tokenizer, batch_size=32)
            self.static_cache, self.heads = static, heads

        def _head_lengths(self, rows: list[list[int]], limits: list[int]) -> list[int]:
            return super()._head_lengths(rows, limits) if self.heads else [0] * len(rows)

    return Variant


def timed_eval(model: str, generator: Any, limit: int, max_new_tokens: int) -> tuple[float, dict[str, str]]:
    from appliance.evaluate.runner import EvalSettings, run_eval

    started = time.perf_counter()
    report = run_eval(EvalSettings(model=model, split="val", limit=limit, max_new_tokens=max_new_tokens),
                      workspace=None, generator=generator)
    return time.perf_counter() - started, {s.task_id: s.completion for s in report.samples}


def plain_copy(model: str, static: bool) -> Any:
    from appliance.models import load_model

    loaded, tokenizer = load_model(model, dtype="float32")
    return generator_class()(loaded.to("cuda"), tokenizer, static=static)


def same(a: dict[str, str], b: dict[str, str]) -> str:
    return f"{sum(a[task] == b.get(task) for task in a)} of {len(a)}"


def train_step_runs(model: Any, tokenizer: Any, backend: Any) -> str:
    import torch

    backend.FastLanguageModel.for_training(model)
    ids = tokenizer(["a short training example"], return_tensors="pt")["input_ids"].to("cuda")
    try:
        model(input_ids=ids, labels=ids).loss.backward()
    except Exception as error:  # a report line, not a crash: the other numbers still print
        return f"failed ({type(error).__name__}: {error})"
    return "ok" if any(p.grad is not None for p in model.parameters() if p.requires_grad) else "no gradients"


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

    def run(generator: Any) -> tuple[float, dict[str, str]]:
        return timed_eval(model, generator, args.limit, args.max_new_tokens)

    before = {static: run(plain_copy(model, static)) for static in (True, False)}
    print(f"dynamic_speedup: {before[True][0] / before[False][0]:.2f}")
    print(f"same_completions_static_vs_dynamic: {same(before[True][1], before[False][1])}")

    from appliance.train.config import TrainConfig
    from appliance.train.unsloth_backend import UnslothBackend

    backend = UnslothBackend()  # loads the model as `train sft --backend unsloth` does, patching the classes
    trained, tokenizer = backend.load_for_training(TrainConfig(stage="sft", backend="unsloth", model=model))
    after = {static: run(plain_copy(model, static)) for static in (True, False)}
    for static, suffix in ((True, ""), (False, "_dynamic")):
        print(f"plain{suffix}_eval_s: {before[static][0]:.1f}")
        print(f"after_unsloth_load{suffix}_eval_s: {after[static][0]:.1f}")
        print(f"slowdown_ratio{suffix}: {after[static][0] / before[static][0]:.2f}")
        print(f"same_completions{suffix}: {same(before[static][1], after[static][1])}")

    backend.FastLanguageModel.for_inference(trained)
    variant = generator_class()
    reference_s, reference = run(variant(trained, tokenizer, static=False, heads=False))
    print(f"training_model_reference_eval_s: {reference_s:.1f}")
    try:
        shared_s, shared = run(variant(trained, tokenizer, static=False))
        print(f"training_model_eval_s: {shared_s:.1f}")
        print(f"training_model_same_completions: {same(reference, shared)}")
    except Exception as error:  # Unsloth's forward may not fill a DynamicCache in place (a finding, not a crash)
        print(f"training_model_eval_s: fails ({type(error).__name__}: {error})")
    print(f"train_step_after_eval: {train_step_runs(trained, tokenizer, backend)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
