"""Helpers for eval tests: a scripted generator so the real engine path runs without a model."""
from __future__ import annotations

from appliance.generate.base import Generator, Sample
from appliance.prompting import render_completion


class ScriptedGenerator(Generator):
    """Answers each prompt with a script: a function from (prompt, call index) to text."""

    name = "scripted"

    def __init__(self, tokenizer, answer):
        self.tokenizer = tokenizer
        self.answer = answer
        self.prompts: list[str] = []

    def generate(self, prompts, *, n=1, temperature=0.0, top_p=1.0, max_new_tokens=128, stop=None, seed=None,
                 strict_tools=None):
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            out.append([Sample(self.answer(prompt, i), 7, 100, 0.5, "stop") for i in range(n)])
        return out


def expected_answer_for(pack, split):
    """A script answering each task with its expected calls (found by the request text in the prompt)."""
    by_request = {t.request: render_completion(t.expected) for t in pack.tasks(split)}

    def answer(prompt: str, index: int) -> str:
        return next(text for request, text in by_request.items() if request in prompt)
    return answer
