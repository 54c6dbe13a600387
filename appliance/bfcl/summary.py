"""Accuracy per BFCL category and the leaderboard's summary numbers.

Per category: passing rows / rows, all or nothing per row (SCORING.md §0.5).
The leaderboard's summaries (SCORING.md §7), restricted to what this pack holds:

- non_live_ast: unweighted mean of simple, multiple, parallel and
  parallel_multiple, where simple is itself the unweighted mean of
  simple_python / simple_java / simple_javascript (only simple_python here);
- live_ast: the live AST categories pooled, i.e. weighted by entry count
  (live_simple and live_multiple here; live_parallel* when present);
- irrelevance: reported on its own, as upstream does.

`overall` is our own number, not the leaderboard's: the V4 overall also weighs
multi-turn, agentic and other sections this pack does not have. It is the
unweighted mean of the per-category accuracies present.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

SIMPLE_CATEGORIES = ("simple_python", "simple_java", "simple_javascript")
NON_LIVE_GROUPS = ("multiple", "parallel", "parallel_multiple")
LIVE_AST_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


def _tally(results: Iterable[tuple[str, bool]]) -> dict[str, tuple[int, int]]:
    passed: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for category, ok in results:
        total[category] += 1
        passed[category] += bool(ok)
    return {category: (passed[category], total[category]) for category in total}


def accuracy_by_category(results: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Fraction passed per category from `(category, passed)` pairs, one per row."""
    return {category: p / n for category, (p, n) in sorted(_tally(results).items())}


def bfcl_summary(results: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Per-category accuracies plus non_live_ast, live_ast, irrelevance and overall (see module doc)."""
    tally = _tally(results)
    accuracy = {category: p / n for category, (p, n) in sorted(tally.items())}
    summary = dict(accuracy)
    simple = [accuracy[c] for c in SIMPLE_CATEGORIES if c in accuracy]
    groups = ([sum(simple) / len(simple)] if simple else []) + [accuracy[c] for c in NON_LIVE_GROUPS if c in accuracy]
    if groups:
        summary["non_live_ast"] = sum(groups) / len(groups)
    live = [tally[c] for c in LIVE_AST_CATEGORIES if c in tally]
    if live:
        summary["live_ast"] = sum(p for p, _ in live) / sum(n for _, n in live)
    if "irrelevance" in accuracy:
        summary["irrelevance"] = accuracy["irrelevance"]
    if accuracy:
        summary["overall"] = sum(accuracy.values()) / len(accuracy)
    return summary
