"""Strict decoding on the transformers backend: a logits processor that walks xgrammar's matchers.

One matcher per generated row follows the tokens the row has produced and masks
every next token its grammar (appliance.generate.strict) does not allow. Compiled
grammars are cached per tool list, so a batch of prompts over the same tools
compiles once.
"""
from __future__ import annotations

from typing import Any, Sequence

from appliance.generate.strict import answer_grammar


class GrammarCompilerCache:
    """xgrammar's compiler for one tokenizer, and each tool list's compiled answer grammar."""

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
    """Masks each row's logits to what its grammar allows next; top-p, when asked, comes after the mask.

    transformers runs a custom processor after its own warpers, so a top-p cut made
    there could leave no allowed token; strict sampling asks transformers for no
    top-p and applies it here, on the masked logits. A row whose matcher rejects
    a token (padding after the row ended on a stop string) goes free from then on.
    """

    def __init__(self, grammars: Sequence[Any], vocab_size: int, top_p: float = 1.0) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self._matchers: list[Any] = [xgr.GrammarMatcher(grammar) for grammar in grammars]
        self._bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self._top_p = top_p
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
        if self._top_p < 1.0:
            from transformers import TopPLogitsWarper

            scores = TopPLogitsWarper(self._top_p)(input_ids, scores)
        return scores

    def _accept(self, tokens: list[int]) -> None:
        for row, matcher in enumerate(self._matchers):
            if matcher is not None and not matcher.is_terminated() and not matcher.accept_token(tokens[row]):
                self._matchers[row] = None
