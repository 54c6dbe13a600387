"""Supervised fine-tuning of a LoRA on a pack's expected calls (completion-only loss).

Each train task becomes one prompt/completion pair: the prompt is exactly what
eval renders (appliance.prompting.render_prompt with the pack's tools), the
completion is the canonical answer (render_completion of the expected calls)
that the verifier parses, or a no-call task's own `reply` (reference_answer).
TRL's SFTTrainer masks the prompt out of the loss for prompt/completion
datasets and appends the EOS token, so the model also learns to stop.
"""
from __future__ import annotations

import dataclasses
import time
import zlib
from typing import Any, Callable

from ..errors import ApplianceError
from ..events import EventSink, null_sink
from .batches import HeadGroupedBatches
from .callbacks import build_callback
from .common import (PAD_TO_MULTIPLE_OF, TrainResult, _load_pack, _open_workspace, finish_run, kept_selection,
                     listing_without_called, prompt_for, refuse_options_of_our_trainer,
                     refuse_other_listing_without_domains, start_run, train_with_guard, trainer_args,
                     training_split_or_fail)
from .config import TrainConfig
from .successes import SUCCESSES_FILE, saved_successes, success_rows, successes_or_fail


def sft_rows(pack: Any, tokenizer: Any, split: str = "train", policy_checks: bool = False,
             missing_tool_share: float = 0.0, time_checks: bool = False,
             missing_tool_listing: str = "own") -> list[dict[str, str]]:
    """One prompt/completion pair per task of `split`; with `policy_checks` (recipients) or `time_checks`
    (meeting times), a check block before the answer; with `missing_tool_share`, that share of the calling tasks
    once more without their tools (missing_tool_rows)."""
    from ..prompting import reference_answer
    from .checks import meeting_hours, policy_check

    rules = pack.unsafe_rules if policy_checks else []  # a fresh copy per access: read once, not once per task
    hours = meeting_hours(pack) if time_checks else None
    tasks = pack.tasks(split)

    def completion(task: Any) -> str:
        return policy_check(task, rules, hours) + reference_answer(task)

    rows = [{"prompt": prompt_for(pack, tokenizer, task), "completion": completion(task), "task_id": task.id}
            for task in tasks]
    return rows + missing_tool_rows(pack, tokenizer, tasks, missing_tool_share, missing_tool_listing)


def missing_tool_rows(pack: Any, tokenizer: Any, tasks: list[Any], share: float,
                      listing: str = "own") -> list[dict[str, str]]:
    """For a stable `share` of the tasks that call a tool: the same request with every tool it calls left out of
    the listing (`listing` "own": the task's own listing; "other": another domain's, Pack.other_domain_tools),
    answered with MISSING_TOOL_TEXT. Tasks whose listing would be empty are skipped."""
    from ..prompting import MISSING_TOOL_TEXT

    rows = []
    for task in tasks:
        if not task.expected or _stable_fraction(task.id) >= share:
            continue
        tools = listing_without_called(pack, task, listing)
        if tools:
            rows.append({"prompt": prompt_for(pack, tokenizer, task, tools),
                         "completion": MISSING_TOOL_TEXT, "task_id": task.id})
    return rows


def _stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by `key`: the same tasks are picked in every run and on every machine."""
    return zlib.crc32(f"missing-tool:{key}".encode("utf-8")) / 2**32


class DecisionWeightedLoss:
    """SFTTrainer mixin: each row's first answer token counts `appliance_decision_weight` times in the loss.

    SmolLM2 parts a tool call from a decline at the answer's first token (`{"` against `No`), so under plain SFT
    the act-or-decline choice is one token of about 46 in a row's loss (TrainConfig.decision_weight). TRL computes
    the loss from the fused LM head's per-token log-probabilities (trl 1.16 sft_trainer.py:1609-1616, aligned
    with `labels[:, 1:]`); a forward hook scales that row of them, so the loss's normaliser (the number of
    answer tokens), the logged token accuracy and the entropy stay TRL's.
    """

    appliance_decision_weight: float = 1.0

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if self.appliance_decision_weight == 1.0:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        weights = first_token_weights(inputs["labels"][:, 1:], self.appliance_decision_weight)

        def weigh(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            if kwargs.get("fused_lm_head"):
                output.log_probs = output.log_probs * weights
            return output

        handle = model.register_forward_hook(weigh, with_kwargs=True)
        try:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            handle.remove()


class SFTTrainerMixin(DecisionWeightedLoss, HeadGroupedBatches):
    """The cpu backend's additions to TRL's SFTTrainer: the decision weight and the batch order."""


def first_token_weights(shifted_labels: Any, weight: float) -> Any:
    """A (batch, length) tensor of ones with `weight` at each row's first labelled position (none if unlabelled)."""
    import torch

    labelled = shifted_labels != -100
    weights = torch.ones(labelled.shape, dtype=torch.float32, device=shifted_labels.device)
    rows = labelled.any(dim=1).nonzero(as_tuple=True)[0]
    weights[rows, labelled[rows].int().argmax(dim=1)] = weight
    return weights


def sft_args(config: TrainConfig, run: Any, n_examples: int) -> dict[str, Any]:
    args = {**trainer_args(config, run), "per_device_train_batch_size": config.batch_size,
            "max_length": config.max_seq_length, "completion_only_loss": True, "packing": False,
            "remove_unused_columns": True,
            # Tool lists make prompt lengths vary 5x and a batch is padded to its longest row:
            # batching similar lengths together cut the padding that dominated CPU step time.
            # (batch_order by_head replaces it with appliance.train.batches' sampler on the cpu backend.)
            "train_sampling_strategy": "group_by_length",
            "pad_to_multiple_of": PAD_TO_MULTIPLE_OF}
    if config.epochs is not None:  # steps follow from epochs; save/eval cadence stays eval_every
        steps_per_epoch = max(1, -(-n_examples // config.batch_size))
        args["max_steps"] = max(1, round(config.epochs * steps_per_epoch))
    return args


# SFT options our own trainer code implements, as in grpo._OPTIONS_OF_OUR_TRAINER.
_OPTIONS_OF_OUR_TRAINER = (
    ("decision_weight", "supports_decision_weight", None, " (it scales TRL's own SFT loss)"),
    ("batch_order", "supports_batch_order", None, " (it orders TRL's own SFT batches)"),
)


def refuse_unsupported_sft_options(run: Any) -> None:
    """Refuse, before the model loads, an SFT option of ours the backend cannot take (one sentence)."""
    refuse_options_of_our_trainer(run, _OPTIONS_OF_OUR_TRAINER)


def refuse_time_checks_without_hours(config: TrainConfig, pack: Any) -> None:
    """Refuse `time_checks` for a pack whose world states no meeting hours, before the run is recorded."""
    from .checks import meeting_hours

    if config.time_checks and meeting_hours(pack) is None:
        raise ApplianceError(f"time_checks judges against WorkBench's meeting hours; pack '{pack.name}' is of world "
                             f"'{pack.world}', which declares none (leave --time-checks off).")


def run_sft(config: TrainConfig, *, sink: EventSink = null_sink,
            on_eval: Callable[..., dict] | None = None, pack: Any = None, workspace: Any = None) -> TrainResult:
    """Train a LoRA with SFT on `config.pack`'s `train` split (or `config.train_split`): the pack's answers, or with
    `successes_from` the model's own stored successes (successes.py); checkpoints every eval_every steps and at the end."""
    from datasets import Dataset

    started = time.perf_counter()
    config = dataclasses.replace(config, stage="sft")
    selection = None
    successes_first = config.successes_from and not config.resume_from
    if pack is None and (config.time_checks or successes_first or config.lists_other_domain):
        pack = _load_pack(config.pack)  # refused before the run starts and a model loads
    refuse_time_checks_without_hours(config, pack)
    refuse_other_listing_without_domains(config, pack)
    if successes_first:
        workspace = workspace or _open_workspace(config.workspace)
        selection = successes_or_fail(config, pack, workspace)
    run = start_run(config, "sft", sink, pack=pack, workspace=workspace)
    split = training_split_or_fail(run)
    refuse_unsupported_sft_options(run)
    if run.config.successes_from:
        selection = kept_selection(run, SUCCESSES_FILE, selection, saved_successes,
                                   lambda: successes_or_fail(run.config, run.pack, run.workspace))
    model, tokenizer = run.backend.load_for_training(run.config)
    if selection is not None:
        rows = success_rows(run.pack, tokenizer, selection)
    else:
        rows = sft_rows(run.pack, tokenizer, split, run.config.policy_checks, run.config.missing_tool_share,
                        run.config.time_checks, run.config.missing_tool_listing)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    args = sft_args(run.config, run, len(rows))
    callback = build_callback(run, recorder=None, on_eval=on_eval)
    trainer = run.backend.make_sft_trainer(model, tokenizer, dataset, run.config, args, [callback])
    train_with_guard(run, trainer)
    return finish_run(run, started)
