"""Training forwards with cached frozen heads give the same loss and gradients as the plain forward."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from appliance.generate.heads import shared_heads  # noqa: E402
from appliance.tiny import build_tiny_model  # noqa: E402
from appliance.train.frozen_heads import first_trained_layer, install_frozen_heads  # noqa: E402


def _lora_model(layers: int = 6, adapted: list[int] | None = None, dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    model = build_tiny_model(300, hidden_size=32, layers=layers, heads=4, kv_heads=2)
    model.config._attn_implementation = "sdpa"
    add_fused_lm_head(model)
    targets = adapted if adapted is not None else list(range(layers - 2, layers))
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      layers_to_transform=targets, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    for name, param in model.named_parameters():  # a non-zero LoRA B, so the adapted layers matter
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.2)
    return model


def _batch(heads: list[list[int]], tails: list[list[int]], left: list[int] | None = None):
    """Rows head + tail after `left` padding columns, right-padded (SFT: no left padding; GRPO: left-padded
    prompts, right-padded completions), labels on the last 3 real tokens of each."""
    rows = [h + t for h, t in zip(heads, tails)]
    left = left or [0] * len(rows)
    width = max(len(r) + pad for r, pad in zip(rows, left))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (row, pad) in enumerate(zip(rows, left)):
        ids[i, pad:pad + len(row)] = torch.tensor(row)
        mask[i, pad:pad + len(row)] = 1
        labels[i, pad + len(row) - 3:pad + len(row)] = torch.tensor(row[-3:])
    return ids, mask, labels


def _loss_and_grads(model, ids, mask, labels):
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
    loss = -out.log_probs.sum() / (labels != -100).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads


@pytest.mark.parametrize("left", [None, [3, 0, 6, 1, 0]], ids=["right-padded", "left-and-right-padded"])
def test_cached_heads_give_the_plain_forwards_loss_and_gradients(left):
    generator = torch.Generator().manual_seed(1)
    head_a = torch.randint(3, 300, (40,), generator=generator).tolist()
    head_b = head_a[:10] + torch.randint(3, 300, (25,), generator=generator).tolist()  # shares a root with A
    tails = [torch.randint(3, 300, (n,), generator=generator).tolist() for n in (7, 12, 5, 9, 3)]
    ids, mask, labels = _batch([head_a, head_b, head_a, [], head_b], tails, left)
    model = _lora_model()
    plain_loss, plain_grads = _loss_and_grads(model, ids, mask, labels)

    prompts = [head_a + tails[0][:2], head_a + tails[2][:2], head_b + tails[1][:2], head_b + tails[4][:2]]
    cache = install_frozen_heads(model, prompts)
    assert cache is not None and cache.split == 4
    loss, grads = _loss_and_grads(model, ids, mask, labels)
    assert cache.stats.forwards == 1 and cache.stats.rows_from_cache == 4
    assert cache.share_adapted and cache.stats.head_passes == 2  # A and B through the adapted layers once each
    assert torch.allclose(loss, plain_loss, atol=1e-5)
    for name, grad in plain_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5), name
    again, _ = _loss_and_grads(model, ids, mask, labels)  # second step: the heads come from the cache
    assert torch.allclose(again, plain_loss, atol=1e-5) and cache.stats.forwards == 2


def test_with_every_layer_adapted_the_heads_are_still_shared():
    """Nothing below the adapter to cache (`--lora-layers 0`): each head still runs once for all its rows."""
    generator = torch.Generator().manual_seed(3)
    head = torch.randint(3, 300, (30,), generator=generator).tolist()
    tails = [torch.randint(3, 300, (n,), generator=generator).tolist() for n in (6, 9, 4)]
    ids, mask, labels = _batch([head, head, []], tails)
    model = _lora_model(adapted=list(range(6)))
    assert first_trained_layer(model.get_base_model().model) == 0
    plain_loss, plain_grads = _loss_and_grads(model, ids, mask, labels)
    cache = install_frozen_heads(model, [head + [1], head + [2]])
    assert cache is not None and cache.split == 0 and cache.share_adapted
    loss, grads = _loss_and_grads(model, ids, mask, labels)
    assert cache.stats.forwards == 1 and cache.stats.head_passes == 1 and cache.stats.rows_from_cache == 2
    assert torch.allclose(loss, plain_loss, atol=1e-5)
    for name, grad in plain_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5), name


def test_with_dropout_every_row_runs_the_adapted_layers_itself():
    """Dropout draws a mask per row: a shared head pass would give rows one mask, so it is not used."""
    generator = torch.Generator().manual_seed(2)
    head = torch.randint(3, 300, (30,), generator=generator).tolist()
    tails = [torch.randint(3, 300, (n,), generator=generator).tolist() for n in (6, 9)]
    ids, mask, labels = _batch([head, head], tails)
    model = _lora_model(dropout=0.1)
    model.eval()  # dropout off, so the two paths can be compared exactly; the graph is still built
    plain_loss, plain_grads = _loss_and_grads(model, ids, mask, labels)
    cache = install_frozen_heads(model, [head + [1], head + [2]])
    assert cache is not None and not cache.share_adapted
    loss, grads = _loss_and_grads(model, ids, mask, labels)
    assert cache.stats.forwards == 1 and cache.stats.head_passes == 0
    assert torch.allclose(loss, plain_loss, atol=1e-5)
    for name, grad in plain_grads.items():
        assert torch.allclose(grads[name], grad, atol=1e-5), name


def test_heads_are_the_prefixes_groups_of_prompts_share():
    a, b = list(range(100, 130)), list(range(200, 240))
    prompts = [a + [1, 2], a + [3], a + [4, 5, 6], b + [7], b + [8], [9] * 20]
    assert sorted(shared_heads(prompts), key=len) == [a, b]
    assert shared_heads([a + [1]]) == []  # one prompt alone has nothing to share


def test_generation_and_unadapted_models_keep_the_plain_forward():
    model = _lora_model()
    head = list(range(50, 90))
    cache = install_frozen_heads(model, [head + [1], head + [2]])
    ids = torch.tensor([head + [7, 8]])
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)  # no graph (generation, scoring): the original forward
    assert cache.stats.forwards == 0
    plain = model(input_ids=ids, use_cache=True).logits  # a cache is asked for: the original forward
    assert cache.stats.forwards == 0
    gappy = torch.tensor([[0] + head + [0, 7]])  # padding inside the row: the original forward
    model(input_ids=gappy, attention_mask=(gappy != 0).long(), use_cache=False)
    assert cache.stats.forwards == 0
    fast = model(input_ids=ids, use_cache=False).logits
    assert cache.stats.forwards == 1
    assert torch.allclose(plain, fast, atol=1e-5)
