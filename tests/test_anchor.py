"""The SFT anchor's loss is SFT's loss: each padded row scores exactly as it would alone."""
from __future__ import annotations

import pytest

from appliance.packs.pack import load_pack
from appliance.train import TrainConfig
from appliance.train.anchor import SftAnchor
from test_train import write_mini_pack


@pytest.fixture
def model_and_pack(tiny_model_dir, tmp_path):
    from appliance.train.cpu import CpuBackend

    config = TrainConfig(model=str(tiny_model_dir), backend="cpu", lora_r=4, lora_alpha=8, seed=3)
    model, tokenizer = CpuBackend().load_for_training(config)
    return model, tokenizer, load_pack(write_mini_pack(tmp_path / "mini"))


def unpadded_nll(model, batch) -> float:
    """The mean completion-token NLL, one row at a time with no padding (what SFT's loss is)."""
    import torch

    total, count = 0.0, 0
    for prompt, completion in batch:
        ids = torch.tensor([prompt + completion])
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        total += torch.nn.functional.cross_entropy(logits, ids[0, len(prompt):], reduction="sum").item()
        count += len(completion)
    return total / count


def test_a_padded_batch_scores_each_answer_as_an_unpadded_forward(model_and_pack):
    import torch

    model, tokenizer, pack = model_and_pack
    anchor = SftAnchor.for_pack(pack, tokenizer, weight=1.0, batch_size=3, seed=0)
    assert all(completion[-1] == tokenizer.eos_token_id for _, completion in anchor.examples)
    with torch.no_grad():
        for param in model.parameters():  # LoRA B starts at 0; move it so the adapter takes part
            if param.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    model.eval()
    probe = SftAnchor(anchor.examples, 1.0, 3, anchor.pad_id, seed=0)  # same seed: the batch the anchor draws
    batch = probe.next_examples()
    assert len({len(p) + len(c) for p, c in batch}) > 1  # rows of different lengths: padding is exercised
    loss = anchor.nll(model)
    assert loss.requires_grad
    assert loss.item() == pytest.approx(unpadded_nll(model, batch), rel=1e-4)


def test_the_order_visits_every_example_before_any_repeats(model_and_pack):
    _, tokenizer, pack = model_and_pack
    anchor = SftAnchor.for_pack(pack, tokenizer, weight=1.0, batch_size=3, seed=0)
    drawn = [tuple(map(tuple, pair)) for _ in range(4) for pair in anchor.next_examples()]  # 12 draws of 4
    for start in range(0, 12, 4):
        assert len(set(drawn[start:start + 4])) == 4


def test_the_frozen_head_path_takes_the_anchor_batch_and_gives_the_same_loss(model_and_pack):
    from appliance.train.frozen_heads import install_frozen_heads

    model, tokenizer, pack = model_and_pack
    anchor = SftAnchor.for_pack(pack, tokenizer, weight=1.0, batch_size=4, seed=0)
    plain = anchor.nll(model).item()
    cache = install_frozen_heads(model, [prompt for prompt, _ in anchor.examples])
    assert cache is not None
    anchor = SftAnchor.for_pack(pack, tokenizer, weight=1.0, batch_size=4, seed=0)
    fast = anchor.nll(model)
    assert cache.stats.forwards == 1 and cache.stats.rows_from_cache == 4
    assert fast.item() == pytest.approx(plain, rel=1e-4)
