"""Strict decoding on the transformers backend: a logits processor that walks xgrammar's matchers.

One matcher per generated row follows the tokens the row has produced and masks
every next token its grammar (appliance.generate.strict) does not allow. Compiled
grammars are cached per tool list, so a batch of prompts over the same tools
compiles once.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

from appliance.generate.strict import answer_grammar


class GrammarCompilerCache:
    """xgrammar's compiler for one tokenizer, and each tool list's compiled answer grammar."""

    _by_tokenizer: "weakref.WeakKeyDictionary[Any, dict[tuple[int, tuple[int, ...]], GrammarCompilerCache]]" = (
        weakref.WeakKeyDictionary())

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> "GrammarCompilerCache":
        """The tokenizer's cache, built once: reading the vocabulary and compiling each tool list take
        longer than a step's masks, and GRPO builds a new generator for every step."""
        caches = cls._by_tokenizer.setdefault(tokenizer, {})
        key = (vocab_size, tuple(stop_ids))
        if key not in caches:
            caches[key] = cls(tokenizer, vocab_size, stop_ids)
        return caches[key]

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> None:
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_ids))
        self._compiler = xgr.GrammarCompiler(info)
        self._compiled: dict[str, Any] = {}
        self.vocab_size = vocab_size

    def compiled(self, tools: Sequence[dict[str, Any]]) -> Any:
        grammar = answer_grammar(tools)
        if grammar not in self._compiled:
            self._compiled[grammar] = self._compiler.compile_grammar(grammar)
        return self._compiled[grammar]


class GrammarLogitsProcessor:
    """Masks each row's logits to what its grammar allows next.

    transformers 5.17 runs a custom processor before its sampling warpers
    (generation/utils.py:1422, temperature and top-p after it), so temperature and
    top-p see the masked logits and a nucleus never holds a forbidden token. A row
    whose matcher rejects a token (padding after the row ended on a stop string)
    goes free from then on.
    """

    def __init__(self, grammars: Sequence[Any], vocab_size: int) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self._matchers: list[Any] = [xgr.GrammarMatcher(grammar) for grammar in grammars]
        self._bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self._started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self._started:
            self._accept(input_ids[:, -1].tolist())
        self._started = True
        self._bitmask.fill_(-1)  # every token allowed, until a live matcher says otherwise
        for row, matcher in enumerate(self._matchers):
            if matcher is not None and not matcher.is_terminated():
                matcher.fill_next_token_bitmask(self._bitmask, row)
        self._xgr.apply_token_bitmask_inplace(scores, self._bitmask.to(scores.device))
        return scores

    def _accept(self, tokens: list[int]) -> None:
        for row, matcher in enumerate(self._matchers):
            if matcher is not None and not matcher.is_terminated() and not matcher.accept_token(tokens[row]):
                self._matchers[row] = None
