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


def head_groups(rows: list[list[int]], limits: list[int],
                min_tokens: int = MIN_SHARED_PREFIX_TOKENS) -> list[tuple[list[int], int]]:
    """(member row indices, common head length) groups, in token order.

    A row joins the group before it when the head it would share saves more
    prefill than the group loses by a shorter common head (the same system
    prompt and tool list: yes; only the system prompt: no). A lone row's head
    is all of it up to its limit. No head is longer than a member's limit.
    """
    order = sorted(range(len(rows)), key=lambda index: rows[index])
    groups: list[tuple[list[int], int]] = []
    for index in order:
        if groups:
            members, common = groups[-1]
            shared = min(common, common_length(rows[members[0]], rows[index]), limits[index])
            if shared >= min_tokens and shared > len(members) * (common - shared):
                groups[-1] = ([*members, index], shared)
                continue
        groups.append(([index], limits[index]))
    return groups


def shared_heads(prompts: list[list[int]], min_tokens: int = MIN_SHARED_PREFIX_TOKENS) -> list[list[int]]:
    """The distinct heads that two or more different prompts share (each leaves every member a token of its own)."""
    distinct = list(dict.fromkeys(tuple(p) for p in prompts if p))
    rows = [list(p) for p in distinct]
    groups = head_groups(rows, [len(p) - 1 for p in rows], min_tokens)
    return [rows[members[0]][:common] for members, common in groups if len(members) > 1 and common >= min_tokens]
