"""Prompt heads: the leading tokens (system prompt + tool list) that groups of prompts share.

Generation prefills a head once for every row that has it (generate/hf.py), and
training reuses the frozen lower layers' activations on it (train/frozen_heads.py).
"""
from __future__ import annotations

# Below this many common leading tokens, a separate prefill costs more than it saves.
MIN_SHARED_PREFIX_TOKENS = 16


def common_length(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def head_groups(rows: list[list[int]], limits: list[int], min_tokens: int = MIN_SHARED_PREFIX_TOKENS,
                root: int = 0) -> list[tuple[list[int], int]]:
    """(member row indices, common head length) groups, in token order.

    A row joins the group before it when the head it would share saves more
    prefill than the group loses by a shorter common head (the same system
    prompt and tool list: yes; only the system prompt: no). A lone row's head
    is all of it up to its limit. No head is longer than a member's limit.
    `root`: leading tokens that are computed once whatever the grouping (generation
    prefills the common root of its distinct heads once), so sharing them saves nothing.
    """
    order = sorted(range(len(rows)), key=lambda index: rows[index])
    groups: list[tuple[list[int], int]] = []
    for index in order:
        if groups:
            members, common = groups[-1]
            shared = min(common, common_length(rows[members[0]], rows[index]), limits[index])
            if shared >= min_tokens and shared - root > len(members) * (common - shared):
                groups[-1] = ([*members, index], shared)
                continue
        groups.append(([index], limits[index]))
    return groups


def head_lengths(rows: list[list[int]], limits: list[int], min_tokens: int = MIN_SHARED_PREFIX_TOKENS,
                 root: int = 0) -> list[int]:
    """How many leading tokens of each row its `head_groups` head covers (0: a head too short to share)."""
    lengths = [0] * len(rows)
    for members, common in head_groups(rows, limits, min_tokens, root=root):
        for member in members:
            lengths[member] = common if common >= min_tokens else 0
    return lengths


def branching_root(rows: list[list[int]], min_tokens: int = MIN_SHARED_PREFIX_TOKENS) -> int:
    """The leading tokens every row shares, when rows branch below them into heads of their own (one system
    prompt over several tool lists); 0 when they do not (branches shorter than `min_tokens`, e.g. the first
    words of requests under one tool list, are tails, not heads)."""
    if len(rows) < 2:
        return 0
    ordered = sorted(rows)
    root = common_length(ordered[0], ordered[-1])  # in token order the ends share the least
    deepest = max(common_length(a, b) for a, b in zip(ordered, ordered[1:]))
    return root if deepest - root >= min_tokens else 0


def shared_heads(prompts: list[list[int]], min_tokens: int = MIN_SHARED_PREFIX_TOKENS) -> list[list[int]]:
    """The distinct heads that two or more different prompts share (each leaves every member a token of its own)."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts if p))
    rows = [list(p) for p in distinct]
    groups = head_groups(rows, [len(p) - 1 for p in rows], min_tokens)
    return [rows[members[0]][:common] for members, common in groups if len(members) > 1 and common >= min_tokens]


def logprob_chunks(prompts: list[list[int]], answers: list[list[int]], size: int) -> list[list[int]]:
    """Row indices in chunks of `size` for a teacher-forced pass over prompt + answer: the rows of one head side
    by side, and within a head the rows of similar length, so a chunk pads its rows to little more than their own.

    Why: screening GRPO's 480 tasks (six tool lists) in the order given padded 33,974 tokens of rows to 61,557;
    in length order within a head, to 38,106 (`.venv/bin/python docs/experiments/s58/screen_padding.py`)."""
    order: list[int] = []
    # The heads the generator prefills (HFGenerator._head_lengths): below one system prompt, each tool list its own.
    for members, _ in head_groups(prompts, [len(p) - 1 for p in prompts], root=branching_root(prompts)):
        order += sorted(members, key=lambda index: len(prompts[index]) + len(answers[index]))
    return [order[start:start + size] for start in range(0, len(order), size)]
