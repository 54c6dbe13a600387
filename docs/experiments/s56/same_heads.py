"""Which eval batches group their heads differently under session 56's rule (`branching_root`) than before.

For each split an eval of the pipeline reads (workplace-single val and dev, BFCL's gate, and the fit checks:
the first 32 of train and of train_rl), the batches `appliance eval` forms, tokenized as the generator does;
prints per split how many batches keep every row's head and the prefill tokens (distinct heads past their
common root, and rows × longest tail) under each rule. Then random GRPO-like draws of 4, 8 and 16 train_rl
prompts. Reads no model weights.

    .venv/bin/python docs/experiments/s56/same_heads.py
"""
from __future__ import annotations

import random

from transformers import AutoTokenizer

from appliance.evaluate.runner import EvalSettings, _Session
from appliance.events import null_sink
from appliance.generate.heads import branching_root, common_length, head_lengths
from appliance.models import embedded_model_dir
from appliance.packs import load_pack
from appliance.prompting import render_prompt


def regrouped(rows: list[list[int]]) -> bool:
    """Whether the rows' heads differ under the two rules."""
    limits = [len(row) - 1 for row in rows]
    return head_lengths(rows, limits) != head_lengths(rows, limits, root=branching_root(rows))


def prefill_tokens(rows: list[list[int]], lengths: list[int]) -> tuple[int, int]:
    distinct = list({tuple(row[:length]) for row, length in zip(rows, lengths) if length})
    root = min((common_length(list(distinct[0]), list(d)) for d in distinct), default=0) if len(distinct) > 1 else 0
    heads = (root + sum(len(d) - root for d in distinct)) if distinct else 0
    return heads, len(rows) * max(len(row) - length for row, length in zip(rows, lengths))


def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_model_dir()))
    for pack_name, split, limit in [("workplace-single", "val", None), ("workplace-single", "dev", None),
                                    ("bfcl", "gate", None), ("workplace-single", "train", 32),
                                    ("workplace-single", "train_rl", 32)]:
        pack = load_pack(pack_name)
        tasks = [t for t in pack.tasks(split)[:limit or None] if t.kind == "single_step"]
        prompts = {t.id: render_prompt(tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t))
                   for t in tasks}
        session = _Session(EvalSettings(pack=pack_name), pack, None, None, null_sink, "check", None)
        batches = session._batches_by_tools(tasks, {k: len(v) for k, v in prompts.items()}, 32)
        same, before, now = 0, [0, 0], [0, 0]
        for batch in batches:
            rows = sorted(tokenizer([prompts[t.id] for t in batch], add_special_tokens=False)["input_ids"])
            limits = [len(row) - 1 for row in rows]
            old, new = head_lengths(rows, limits), head_lengths(rows, limits, root=branching_root(rows))
            same += old == new
            for total, lengths in ((before, old), (now, new)):
                heads, tails = prefill_tokens(rows, lengths)
                total[0] += heads
                total[1] += tails
        print(f"{pack_name}/{split}: batches {len(batches)}, same heads {same}, "
              f"head/tail tokens before {before[0]}/{before[1]}, now {now[0]}/{now[1]}")
    pack = load_pack("workplace-single")
    encoded = [tokenizer(render_prompt(tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t)),
                         add_special_tokens=False)["input_ids"] for t in pack.tasks("train_rl")]
    rng = random.Random(0)
    for size in (4, 8, 16):
        draws = [sorted(rng.sample(encoded, size)) for _ in range(2000)]
        differ = sum(regrouped(rows) for rows in draws)
        print(f"train_rl draws of {size}: {differ} of 2000 group differently")


if __name__ == "__main__":
    main()
