"""How much harder GRPO's loss pushes a short answer than a long one, on a pack's own answers.

TRL's `loss_type="grpo"` averages each completion's token losses over that
completion's own length before averaging over the batch (trl 1.16
grpo_trainer.py:3154, `((per_token_loss * mask).sum(-1) / mask.sum(-1)).mean()`),
so every token of a completion of L tokens carries weight 1/L. On
workplace-single a decline ("No action is needed." and the end of turn) is a
handful of tokens and a tool call several dozen, so a rewarded decline moves its
tokens, the first one included, the one that decides between declining and
calling, many times harder than a rewarded call moves its own. `dapo` (and
`bnpo`) divide the whole batch's token sum by its token count, and `dr_grpo` by
a constant: every token alike, whatever its completion's length.

    .venv/bin/python bench/bench_length_bias.py [--pack workplace-single] [--split train_rl]

Prints `name: value` lines: how many tasks of the split expect no call, the
token length of their answer and of the call answers (the canonical answers SFT
teaches, plus the end-of-turn token), and the per-token weight of a decline
relative to a median call under `grpo` (under the token-level losses it is 1 by
construction, so it is not printed).
"""
from __future__ import annotations

import argparse
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--split", default="train_rl")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from appliance.models import local_model_dir, resolve_model
    from appliance.packs import load_pack
    from appliance.prompting import render_completion

    tokenizer = AutoTokenizer.from_pretrained(local_model_dir(resolve_model(args.model)))
    tasks = load_pack(args.pack).tasks(args.split)

    def answer_tokens(task) -> int:  # + 1: the end-of-turn token the completion ends with
        return len(tokenizer(render_completion(task.expected), add_special_tokens=False)["input_ids"]) + 1

    declines = [answer_tokens(task) for task in tasks if not task.expected]
    calls = sorted(answer_tokens(task) for task in tasks if task.expected)
    median_call = statistics.median(calls)
    decline = statistics.median(declines) if declines else float("nan")
    print(f"split: {args.pack}/{args.split}")
    print(f"tasks: {len(tasks)}")
    print(f"no_call_tasks: {len(declines)}")
    print(f"decline_tokens: {decline:g}")
    print(f"call_tokens_median: {median_call:g}")
    print(f"call_tokens_min: {calls[0]}")
    print(f"call_tokens_max: {calls[-1]}")
    # Per-token weight of a decline relative to a median call, the same advantage on both.
    print(f"grpo_decline_token_weight_ratio: {median_call / decline:.2f}")


if __name__ == "__main__":
    main()
