"""What strict decoding costs and changes: the same prompts decoded freely and held to their tools' schemas.

Greedy, 96 new tokens, batches of 32, one model (an adapter if given), side by
side in one process and alternating (free, strict, free, strict) because these
machines drift. Answers are scored by the pack's verifier.

Prints `name: value` lines: each mode's seconds, their ratio, how many answers
differ, and each mode's valid-answer count and successes.

    .venv/bin/python bench/bench_strict.py [--adapter DIR] [--pack workplace-single] [--split dev] [--limit 64]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench_generate.py

from appliance.evaluate.scoring import make_scorer
from appliance.generate.hf import HFGenerator
from appliance.packs.pack import load_pack
from appliance.prompting import render_prompt
from appliance.verify import is_schema_failure

BATCH = 32
MAX_NEW_TOKENS = 96


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--pack", default="workplace-single")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="free/strict pairs, alternating")
    args = parser.parse_args()

    generator = HFGenerator.load("smollm2-135m", adapter=args.adapter, batch_size=BATCH)
    pack = load_pack(args.pack)
    tasks = pack.tasks(args.split)[: args.limit]
    prompts = [render_prompt(generator.tokenizer, pack.system_prompt, list(t.messages), pack.tools_for(t))
               for t in tasks]
    tools = [pack.tools_for(t) for t in tasks]

    def decode(strict: bool) -> tuple[float, list[str]]:
        started = time.perf_counter()
        samples = generator.generate(prompts, max_new_tokens=MAX_NEW_TOKENS, strict_tools=tools if strict else None)
        return time.perf_counter() - started, [s[0].text for s in samples]

    decode(True)  # warm-up: compiles the tool lists' grammars once, as an eval's first batch does
    seconds = {False: 0.0, True: 0.0}
    answers: dict[bool, list[str]] = {}
    for _ in range(args.rounds):
        for strict in (False, True):
            spent, answers[strict] = decode(strict)
            seconds[strict] += spent
    scorer = make_scorer(pack)
    verdicts = {strict: [scorer.score_text(t, text) for t, text in zip(tasks, answers[strict])]
                for strict in (False, True)}
    print(f"tasks: {len(tasks)}")
    print(f"free_s: {seconds[False] / args.rounds:.1f}")
    print(f"strict_s: {seconds[True] / args.rounds:.1f}")
    print(f"strict_over_free: {seconds[True] / seconds[False]:.3f}")
    print(f"answers_changed: {sum(a != b for a, b in zip(answers[False], answers[True]))}")
    for strict, name in ((False, "free"), (True, "strict")):
        buckets = [v.bucket for v in verdicts[strict]]
        schema_errors = sum(v.bucket in ("wrong_tool", "wrong_arguments") and is_schema_failure(v.reason)
                            for v in verdicts[strict])
        print(f"{name}_format_errors: {buckets.count('format_error')}")
        print(f"{name}_schema_errors: {schema_errors}")
        print(f"{name}_successes: {buckets.count('success')}")


if __name__ == "__main__":
    main()
