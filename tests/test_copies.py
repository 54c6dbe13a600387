"""Which tokens of a sampled call copy the request (appliance.train.copies, TrainConfig.negatives_without_copies)."""
from __future__ import annotations

import pytest

from appliance.errors import ApplianceError
from appliance.train.config import TrainConfig
from appliance.train.copies import argument_value_chars, copied_chars, copied_tokens, token_char_spans
from appliance.train.loss_masks import negatives_without_copies


def _marked(text: str, flags: list[bool]) -> str:
    return "".join(char if flag else "_" for char, flag in zip(text, flags))


def test_only_string_values_under_arguments_count_as_argument_values():
    text = '{"name": "email_send", "arguments": {"to": "ana@x.com", "n": 3, "tags": ["a", "b\\"c"]}}'
    # Keys, the tool's name and the number are not; an escaped quote stays inside its string.
    assert _marked(text, argument_value_chars(text)).replace("_", " ").split() == ["ana@x.com", "a", 'b\\"c']


def test_a_list_of_calls_and_a_value_cut_short_are_read_as_far_as_they_go():
    text = '[{"name": "a", "arguments": {"x": "12"}}, {"name": "b", "arguments": {"y": "345'
    assert _marked(text, argument_value_chars(text)).replace("_", "") == "12345"


def test_copied_runs_are_marked_and_the_rest_of_a_value_is_not():
    request = "Write back to email 00000242 saying 'Approved.' at 13:30"
    text = '{"name": "email_reply_email", "arguments": {"email_id": "00000242", "body": "Approved at 14:30"}}'
    marked = _marked(text, copied_chars(text, request)).replace("_", " ").split()
    # The tool's name ("email" is in the request too) is not a value; "4" of the moved hour is not a copy.
    assert marked == ["00000242", "Approved", "at", "1", ":30"]


def test_runs_shorter_than_three_characters_are_chance_not_copies():
    text = '{"name": "t", "arguments": {"a": "xq9"}}'
    assert not any(copied_chars(text, "q9 and xq"))
    assert any(copied_chars(text, "xq9"))


def test_token_spans_follow_the_decoded_prefixes():
    pieces = {1: "ab", 2: "", 3: "c"}
    decode = lambda ids: "".join(pieces[i] for i in ids)  # noqa: E731
    assert token_char_spans(decode, [1, 2, 3]) == [(0, 2), (2, 2), (2, 3)]
    text = '{"arguments": {"k": "abc"}}'
    ids = [ord(c) for c in text]
    flags = copied_tokens(lambda ids: "".join(map(chr, ids)), ids, "say abc")
    assert _marked(text, flags) == "_" * 21 + "abc" + "_" * 3


def test_every_byte_token_of_a_copied_character_is_a_copy():
    text = '{"arguments": {"city": "Orléans"}}'
    ids = list(text.encode("utf-8"))  # one token a byte: "é" is two, the first decoded alone as U+FFFD
    flags = copied_tokens(lambda ids: bytes(ids).decode("utf-8", errors="replace"), ids, "fly to Orléans")
    assert bytes(i for i, flag in zip(ids, flags) if flag).decode("utf-8") == "Orléans"


def test_below_mean_samples_lose_their_copied_tokens_only():
    import torch

    request = "Email id 0042 to ana"
    right = '{"arguments": {"id": "0042"}}'
    wrong = '{"arguments": {"id": "0042", "to": "bob"}}'
    rows = [right, wrong, wrong, right]
    width = max(map(len, rows))
    ids = torch.tensor([[ord(c) for c in row] + [0] * (width - len(row)) for row in rows])
    mask = (torch.arange(width) < torch.tensor([len(r) for r in rows])[:, None]).long()
    output = {"advantages": torch.tensor([1.0, -1.0, -0.5, 0.0]), "completion_ids": ids, "completion_mask": mask,
              "num_items_in_batch": mask.sum()}
    kept = negatives_without_copies(output, lambda ids: "".join(map(chr, ids)), [request] * 4)
    loss_mask = output["tool_mask"]
    assert loss_mask[0].tolist() == [1] * width and loss_mask[3].tolist() == [1] * width  # not below the mean
    for row in (1, 2):
        left_out = "".join(chr(int(i)) for i, m, k in zip(ids[row], loss_mask[row], mask[row]) if k and not m)
        assert left_out == "0042"  # "bob" is not in the request, so it is still pushed down
    assert kept == pytest.approx((2 * len(wrong) - 8) / (2 * len(wrong)))
    assert int(output["num_items_in_batch"]) == int(mask.sum())  # the normaliser is left as it was


@pytest.mark.parametrize("pair", [("positive_only", "negatives_without_copies"),
                                  ("negatives_at_divergence", "negatives_without_copies")])
def test_the_negative_half_options_are_refused_together(pair):
    with pytest.raises(ApplianceError, match="choose one"):
        TrainConfig(stage="grpo", **dict.fromkeys(pair, True))
