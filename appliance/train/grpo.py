"""GRPO (and its Dr. GRPO / DAPO / GSPO variants) on a pack's train split with a verifiable reward.

One step, as TRL runs it: sample `num_generations` completions for each of
`prompts_per_step` prompts → score each with the pack's reward functions →
group-relative advantages → one clipped policy-gradient update of the LoRA.
The variant is a preset of explicit TRL options (presets.py). By default the
prompts come from the train tasks the starting policy is least sure about
(screen.py), since a group whose samples all score the same teaches nothing.
Everything else here is bookkeeping: the recorder writes every rollout with
its verdict to the store, the callback emits metrics and saves checkpoints.

Packs with `max_turns > 1` train on whole episodes, as eval runs them: the
model's turns, the world's tool results between them (masked from the loss),
scored on the trajectory (multiturn.py; cpu backend). One update per
generation batch (num_iterations=1, so the importance ratio is 1 and clipping
only matters under vLLM mismatch).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from ..errors import ApplianceError
from ..events import EventSink, null_sink
from .callbacks import ApplianceGRPOMixin, answer_declines, build_callback
from .common import (TrainResult, fail_run, finish_run, option_in_use, prompt_for, refuse_options_of_our_trainer,
                     start_run, train_with_guard, trainer_args, training_split_or_fail)
from .config import TrainConfig
from .multiturn import MULTI_TURN_CPU_ONLY, agent_episodes, is_multi_turn, turn_limit
from .presets import filters_zero_variance, grpo_options
from .recorder import RolloutRecorder
from .rollout import FlatGroupRefill, make_guide, tools_by_prompt_for
from .screen import screen_rows, screened_pool_or_fail


def grpo_rows(pack: Any, tokenizer: Any, split: str = "train") -> list[dict[str, Any]]:
    rows = []
    for task in pack.tasks(split):
        prompt = prompt_for(pack, tokenizer, task)
        rows.append({"prompt": prompt, "task_id": task.id,
                     "prompt_tokens": len(tokenizer(prompt, add_special_tokens=False)["input_ids"])})
    return rows


def warn_unreachable_answers(run: Any, tokenizer: Any, split: str) -> int:
    """Warn when expected answers are longer than the sampling budget: those tasks can never score."""
    from ..events import Log
    from ..prompting import render_completion

    if is_multi_turn(run.pack):  # a turn holds one call, not the whole expected list
        return 0
    budget = run.config.completion_tokens
    tasks = run.pack.tasks(split)
    too_long = [task for task in tasks  # + 1: the end-of-turn token
                if len(tokenizer(render_completion(task.expected), add_special_tokens=False)["input_ids"]) + 1 > budget]
    if too_long:
        run.emit(Log(run_id=run.run_id, level="warning", message=(
            f"{len(too_long)} of {len(tasks)} {split} tasks need more than max_completion_tokens={budget} tokens "
            f"for their answer and can never earn a reward; raise --max-completion-tokens")))
    return len(too_long)


def grpo_args(config: TrainConfig, run: Any) -> dict[str, Any]:
    return {
        **trainer_args(config, run),
        **grpo_options(config.preset, beta=config.beta, epsilon=config.epsilon, epsilon_high=config.epsilon_high,
                       scale_rewards=config.scale_rewards),
        "per_device_train_batch_size": config.prompts_per_step * config.num_generations,
        "num_generations": config.num_generations,
        # Dr. GRPO divides by this: an episode can hold max_turns turns of the per-turn budget.
        "max_completion_length": config.completion_tokens * turn_limit(run.pack),
        "temperature": config.temperature,
        "top_p": 1.0,
        "remove_unused_columns": False,
        "log_completions": False,  # every completion is in the store's rollouts table instead
    }


def default_reward_funcs(pack: Any, scheme: str | None = None,
                         split: str = "train") -> tuple[list[Callable], list[float]]:
    """The reward functions of `scheme` (None: the pack's) over the tasks of the training split."""
    from .. import rewards

    scheme = scheme or pack.reward_scheme
    tasks_by_id = {task.id: task for task in pack.tasks(split)}
    return list(rewards.make_reward_funcs(pack, scheme, tasks_by_id)), list(rewards.reward_weights(scheme))


def make_verify(pack: Any) -> Callable[..., Any]:
    """`verify(task_id, text, trajectory=None)`: the trajectory, when a multi-turn episode gives one, decides."""
    from ..rewards import verify_trajectory
    from ..verify import Verifier

    verifier = Verifier.for_pack(pack)

    def verify(task_id: str, text: str, trajectory: dict[str, Any] | None = None) -> Any:
        if trajectory is not None:
            return verify_trajectory(verifier, pack.task(task_id), trajectory)
        return verifier.verify(pack.task(task_id), text)

    return verify


# GRPO options our own trainer code implements, each with the backend capability it needs and, where a
# multi-turn pack cannot take it, why: (TrainConfig field, capability, why not multi-turn, what the backend lacks).
_OPTIONS_OF_OUR_TRAINER = (
    ("guide_failed_groups", "supports_guidance",
     "whose expected calls are not a whole answer to stand in for a sample", " (its sampler is vLLM's)"),
    ("sft_anchor", "supports_sft_anchor", None, " (it compiles its own GRPO loss)"),
    ("keep_decisions", "supports_loss_masks",
     "where an answer's first token is not the whole act-or-decline choice", " (it compiles its own GRPO loss)"),
    ("negatives_at_divergence", "supports_loss_masks", None, " (it compiles its own GRPO loss)"),
    ("negatives_without_copies", "supports_loss_masks",
     "whose completions interleave tool outputs with calls", " (it compiles its own GRPO loss)"),
    ("shared_prefixes_once", "supports_loss_masks", None, " (it compiles its own GRPO loss)"),
    ("resample_flat_groups", "supports_resampling",
     "whose groups are whole episodes, sampled turn by turn", " (its sampler is vLLM's)"),
)


def messages_text(task: Any) -> str:
    """Every message of a task's prompt, one after another: what a sampled answer can copy from."""
    return "\n".join(str(message.get("content", "")) for message in task.messages)


def options_of_our_trainer_in_use(config: TrainConfig) -> list[str]:
    """The GRPO options `config` sets that our trainer code implements (those above, and positive_only, which
    any backend takes): what a launch with another trainer, such as the multi-GPU recipe's, would drop."""
    names = [name for name, *_ in _OPTIONS_OF_OUR_TRAINER] + ["positive_only"]
    return [name for name in names if option_in_use(config, name)]


def refuse_unsupported_options(run: Any) -> None:
    """Refuse, before the model loads, a GRPO option of ours the pack or the backend cannot take (one sentence)."""
    refuse_options_of_our_trainer(run, _OPTIONS_OF_OUR_TRAINER)


def flat_group_refill_for(run: Any, rows: list[dict[str, Any]], reward_funcs: list[Callable],
                          reward_weights: list[float] | None, verify: Callable[..., Any]) -> FlatGroupRefill | None:
    """Dynamic sampling over the GRPO pool `rows`, scored by the run's reward (not recorded), or None when off.

    Under keep_decisions a decline leaves the loss (loss_masks.leave_decisions_out), so it scores None here:
    a group is flat unless two of its calls differ."""
    if not run.config.resample_flat_groups:
        return None
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)

    def score(task_ids: list[str], texts: list[str]) -> list[float | None]:
        totals = [0.0] * len(texts)
        for func, weight in zip(reward_funcs, weights):
            for i, value in enumerate(func(prompts=[""] * len(texts), completions=texts, task_id=task_ids)):
                totals[i] += weight * (value or 0.0)
        if not run.config.keep_decisions:
            return list(totals)
        verdicts = [verify(task_id, text) for task_id, text in zip(task_ids, texts)]
        return [None if answer_declines(v.parse_ok, v.n_calls) else total for v, total in zip(verdicts, totals)]

    return FlatGroupRefill(rows, score, run.config.resample_flat_groups, seed=run.config.seed)


def sft_anchor_for(run: Any, tokenizer: Any) -> Any:
    """The anchor over the SFT split (`train`), or None when sft_anchor is 0."""
    from .anchor import SftAnchor

    if not run.config.sft_anchor:
        return None
    return SftAnchor.for_pack(run.pack, tokenizer, weight=run.config.sft_anchor,
                              batch_size=run.config.sft_anchor_batch, seed=run.config.seed)


def run_grpo(config: TrainConfig, *, sink: EventSink = null_sink,
             on_eval: Callable[..., dict] | None = None, pack: Any = None, workspace: Any = None,
             reward_funcs: list[Callable] | None = None, reward_weights: list[float] | None = None,
             verify: Callable[..., Any] | None = None) -> TrainResult:
    """Train a LoRA with GRPO on `config.pack`'s RL split, `train_rl` (else `train`), from init_adapter if given.

    reward_funcs / reward_weights / verify default to the pack's reward scheme
    and verifier; they are parameters so a caller can audit or swap a reward.
    `verify(task_id, text)` also gets a third argument, the episode's trajectory
    record, on a multi-turn pack.
    """
    from datasets import Dataset

    started = time.perf_counter()
    run = start_run(dataclasses.replace(config, stage="grpo"), "grpo", sink, pack=pack, workspace=workspace)
    if is_multi_turn(run.pack) and not run.backend.supports_multi_turn:
        raise fail_run(run, ApplianceError(MULTI_TURN_CPU_ONLY))
    refuse_unsupported_options(run)
    split = training_split_or_fail(run)
    screened_pool_or_fail(run, split)
    if reward_funcs is None:
        reward_funcs, reward_weights = default_reward_funcs(run.pack, run.config.reward, split)
    verify = verify if verify is not None else make_verify(run.pack)
    recorder = RolloutRecorder(run.run_id, reward_funcs, reward_weights, verify,
                               write_rows=lambda rows: run.workspace.append("rollouts", rows), sink=run.sink,
                               skip_through_step=max(run.writer.last_step, 0))
    model, tokenizer = run.backend.load_for_training(run.config)
    rows = grpo_rows(run.pack, tokenizer, split)
    warn_unreachable_answers(run, tokenizer, split)
    rows = screen_rows(run, model, tokenizer, rows)
    dataset = Dataset.from_list(rows)
    episodes = agent_episodes(run.pack, tokenizer, rows) if is_multi_turn(run.pack) else None
    args = grpo_args(run.config, run)
    if reward_weights is not None:
        args["reward_weights"] = list(reward_weights)
    guide = make_guide(run.pack, rows, verify) if run.config.guide_failed_groups else None
    strict = tools_by_prompt_for(run.pack, rows) if run.config.strict and episodes is None else None
    refill = flat_group_refill_for(run, rows, reward_funcs, reward_weights, verify)
    trainer = run.backend.make_grpo_trainer(model, tokenizer, dataset, run.config, args, recorder.wrapped,
                                            [build_callback(run, recorder=recorder, on_eval=on_eval)],
                                            trainer_mixin=ApplianceGRPOMixin, episodes=episodes, guide=guide,
                                            tools_by_prompt=strict, refill=refill)
    trainer.appliance_recorder = recorder
    trainer.appliance_filter_zero_variance = filters_zero_variance(run.config.preset)
    trainer.appliance_anchor = sft_anchor_for(run, tokenizer)
    trainer.appliance_keep_decisions = run.config.keep_decisions
    trainer.appliance_positive_only = run.config.positive_only
    trainer.appliance_negatives_at_divergence = run.config.negatives_at_divergence
    trainer.appliance_shared_prefixes_once = run.config.shared_prefixes_once
    if run.config.negatives_without_copies:
        trainer.appliance_request_of = lambda task_id: messages_text(run.pack.task(task_id))
    trainer.appliance_scale_rewards = args["scale_rewards"]
    train_with_guard(run, trainer)
    return finish_run(run, started)
