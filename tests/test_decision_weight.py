"""SFT's decision weight: the answer's first token counts `decision_weight` times in TRL's loss, nothing else moves."""
from __future__ import annotations

import pytest

from appliance.errors import ApplianceError
from appliance.train import TrainConfig
from appliance.train.sft import first_token_weights

from test_train import config, sft_trainer, write_mini_pack  # noqa: F401  (the fixture and its pack)


def test_the_weight_sits_on_each_rows_first_labelled_position():
    import torch

    labels = torch.tensor([[-100, -100, 7, 8, 9], [-100, 5, 6, -100, -100], [-100, -100, -100, -100, -100]])
    weights = first_token_weights(labels, 4.0)
    assert weights.tolist() == [[1, 1, 4, 1, 1], [1, 4, 1, 1, 1], [1, 1, 1, 1, 1]]


def _hand_loss(trainer, batch, weight):
    """The completion tokens' mean negative log-likelihood with the first one counted `weight` times."""
    import torch

    with torch.no_grad():
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    mask = labels != -100
    return float(-(logp * first_token_weights(labels, weight) * mask).sum() / mask.sum())


def test_the_loss_counts_the_first_answer_token_weight_times(config):
    import torch

    losses = {}
    for weight in (0.0, 1.0, 6.0):
        trainer = sft_trainer(config, decision_weight=weight)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        with torch.no_grad():
            losses[weight] = float(trainer.compute_loss(trainer.model, dict(batch)))
        assert losses[weight] == pytest.approx(_hand_loss(trainer, batch, weight), rel=2e-2)
    assert losses[6.0] > losses[1.0] * 1.05  # the same seeded model and batch: only the weight differs


@pytest.mark.parametrize("weight", [-1.0, float("inf"), float("nan")])
def test_a_weight_that_is_not_0_or_a_positive_number_is_one_sentence(weight):
    with pytest.raises(ApplianceError, match="decision_weight must be 0 .* or a positive number"):
        TrainConfig(stage="sft", decision_weight=weight).validate()


def test_a_backend_without_it_refuses_before_the_model_loads():
    from types import SimpleNamespace

    from appliance.train.sft import refuse_unsupported_sft_options

    updates, events = [], []
    run = SimpleNamespace(run_id="r", config=TrainConfig(stage="sft", decision_weight=3.0), emit=events.append,
                          writer=SimpleNamespace(update_run=lambda **row: updates.append(row)),
                          backend=SimpleNamespace(name="unsloth"))
    with pytest.raises(ApplianceError, match="decision_weight is not available on the unsloth backend"):
        refuse_unsupported_sft_options(run)
    assert updates[0]["status"] == "failed" and events[0].type == "run_failed"
    run.config = TrainConfig(stage="sft")  # plain SFT runs anywhere
    assert refuse_unsupported_sft_options(run) is None
    run.config, run.backend.supports_decision_weight = TrainConfig(stage="sft", decision_weight=3.0), True
    assert refuse_unsupported_sft_options(run) is None
