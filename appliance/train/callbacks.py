"""The trainer hooks that make a TRL run an appliance run.

`ApplianceCallback` (a transformers TrainerCallback, backend-agnostic):
- step end: flush the step's rollout rows to the store (GRPO);
- log: emit one StepMetrics event per step with our metric names;
- save: copy the adapter into the checkpoint registry with its manifest, run
  the held-out eval hook, record the checkpoint row, check for reward hacking.

`ApplianceGRPOMixin` goes first in the GRPOTrainer's MRO: it times generation
+ scoring, hands TRL's advantages to the recorder, (keep_decisions) takes the
act-or-decline choice out of the loss, (positive_only, negatives_at_divergence,
negatives_without_copies) sets what GRPO's negative half trains, (dapo preset)
drops zero-variance groups from the loss (see presets.py), and logs how many flat groups dynamic
sampling refilled (`groups_refilled`, resample_flat_groups).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

from ..errors import ApplianceError
from ..events import StepMetrics
from .alarms import check_no_learning_signal
from .copies import negatives_without_copies

# TRL log key -> our metric name (StepMetrics.metrics); keys not listed pass through unchanged.
METRIC_NAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completions/mean_length": "completion/mean_tokens",
    "completions/clipped_ratio": "completion/clipped_ratio",
    "kl": "kl",
    "entropy": "entropy",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "step_time": "time/step_s",
    "timing/generate_score_s": "time/generate_s",
    "clip_ratio/region_mean": "clip_ratio",
    "mean_token_accuracy": "token_accuracy",
}
_SUMMARY_KEYS = {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"}


def rename_metrics(logs: dict[str, Any]) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for key, value in logs.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        name = METRIC_NAMES.get(key, key)
        if key.startswith("rewards/"):  # rewards/<component>/mean|std
            name = "reward/" + key[len("rewards/"):]
        metrics[name] = float(value)
    return metrics


def _make_callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


def build_callback(run: Any, recorder: Any = None, on_eval: Callable | None = None) -> Any:
    """A TrainerCallback bound to `run` (a common.RunContext)."""

    class ApplianceCallback(_make_callback_base()):
        def __init__(self) -> None:
            self.step_started = time.perf_counter()
            self.step_extra: dict[str, float] = {}
            self.last_tokens_seen = 0
            self.since_checkpoint: list[dict[str, float]] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            step = state.global_step
            self.step_extra = {"time/wall_step_s": time.perf_counter() - self.step_started}
            if recorder is not None:
                self.step_extra.update(recorder.step_summary(step))
                recorder.flush(step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = dict(logs or {})
            if not logs or _SUMMARY_KEYS & set(logs):
                return
            metrics = {**rename_metrics(logs), **self.step_extra}
            tokens = getattr(state, "num_input_tokens_seen", 0) or 0
            step_s = metrics.get("time/wall_step_s") or metrics.get("time/step_s")
            if tokens and step_s:
                metrics["tokens_per_s"] = (tokens - self.last_tokens_seen) / step_s
                self.last_tokens_seen = tokens
            if "time/step_s" in metrics and "time/generate_s" in metrics:
                metrics["time/update_s"] = max(0.0, metrics["time/step_s"] - metrics["time/generate_s"])
            peak = run.backend.peak_memory_bytes()
            if peak:
                metrics["memory/peak_gb"] = peak / 2**30
            event = StepMetrics(run_id=run.run_id, step=state.global_step, metrics=metrics)
            run.emit(event)
            run.history.append({"step": state.global_step, **metrics})
            self.since_checkpoint.append(metrics)
            self._watch_learning_signal()

        def _watch_learning_signal(self):
            if getattr(self, "flat_alarmed", False):
                return  # one alarm per run is enough to act on
            alarm = check_no_learning_signal(run.history, run_id=run.run_id)
            if alarm is not None:
                self.flat_alarmed = True
                run.raise_alarm(alarm)

        def on_save(self, args, state, control, model=None, **kwargs):
            run.save_checkpoint(model, state.global_step, _mean_metrics(self.since_checkpoint), on_eval)
            self.since_checkpoint = []

    return ApplianceCallback()


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for row in rows for k in row}
    means = {}
    for key in sorted(keys):
        values = [row[key] for row in rows if key in row and not math.isnan(row[key])]
        if values:
            means[key] = sum(values) / len(values)
    return means


class ApplianceGRPOMixin:
    """Put before GRPOTrainer in the MRO (the backend builds the class)."""

    appliance_recorder: Any = None
    appliance_filter_zero_variance: bool = False
    appliance_anchor: Any = None  # anchor.SftAnchor when sft_anchor > 0
    appliance_keep_decisions: bool = False  # TrainConfig.keep_decisions
    appliance_positive_only: bool = False  # TrainConfig.positive_only
    appliance_negatives_at_divergence: bool = False  # TrainConfig.negatives_at_divergence
    appliance_request_of: Callable[[str], str] | None = None  # task id -> its request (negatives_without_copies)
    appliance_scale_rewards: str = "group"  # the scaling in force (keep_decisions recomputes advantages with it)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)
        if self.appliance_anchor is None or not model.training:
            return loss
        nll = self.appliance_anchor.nll(model)
        self._metrics["train"]["anchor/nll"].append(nll.item())
        return loss + self.appliance_anchor.weight * nll

    def _generate_and_score_completions(self, inputs):
        started = time.perf_counter()
        output = super()._generate_and_score_completions(inputs)
        elapsed = time.perf_counter() - started
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["timing/generate_score_s"].append(elapsed)
        rows = self.appliance_recorder.pending_rows() if self.appliance_recorder is not None else []
        if self.appliance_keep_decisions and mode == "train":
            self._in_one_process("keep_decisions")
            left_out = leave_decisions_out(output, [declined(row) for row in rows],
                                           [row.get("reward", 0.0) for row in rows], self.num_generations,
                                           self.appliance_scale_rewards)
            self._metrics[mode]["frac_declines_left_out"].append(left_out)
        if self.appliance_positive_only and mode == "train":
            output["advantages"] = output["advantages"].clamp(min=0.0)
        refill = getattr(getattr(self, "rollout_func", None), "refill", None)  # resample_flat_groups
        if refill is not None and mode == "train":
            self._metrics[mode]["groups_refilled"].append(float(refill.last_refilled))
        if self.appliance_recorder is not None:  # the advantages the loss uses, recomputed or TRL's
            self.appliance_recorder.set_advantages(output["advantages"].tolist())
            self.appliance_recorder.set_generation_latency(elapsed)
        if self.appliance_filter_zero_variance and mode == "train":
            dropped = drop_zero_variance_groups(output, self.num_generations, self.accelerator.gather,
                                                process_index=self.accelerator.process_index)
            self._metrics[mode]["frac_groups_dropped"].append(dropped)
        # Last, so the loss's normaliser (num_items_in_batch, set above) still counts the tokens it leaves out.
        if self.appliance_negatives_at_divergence and mode == "train":
            self._in_one_process("negatives_at_divergence")
            kept = negatives_at_divergence(output, self.num_generations)
            self._metrics[mode]["frac_negative_tokens_kept"].append(kept)
        if self.appliance_request_of is not None and mode == "train":
            self._in_one_process("negatives_without_copies")
            requests = [self.appliance_request_of(str(row.get("task_id", ""))) for row in rows]
            kept = negatives_without_copies(output, self.processing_class.decode, requests)
            self._metrics[mode]["frac_negative_tokens_kept"].append(kept)
        return output

    def _in_one_process(self, option: str) -> None:
        """Options that read a group's rows together: with several processes a group would span them (not built)."""
        if self.accelerator.num_processes > 1:
            raise ApplianceError(f"{option} runs in one process; leave it off with several.")


def drop_zero_variance_groups(output: dict[str, Any], group_size: int, gather: Callable = lambda t: t, *,
                              process_index: int = 0) -> float:
    """Mask groups whose advantages are all zero out of the loss and its normaliser; return the fraction dropped.

    Uses TRL's `tool_mask` (a loss-only mask) so attention is untouched. Rows of
    a group are contiguous before TRL shuffles the batch, which is where this runs.
    With several processes each holds its slice of the gathered batch (TRL's
    `process_slice`), and a group may span two slices, so groups are judged on
    the gathered advantages and each process keeps its own rows of the verdict.
    """
    import torch

    local = output["advantages"]
    everyone = gather(local)
    informative = everyone.view(-1, group_size).abs().amax(dim=1) > 1e-6
    start = process_index * local.numel()
    keep_rows = informative.repeat_interleave(group_size)[start:start + local.numel()]
    keep_rows = keep_rows.to(output["completion_mask"].dtype)
    loss_mask = output.get("tool_mask")
    if loss_mask is None:
        loss_mask = torch.ones_like(output["completion_mask"])
    output["tool_mask"] = loss_mask * keep_rows.unsqueeze(1)
    output["num_items_in_batch"] = gather((output["completion_mask"] * output["tool_mask"]).sum()).sum()
    return 1.0 - informative.float().mean().item()


def declined(row: dict[str, Any]) -> bool:
    """A rollout row whose answer is a decline (`answer_declines`)."""
    return answer_declines(row.get("v_parse_ok"), row.get("v_n_calls"))


def answer_declines(parse_ok: Any, n_calls: Any) -> bool:
    """An answer that parsed and calls no tool declines; a format error is an attempted call."""
    return bool(parse_ok) and not n_calls


def negatives_at_divergence(output: dict[str, Any], group_size: int) -> float:
    """Push a below-mean sample down only where it departs from its group's above-mean samples; return the share
    of below-mean samples' tokens left in the loss (TrainConfig.negatives_at_divergence).

    Session 40 measured the whole negative half cutting and miscopying arguments (docs/learning.md, H58 against
    H59): a failed sample's tokens are pushed down with it, its right copies of the request included. Here a
    below-mean sample keeps one token in the loss, the first where it differs from the above-mean sample of its
    group that it follows longest (the token its mistake starts with); a group with no above-mean sample gives
    no negative signal. Above-mean samples train as before, and the loss's normaliser is unchanged. Rows of a
    group are contiguous here, before TRL shuffles the batch (one process).
    """
    import torch
    from trl.data_utils import common_prefix_length

    advantages, completion_mask = output["advantages"], output["completion_mask"]
    loss_mask = output.get("tool_mask")
    loss_mask = torch.ones_like(completion_mask) if loss_mask is None else loss_mask.clone()
    tokens = [row[:n].tolist() for row, n in zip(output["completion_ids"], completion_mask.sum(dim=1).tolist())]
    negative_tokens = kept = 0
    for start in range(0, advantages.numel(), group_size):
        rows = range(start, start + group_size)
        above = [r for r in rows if advantages[r] > 0]
        for r in (r for r in rows if advantages[r] < 0):
            negative_tokens += int((completion_mask[r] * loss_mask[r]).sum())
            keep = torch.zeros_like(loss_mask[r])
            if above:
                at = max(common_prefix_length(tokens[r], tokens[a]) for a in above)
                if at < len(tokens[r]):
                    keep[at] = 1
            loss_mask[r] = loss_mask[r] * keep
            kept += int((completion_mask[r] * loss_mask[r]).sum())
    output["tool_mask"] = loss_mask
    return kept / negative_tokens if negative_tokens else 0.0


def leave_decisions_out(output: dict[str, Any], declined_rows: list[bool], rewards: list[float], group_size: int,
                        scale_rewards: str) -> float:
    """Take the act-or-decline choice out of GRPO's loss (TrainConfig.keep_decisions); return the share of declines.

    Session 23 measured GRPO moving one choice all requests share: the expected answer became less likely on
    every task that needs no call, those it trained on included, and more likely on nearly every task that
    needs one (docs/learning.md). Here that choice is not trained at all:
    a decline's tokens and every answer's first token (`{"` of a call against `No` of a decline, the token
    where they part) leave the loss through TRL's loss-only `tool_mask`, and each group's advantages are
    recomputed among its attempted calls only (centred on their mean, divided as `scale_rewards` says, as TRL
    does), so a wrong call is never rewarded for beating a decline. A group with fewer than two attempted
    calls teaches nothing. Rows of a group are contiguous here, before TRL shuffles the batch (one process).
    """
    import torch

    advantages = output["advantages"]
    reward = torch.nan_to_num(torch.tensor(rewards, dtype=torch.float32)).view(-1, group_size)
    acts = ~torch.tensor(declined_rows, dtype=torch.bool).view(-1, group_size)
    n_acts = acts.sum(dim=1, keepdim=True)
    centred = (reward - (reward * acts).sum(dim=1, keepdim=True) / n_acts.clamp(min=1)) * acts
    if scale_rewards == "group":  # TRL: the unbiased std of the group (here: of its calls) + 1e-4
        centred = centred / ((centred.square().sum(dim=1, keepdim=True) / (n_acts - 1).clamp(min=1)).sqrt() + 1e-4)
    elif scale_rewards == "batch":
        called = reward[acts]
        centred = centred / ((called.std() if called.numel() > 1 else torch.tensor(0.0)) + 1e-4)
    centred = torch.where(n_acts >= 2, centred, torch.zeros_like(centred))
    output["advantages"] = centred.reshape(-1).to(advantages.dtype).to(advantages.device)
    completion_mask = output["completion_mask"]
    loss_mask = output.get("tool_mask")
    loss_mask = torch.ones_like(completion_mask) if loss_mask is None else loss_mask.clone()
    loss_mask = loss_mask * acts.reshape(-1, 1).to(loss_mask.device, loss_mask.dtype)
    loss_mask[:, 0] = 0
    output["tool_mask"] = loss_mask
    output["num_items_in_batch"] = (completion_mask * loss_mask).sum()
    return float((~acts).float().mean())
