"""Train/eval leakage: exact and near-duplicate request texts across splits.

A held-out split is only a measurement if none of its requests also sits in
train, verbatim or nearly so. Texts are normalised (lowercase, punctuation and
whitespace collapsed) and compared as sets of character shingles; two texts
whose Jaccard similarity is at least the threshold are near-duplicates.

The search is exact, not sampled: a prefix filter (the "all-pairs" trick) only
compares pairs that share one of their rarest shingles, which any pair above
the threshold must do, so a few thousand rows per split take well under a
second.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

NEAR_DUPLICATE_JACCARD = 0.9
SHINGLE_SIZE = 5

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Lowercase, drop punctuation, collapse whitespace: the text leakage compares."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def shingles(text: str, size: int = SHINGLE_SIZE) -> frozenset[str]:
    """Character shingles of an already normalised text (the whole text if shorter)."""
    if len(text) <= size:
        return frozenset([text])
    return frozenset(text[i : i + size] for i in range(len(text) - size + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class Collision:
    """One eval text that duplicates a train text; indices point into the inputs."""

    eval_index: int
    train_index: int
    similarity: float

    @property
    def exact(self) -> bool:
        return self.similarity >= 1.0


def find_collisions(
    train_texts: Sequence[str],
    eval_texts: Sequence[str],
    threshold: float = NEAR_DUPLICATE_JACCARD,
) -> list[Collision]:
    """Every eval text whose best train match reaches `threshold` (one collision per eval text).

    Exact duplicates after normalisation are reported with similarity 1.0.
    """
    train_norm = [normalise(t) for t in train_texts]
    eval_norm = [normalise(t) for t in eval_texts]
    exact_index = {text: i for i, text in enumerate(train_norm)}

    train_sets = [shingles(t) for t in train_norm]
    eval_sets = [shingles(t) for t in eval_norm]
    rank = _rarity_rank(train_sets + eval_sets)
    index = _prefix_index(train_sets, rank, threshold)

    collisions = []
    for e, (text, shingle_set) in enumerate(zip(eval_norm, eval_sets)):
        if text in exact_index:
            collisions.append(Collision(e, exact_index[text], 1.0))
            continue
        best = _best_match(shingle_set, train_sets, index, rank, threshold)
        if best is not None:
            collisions.append(Collision(e, best[0], best[1]))
    return collisions


def _rarity_rank(sets: list[frozenset[str]]) -> dict[str, int]:
    """A global order of shingles, rarest first, so prefixes hold the most selective ones."""
    frequency = Counter(s for shingle_set in sets for s in shingle_set)
    ordered = sorted(frequency, key=lambda s: (frequency[s], s))
    return {s: i for i, s in enumerate(ordered)}


def _prefix(shingle_set: frozenset[str], rank: dict[str, int], threshold: float) -> list[str]:
    """The rarest |x| - ceil(t|x|) + 1 shingles: any match at >= t shares one of them."""
    size = len(shingle_set)
    length = size - math.ceil(threshold * size) + 1
    return sorted(shingle_set, key=rank.__getitem__)[:length]


def _prefix_index(
    sets: list[frozenset[str]], rank: dict[str, int], threshold: float
) -> dict[str, list[int]]:
    index: dict[str, list[int]] = defaultdict(list)
    for i, shingle_set in enumerate(sets):
        for s in _prefix(shingle_set, rank, threshold):
            index[s].append(i)
    return index


def _best_match(
    shingle_set: frozenset[str],
    train_sets: list[frozenset[str]],
    index: dict[str, list[int]],
    rank: dict[str, int],
    threshold: float,
) -> tuple[int, float] | None:
    candidates = {i for s in _prefix(shingle_set, rank, threshold) for i in index.get(s, ())}
    best: tuple[int, float] | None = None
    for i in sorted(candidates):
        other = train_sets[i]
        # Jaccard can never exceed the size ratio, so skip the set algebra when it cannot reach t.
        small, large = sorted((len(shingle_set), len(other)))
        if small < threshold * large:
            continue
        similarity = jaccard(shingle_set, other)
        if similarity >= threshold and (best is None or similarity > best[1]):
            best = (i, similarity)
    return best
