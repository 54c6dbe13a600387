"""Overhead of the appliance around a GRPO step, against a bare TRL GRPOTrainer script.

Both sides use the same model, LoRA, prompts, reward functions, GRPO
options, precision and sampler (the cpu backend's rollout_func); ours adds the rollout recorder (verdicts, store rows, events), the
metrics callback and registry checkpoints (every `--eval-every` steps). They
run alternately in one process (ours, bare, ours, bare, ...) because these
machines are noisy; a step's time is the gap between consecutive step logs,
first step of each run dropped (warm-up), median over all rounds.

    .venv/bin/python bench/bench_overhead.py [--model DIR|smollm2-135m] [--steps 5] [--rounds 2]

Prints `name: value` lines: ours_step_s, bare_step_s, overhead_ratio.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.task import Task, ToolCall, Verdict  # noqa: E402
from appliance.train import TrainConfig  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "send_email", "description": "Send an email",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}}]
NAMES = ["Carlos", "Nadia", "Sam", "Ana", "Li", "Omar", "Eva", "Raj"]


@dataclasses.dataclass
class BenchPack:
    name: str = "bench"
    tools: list = dataclasses.field(default_factory=lambda: TOOLS)
    system_prompt: str = "You are a helpful assistant."
    reward_scheme: str = "binary"
    max_turns: int = 1

    def tasks(self, split):
        return [Task(id=f"t{i}", messages=({"role": "user", "content": f"Email {n} about the budget."},),
                     expected=(ToolCall("send_email", {"to": n}),)) for i, n in enumerate(NAMES)]

    def task(self, task_id):
        return next(t for t in self.tasks("train") if t.id == task_id)

    def data_hash(self):
        return "sha256:bench"


def length_reward(prompts, completions, **kwargs):
    return [min(len(c), 40) / 40 for c in completions]


def exact_reward(prompts, completions, **kwargs):
    return [1.0 if c.strip().startswith('{"name": "send_email"') else 0.0 for c in completions]


def verify(task_id, text):
    ok = text.strip().startswith("{")
    return Verdict(ok, ok, False, False, 0.0, False, False, False, None,
                   "wrong_tool" if ok else "format_error", "bench", int(ok))


def step_times(stamps: list[float]) -> list[float]:
    return [b - a for a, b in zip(stamps[1:], stamps[2:])]  # drop the first (warm-up) step


def run_ours(config: TrainConfig) -> list[float]:
    from appliance.train import run_grpo

    stamps: list[float] = []
    run_grpo(config, pack=BenchPack(), reward_funcs=[length_reward, exact_reward], reward_weights=[1.0, 1.0],
             verify=verify, sink=lambda e: stamps.append(time.perf_counter()) if e.type == "step_metrics" else None)
    return step_times(stamps)


def run_bare(config: TrainConfig, work: Path) -> list[float]:
    """What a person would write with TRL alone: same model, LoRA, data, rewards and options."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from appliance.train.common import prompt_for
    from appliance.train.cpu import CpuBackend
    from appliance.train.presets import grpo_options

    backend = CpuBackend(config)
    model, tokenizer = backend.load_for_training(config)
    pack = BenchPack()
    dataset = Dataset.from_list([{"prompt": prompt_for(pack, tokenizer, t)} for t in pack.tasks("train")])
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "train_runtime" not in logs:
                stamps.append(time.perf_counter())

    args = GRPOConfig(output_dir=str(work / "bare"), max_steps=config.steps, learning_rate=config.effective_learning_rate,
                      per_device_train_batch_size=config.prompts_per_step * config.num_generations,
                      num_generations=config.num_generations, max_completion_length=config.completion_tokens,
                      temperature=config.temperature, logging_steps=1, save_strategy="no", report_to="none",
                      disable_tqdm=True, seed=config.seed, **backend.backend_args(),  # same precision and memory options
                      **grpo_options(config.preset, beta=config.beta))
    GRPOTrainer(model=model, reward_funcs=[length_reward, exact_reward], args=args, train_dataset=dataset,
                processing_class=tokenizer, callbacks=[Stamp()],
                rollout_func=backend.rollout_func(tokenizer, config)).train()  # the same sampler as ours
    return step_times(stamps)


def tiny_model(work: Path) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    build_tiny_model(len(tokenizer)).save_pretrained(work / "tiny")
    tokenizer.save_pretrained(work / "tiny")
    return str(work / "tiny")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model spec (default: a tiny random Llama built here)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--max-completion-tokens", type=int, default=32)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        base = TrainConfig(model=opts.model or tiny_model(work), pack="bench", backend="cpu", steps=opts.steps,
                           eval_every=opts.eval_every, num_generations=8, prompts_per_step=2, lora_r=16,
                           max_completion_tokens=opts.max_completion_tokens, temperature=0.8,
                           output=str(work / "checkpoints"), workspace=str(work / "runs"))
        ours, bare = [], []
        for _ in range(opts.rounds):
            ours += run_ours(base)
            bare += run_bare(base, work)
    ours_s, bare_s = statistics.median(ours), statistics.median(bare)
    print(f"model: {opts.model or 'tiny-random-llama'}")
    print(f"steps_measured: {len(ours)}")
    print(f"ours_step_s: {ours_s:.4f}")
    print(f"bare_step_s: {bare_s:.4f}")
    print(f"overhead_ratio: {ours_s / bare_s:.3f}")


if __name__ == "__main__":
    main()
