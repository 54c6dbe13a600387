"""SFT batches of one prompt head (appliance.train.batches): every row once a pass, one head a batch where
counts allow."""
from __future__ import annotations

import random

from appliance.train.batches import NO_HEAD, HeadGroupedSampler, head_grouped_order, row_heads


def test_each_row_comes_once_and_whole_batches_hold_one_head():
    heads = [0] * 10 + [1] * 7 + [2] * 3 + [NO_HEAD] * 2
    lengths = [random.Random(row).randrange(50, 400) for row in range(len(heads))]
    order = head_grouped_order(heads, lengths, 4, random.Random(0))
    assert sorted(order) == list(range(len(heads)))
    batches = [order[start:start + 4] for start in range(0, len(order), 4)]
    one_head = [batch for batch in batches if len({heads[row] for row in batch}) == 1]
    assert len(one_head) == 10 // 4 + 7 // 4  # every whole batch a head's count allows; 2 + 3 + 3 + 2 left over
    assert [len(batch) for batch in batches] == [4] * 5 + [2]  # the short batch last: the loader cuts every 4


def test_within_a_head_rows_of_similar_length_meet():
    heads = [0] * 16
    lengths = [10, 500] * 8
    order = head_grouped_order(heads, lengths, 4, random.Random(1))
    assert all(len({lengths[row] for row in order[start:start + 4]}) == 1 for start in range(0, 16, 4))


def test_the_sampler_draws_a_new_seeded_order_each_pass():
    heads, lengths = [0, 1] * 12, [100] * 24
    first, second = HeadGroupedSampler(heads, lengths, 4, seed=3), HeadGroupedSampler(heads, lengths, 4, seed=3)
    passes = [list(first), list(first)]
    assert passes[0] != passes[1] and [list(second), list(second)] == passes and len(first) == 24
    resumed = HeadGroupedSampler(heads, lengths, 4, seed=3)
    resumed.set_epoch(1)  # a run resumed in its second pass: the trainer names the pass first
    assert list(resumed) == passes[1]


def test_a_row_takes_the_longest_shared_head_it_starts_with():
    system, tools_a, tools_b = list(range(100, 120)), list(range(200, 220)), list(range(300, 320))
    prompts = [system + tools_a + [1], system + tools_a + [2], system + tools_b + [3], system + tools_b + [4],
               [9, 9, 9]]
    heads = row_heads(prompts)
    assert heads[0] == heads[1] != heads[2] == heads[3] and heads[4] == NO_HEAD
