"""The order an eval sends its tasks in, on a pack where nearly every task has a tool list of its own.

BFCL's gate split (140 tasks, 135 tool lists) is what the promotion gate runs
twice per `make run`. Greedy, 96 new tokens, batches of 32, the base model, side
by side in one process (these machines are noisy):

* `task_order`: tool lists in order of appearance, as evals ordered every pack
  before session 16 (on BFCL that is the file's order, lengths mixed);
* `eval_order`: what `appliance eval` does now (appliance.evaluate.runner): lists
  shared by several tasks first, then tasks with a list of their own by length,
  so a batch pads less and decodes over a shorter cache.

Prints `name: value` lines, the ratio and how many answers are identical.

    .venv/bin/python bench/bench_eval_order.py [--pack bfcl] [--split gate] [--limit 140]
"""
from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from bench_eval_batches import run  # greedy, 96 new tokens, timed; this script runs from bench/

from appliance.evaluate.runner import EvalSettings, _Session
from appliance.events import null_sink
from appliance.generate.hf import HFGenerator
from appliance.packs.pack import load_pack
from appliance.prompting import render_prompt

BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", default="bfcl")
    parser.add_argument("--split", default="gate")
    parser.add_argument("--limit", type=int, default=140)
    args = parser.parse_args()

    generator = HFGenerator.load("smollm2-135m", batch_size=BATCH)
    pack = load_pack(args.pack)
    tasks = pack.tasks(args.split)[: args.limit]
    prompts = {t.id: render_prompt(generator.tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t))
               for t in tasks}
    lists = {t.id: json.dumps(pack.tools_for(t), sort_keys=True, default=str) for t in tasks}
    rank = {key: index for index, key in enumerate(dict.fromkeys(lists.values()))}
    task_order = [sorted(tasks, key=lambda t: (rank[lists[t.id]], len(prompts[t.id])))[i:i + BATCH]
                  for i in range(0, len(tasks), BATCH)]
    session = _Session(EvalSettings(pack=args.pack), pack, generator, None, null_sink, "bench", None)
    eval_order = session._batches_by_tools(tasks, {t.id: len(prompts[t.id]) for t in tasks}, BATCH)

    def texts_of(batches: list) -> list[list[str]]:
        return [[prompts[t.id] for t in batch] for batch in batches]

    run(generator, [list(prompts.values())[:2]])  # warm-up
    task_s, task_texts = run(generator, texts_of(task_order))
    eval_s, eval_texts = run(generator, texts_of(eval_order))
    answers = dict(zip([t.id for batch in task_order for t in batch], task_texts))
    same = sum(answers[t.id] == text for t, text in zip([t for batch in eval_order for t in batch], eval_texts))

    print(f"tasks: {len(tasks)}")
    print(f"tool_lists: {len(rank)}")
    print(f"task_order_s: {task_s:.1f}")
    print(f"eval_order_s: {eval_s:.1f}")
    print(f"speedup: {task_s / eval_s:.2f}")
    print(f"identical_greedy_outputs: {same}/{len(tasks)}")


if __name__ == "__main__":
    main()
