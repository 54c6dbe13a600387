"""Batched vs one-at-a-time generation with the transformers backend.

Same model, same 16 tool-call prompts (~270 tokens each, five fake workplace
tools), same greedy settings, measured side by side in one run because these
machines are noisy. Prints `name: value` lines; the goal is a batched speedup
of at least 4x on 2 CPU cores.

    .venv/bin/python bench/bench_generate.py [--model smollm2-135m] [--max-new-tokens 48]
"""
from __future__ import annotations

import argparse
import os
import time

# Before torch loads: with OpenMP's default spin-waiting, 2 threads on a 2-core machine that other
# processes share run 5-20x slower (measured); passive waiting removes that cliff.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from appliance.generate.hf import HFGenerator
from appliance.models import load_model
from appliance.prompting import render_prompt

SYSTEM_PROMPT = "You are a workplace assistant. Today is Monday 2023-11-27. Use the tools to act on the request."


def _tool(name: str, description: str, *arguments: str) -> dict:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {argument: {"type": "string"} for argument in arguments},
            "required": list(arguments),
        },
    }


TOOLS = [
    _tool("email.send_email", "Send an email.", "recipient", "subject", "body"),
    _tool("calendar.create_event", "Create an event; start is YYYY-MM-DD HH:MM:SS.", "event_name", "participant_email", "event_start", "duration"),
    _tool("calendar.delete_event", "Delete an event by its 8-digit id.", "event_id"),
    _tool("project.update_task", "Set one field of a task.", "task_id", "field", "new_value"),
    _tool("crm.search_customers", "Search customers by name, email or status.", "customer_name", "status"),
]

REQUESTS = [
    "Send an email to carlos.rodriguez@atlas.com saying the budget review moved to Thursday.",
    "Schedule a 30 minute meeting with nadia.moreau@atlas.com tomorrow at 10am called Roadmap sync.",
    "Cancel event 00000013 on my calendar.",
    "Move task 00000042 to the completed list.",
    "Find all customers with status qualified.",
    "Email the team lead that the dashboard is live.",
    "Book a call with kofi.mensah@atlas.com on Friday at 3pm for an hour about hiring.",
    "Delete the event with id 00000201.",
    "Reassign task 00000007 to fatima.khan@atlas.com.",
    "Look up the customer named Jin Park.",
    "Tell amir.hassan@atlas.com the server maintenance is at midnight.",
    "Put a design review on my calendar for next Monday at 2pm with lena.schmidt@atlas.com.",
    "Remove calendar event 00000077.",
    "Change the due date of task 00000100 to 2023-12-15.",
    "Which customers are still leads?",
    "Nothing to do today, just saying thanks for the help.",
]


def build_prompts(tokenizer) -> list[str]:
    return [render_prompt(tokenizer, SYSTEM_PROMPT, [{"role": "user", "content": r}], TOOLS) for r in REQUESTS]


def timed(generator: HFGenerator, prompts: list[str], max_new_tokens: int) -> tuple[float, list]:
    started = time.perf_counter()
    results = generator.generate(prompts, temperature=0, max_new_tokens=max_new_tokens)
    return time.perf_counter() - started, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    prompts = build_prompts(tokenizer)
    batched = HFGenerator(model, tokenizer, batch_size=len(prompts))
    sequential = HFGenerator(model, tokenizer, batch_size=1)
    timed(batched, prompts[:2], 4)  # warm-up: first-call allocations should not count against either side

    batched_s, batched_results = timed(batched, prompts, args.max_new_tokens)
    sequential_s, sequential_results = timed(sequential, prompts, args.max_new_tokens)
    same = sum(b[0].text == s[0].text for b, s in zip(batched_results, sequential_results))
    prompt_tokens = [r[0].prompt_tokens for r in batched_results]
    completion_tokens = sum(r[0].completion_tokens for r in sequential_results)

    print(f"prompts: {len(prompts)}")
    print(f"prompt_tokens_mean: {sum(prompt_tokens) / len(prompt_tokens):.0f}")
    print(f"max_new_tokens: {args.max_new_tokens}")
    print(f"completion_tokens_total: {completion_tokens}")
    print(f"batched_s: {batched_s:.1f}")
    print(f"sequential_s: {sequential_s:.1f}")
    print(f"batched_samples_per_s: {len(prompts) / batched_s:.2f}")
    print(f"sequential_samples_per_s: {len(prompts) / sequential_s:.2f}")
    print(f"batched_speedup: {sequential_s / batched_s:.2f}")
    print(f"identical_greedy_outputs: {same}/{len(prompts)}")


if __name__ == "__main__":
    main()
