"""The optimizer choice: AdamW by default, plain SGD when asked, on the trainer TRL actually builds."""
from __future__ import annotations

import pytest

from appliance.errors import ApplianceError
from appliance.train import TrainConfig

from test_train import config, sft_trainer, write_mini_pack  # noqa: F401  (the fixture and its pack)


def _sft_trainer(config, **changes):
    trainer = sft_trainer(config, **changes)
    trainer.create_optimizer()
    return trainer


def _inner(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # accelerate may wrap it


def test_the_default_is_adamw_and_sgd_is_sgd_at_the_given_rate(config):
    import torch

    assert isinstance(_inner(_sft_trainer(config).optimizer), torch.optim.AdamW)
    sgd = _inner(_sft_trainer(config, optimizer="sgd", learning_rate=0.5).optimizer)
    assert isinstance(sgd, torch.optim.SGD)
    assert {group["lr"] for group in sgd.param_groups} == {0.5}
    assert {group["momentum"] for group in sgd.param_groups} == {0}


def test_an_sgd_step_moves_each_weight_in_proportion_to_its_gradient(config):
    """What sets SGD apart from AdamW here: AdamW's first step moves every weight by about the rate."""
    import torch

    trainer = _sft_trainer(config, optimizer="sgd", learning_rate=0.5)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    trainer.model.zero_grad()
    trainer.compute_loss(trainer.model, batch).backward()
    grads = [p.grad.detach().clone() for p in params]
    torch.nn.utils.clip_grad_norm_(params, trainer.args.max_grad_norm)  # as the trainer does before its step
    clipped = [p.grad.detach().clone() for p in params]
    trainer.optimizer.step()
    moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
    expected = torch.cat([-0.5 * g.flatten() for g in clipped])
    assert torch.allclose(moved, expected, atol=1e-7)
    assert torch.cat([g.flatten() for g in grads]).abs().max() > 0  # the step was not a no-op


def test_sgd_without_a_rate_and_an_unknown_optimizer_are_refused_before_anything_loads():
    with pytest.raises(ApplianceError, match="learning rate"):
        TrainConfig(stage="grpo", optimizer="sgd")
    with pytest.raises(ApplianceError, match="Unknown optimizer"):
        TrainConfig(stage="grpo", optimizer="lion", learning_rate=1e-4)
