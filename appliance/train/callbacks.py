"""The trainer hooks that make a TRL run an appliance run.

`ApplianceCallback` (a transformers TrainerCallback, backend-agnostic):
- step end: flush the step's rollout rows to the store (GRPO);
- log: emit one StepMetrics event per step with our metric names;
- save: copy the adapter into the checkpoint registry with its manifest, run
  the held-out eval hook, record the checkpoint row, check for reward hacking.

`ApplianceGRPOMixin` goes first in the GRPOTrainer's MRO: it times generation
+ scoring, hands TRL's advantages to the recorder, (keep_decisions) takes the
act-or-decline choice out of the loss, (positive_only) drops GRPO's negative
half, (dapo preset) drops zero-variance groups from the loss (see presets.py),
sets what the loss trains of each sample (negatives_at_divergence,
negatives_without_copies, shared_prefixes_once; loss_masks.py), and logs how
many flat groups dynamic sampling refilled (`groups_refilled`,
resample_flat_groups).
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

from ..errors import ApplianceError
from ..events import StepMetrics
from .alarms import check_no_learning_signal
from .loss_masks import (drop_zero_variance_groups, leave_decisions_out, negatives_at_divergence,
                         negatives_without_copies, shared_prefixes_once)

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
    appliance_shared_prefixes_once: bool = False  # TrainConfig.shared_prefixes_once
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
        if mode == "train":  # last, so the loss's normaliser (num_items_in_batch, set above) counts what it masks
            self._set_token_weights(output, rows)
        return output

    def _set_token_weights(self, output: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """The options that set, through TRL's loss-only mask, what of each sample the loss trains (loss_masks.py)."""
        if self.appliance_negatives_at_divergence:
            self._in_one_process("negatives_at_divergence")
            kept = negatives_at_divergence(output, self.num_generations)
            self._metrics["train"]["frac_negative_tokens_kept"].append(kept)
        if self.appliance_request_of is not None:
            self._in_one_process("negatives_without_copies")
            if len(rows) != output["advantages"].numel():
                raise ApplianceError(f"negatives_without_copies needs each sample's task: the recorder holds "
                                     f"{len(rows)} rows for {output['advantages'].numel()} samples.")
            requests = [self.appliance_request_of(str(row.get("task_id", ""))) for row in rows]
            kept = negatives_without_copies(output, self.processing_class.decode, requests)
            self._metrics["train"]["frac_negative_tokens_kept"].append(kept)
        if self.appliance_shared_prefixes_once:
            self._in_one_process("shared_prefixes_once")
            self._metrics["train"]["positive_token_weight"].append(shared_prefixes_once(output))

    def _in_one_process(self, option: str) -> None:
        """Options that read a group's rows together: with several processes a group would span them (not built)."""
        if self.accelerator.num_processes > 1:
            raise ApplianceError(f"{option} runs in one process; leave it off with several.")


def declined(row: dict[str, Any]) -> bool:
    """A rollout row whose answer is a decline (`answer_declines`)."""
    return answer_declines(row.get("v_parse_ok"), row.get("v_n_calls"))


def answer_declines(parse_ok: Any, n_calls: Any) -> bool:
    """An answer that parsed and calls no tool declines; a format error is an attempted call."""
    return bool(parse_ok) and not n_calls
