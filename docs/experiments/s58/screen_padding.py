"""Tokens past the heads that screening's chunks of 16 pad to, in the order given and in length order within a
head (GRPO's pool: workplace-single's train_rl; a read, session 58).

    .venv/bin/python docs/experiments/s58/screen_padding.py
"""
import json
import os
from collections import defaultdict

from transformers import AutoTokenizer

from appliance.generate.hf import answer_token_ids
from appliance.models import local_model_dir, resolve_model
from appliance.packs import load_pack
from appliance.prompting import reference_answer
from appliance.train.common import prompt_for, tools_shown

tokenizer = AutoTokenizer.from_pretrained(local_model_dir(resolve_model("smollm2-135m")))
pack = load_pack("workplace-single", root="tasks")
by_list = defaultdict(list)
for task in pack.tasks("train_rl"):
    by_list[json.dumps(tools_shown(pack, task), sort_keys=True, default=str)].append(task)
real = given = ordered = 0
for tasks in by_list.values():
    prompts = [tokenizer(prompt_for(pack, tokenizer, t), add_special_tokens=False)["input_ids"] for t in tasks]
    answers = answer_token_ids(tokenizer, [reference_answer(t) for t in tasks], end_of_turn=True)
    head = len(os.path.commonprefix([tuple(p) for p in prompts]))
    rows = [len(p) - head + len(a) for p, a in zip(prompts, answers)]
    padded = lambda lengths: sum(max(lengths[i:i + 16]) * len(lengths[i:i + 16]) for i in range(0, len(lengths), 16))
    real, given, ordered = real + sum(rows), given + padded(rows), ordered + padded(sorted(rows))
print(f"tool_lists: {len(by_list)}")
print(f"row_tokens: {real}")
print(f"padded_given_order: {given}")
print(f"padded_length_order: {ordered}")
