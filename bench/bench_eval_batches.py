"""Eval-shaped generation: today's batching against the scheme it replaced, on the pack's own prompts.

The first N dev tasks of workplace-single (several tool lists), greedy, 96 new
tokens, the same model, run side by side in one process because these machines
are noisy:

* previous: batches of 16 in length order, one prefix cached per batch (the
  prompts' common tokens, i.e. the system prompt's start when tool lists mix),
  decoding into a DynamicCache;
* current: batches of 32 in tool-list order, every tool list's head cached once
  (the system prompt shared across lists), decoding into a StaticCache.

Prints `name: value` lines, the ratio and how many answers are identical.

    .venv/bin/python bench/bench_eval_batches.py [--limit 48] [--adapter DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from appliance.generate import heads
from appliance.generate.hf import HFGenerator
from appliance.packs.pack import load_pack
from appliance.prompting import render_prompt


def eval_batches(generator: HFGenerator, split: str, limit: int) -> tuple[list, list[list[str]]]:
    """workplace-single's first `limit` tasks of `split`, and their prompts in the batches of 32 `appliance eval`
    makes of them (by tool list, then length)."""
    from appliance.evaluate.runner import EvalSettings, _Session
    from appliance.events import null_sink

    pack = load_pack("workplace-single")
    tasks = pack.tasks(split)[:limit]
    prompts = {t.id: render_prompt(generator.tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t))
               for t in tasks}
    session = _Session(EvalSettings(), pack, generator, None, null_sink, "bench", None)
    order = session._batches_by_tools(tasks, {t.id: len(prompts[t.id]) for t in tasks}, 32)
    return tasks, [[prompts[t.id] for t in batch] for batch in order]


class PreviousScheme(HFGenerator):
    """The generator as it was: one common prefix per call and a cache that grows by concatenation."""

    def _head_lengths(self, rows: list[list[int]], limits: list[int]) -> list[int]:
        common = min(limits)
        for tokens in rows[1:]:
            common = min(common, heads.common_length(rows[0], tokens))
        return [common if common >= heads.MIN_SHARED_PREFIX_TOKENS else 0] * len(rows)

    def _with_static_cache(self, inputs: dict, max_new_tokens: int) -> dict:
        return inputs


def run(generator: HFGenerator, batches: list[list[str]]) -> tuple[float, list[str]]:
    started = time.perf_counter()
    texts = [samples[0].text for batch in batches for samples in generator.generate(batch, max_new_tokens=96)]
    return time.perf_counter() - started, texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=48)
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder (default: the base model)")
    args = parser.parse_args()

    current = HFGenerator.load("smollm2-135m", adapter=args.adapter, batch_size=32)
    previous = PreviousScheme(current.model, current.tokenizer, batch_size=16)
    pack = load_pack("workplace-single")
    tasks = pack.tasks("dev")[: args.limit]
    prompts = {t.id: render_prompt(current.tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t))
               for t in tasks}
    by_length = sorted(tasks, key=lambda t: len(prompts[t.id]))
    lists = {json.dumps(pack.tools_for(t), sort_keys=True): None for t in tasks}
    rank = {key: index for index, key in enumerate(lists)}
    by_tools = sorted(tasks, key=lambda t: (rank[json.dumps(pack.tools_for(t), sort_keys=True)], len(prompts[t.id])))

    def batches(order: list, size: int) -> list[list[str]]:
        return [[prompts[t.id] for t in order[i:i + size]] for i in range(0, len(order), size)]

    run(current, [list(prompts.values())[:2]])  # warm-up
    previous_s, previous_texts = run(previous, batches(by_length, 16))
    current_s, current_texts = run(current, batches(by_tools, 32))
    answers = dict(zip([t.id for t in by_length], previous_texts))
    same = sum(answers[t.id] == text for t, text in zip(by_tools, current_texts))

    print(f"tasks: {len(tasks)}")
    print(f"tool_lists: {len(lists)}")
    print(f"previous_s: {previous_s:.1f}")
    print(f"current_s: {current_s:.1f}")
    print(f"speedup: {previous_s / current_s:.2f}")
    print(f"identical_greedy_outputs: {same}/{len(tasks)}")


if __name__ == "__main__":
    main()
