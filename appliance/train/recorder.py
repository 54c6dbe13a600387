"""Record every GRPO rollout: wrap the reward functions, buffer rows per step, flush at step end.

TRL calls every reward function once per generation batch with the same
`prompts`/`completions` lists and the dataset columns (`task_id`,
`prompt_tokens`) repeated per completion. Each wrapper stores its column of
scores; when the last one has reported, the recorder verifies each completion
once more for the verdict fields (the reward functions return only floats) and
builds one `rollouts` row per completion. Our trainer mixin adds the
group-relative advantages TRL computed. Rows wait in a buffer until the
trainer's step ends, then go to the store in one append and out as
`RolloutScored` events.

Resume: rows of a step are written once. A resumed run restarts at its last
checkpoint and replays the steps after it (with the RNG state restored, so the
same samples); steps that already have rows in the store are not written again
(`skip_through_step`), which keeps the table free of duplicates without
deleting anything from an append-only store.

Several processes (accelerate launch, appliance/recipe/): each rank scores and
writes its own slice of the step's batch, and a group of `num_generations`
may span ranks. `gather_task_ids` (every rank's task ids, in rank order) lets
a rank number its samples after those of the ranks before it, so
(step, task_id, sample_index) stays unique across the run.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

from ..events import EventSink, RolloutScored, null_sink


def reward_name(func: Callable, index: int) -> str:
    return getattr(func, "__name__", None) or f"reward_{index}"


class RolloutRecorder:
    """Collects one row per (prompt, completion) and writes them per step."""

    def __init__(self, run_id: str, reward_funcs: list[Callable], reward_weights: list[float] | None,
                 verify: Callable[..., Any] | None, write_rows: Callable[[list[dict]], None],
                 sink: EventSink = null_sink, skip_through_step: int = 0, rank: int = 0,
                 gather_task_ids: Callable[[list[str]], list[list[str]]] | None = None) -> None:
        self.run_id = run_id
        self.names = [reward_name(f, i) for i, f in enumerate(reward_funcs)]
        self.weights = list(reward_weights) if reward_weights else [1.0] * len(reward_funcs)
        self.verify = verify
        self.write_rows = write_rows
        self.sink = sink
        self.skip_through_step = skip_through_step
        self.rank = rank
        self.gather_task_ids = gather_task_ids
        self.wrapped = [self._wrap(f, name) for f, name in zip(reward_funcs, self.names)]
        self._scores: dict[str, list[float | None]] = {}
        self._batch_key: int | None = None
        self._pending: list[dict[str, Any]] = []  # rows of the batch whose advantages are not set yet
        self._buffer: list[dict[str, Any]] = []
        self.rows_written = 0

    def _wrap(self, func: Callable, name: str) -> Callable:
        @functools.wraps(func)
        def recording_reward(prompts, completions, **kwargs):
            scores = list(func(prompts=prompts, completions=completions, **kwargs))
            self._record(name, prompts, completions, scores, kwargs)
            return scores

        recording_reward.__name__ = name
        return recording_reward

    def _record(self, name: str, prompts: list, completions: list, scores: list, kwargs: dict) -> None:
        key = id(completions)  # every reward function of one batch gets the same list object
        if key != self._batch_key:
            self._batch_key, self._scores = key, {}
        self._scores[name] = scores
        if len(self._scores) == len(self.names):
            self._buffer_batch(prompts, completions, kwargs)

    def _buffer_batch(self, prompts: list, completions: list, kwargs: dict) -> None:
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", 0)) + 1  # the step these samples will train
        task_ids = kwargs.get("task_id") or [""] * len(completions)
        prompt_tokens = kwargs.get("prompt_tokens") or [None] * len(completions)
        completion_ids = kwargs.get("completion_ids") or [None] * len(completions)
        model_tokens = kwargs.get("model_tokens")  # an episode's own tokens, without the tool output
        trajectories = kwargs.get("agent_trajectory") or [None] * len(completions)
        guided = kwargs.get("guided") or [False] * len(completions)  # guide_failed_groups (rollout.py)
        # A multi-turn episode is stored as its transcript (chat markers kept), not TRL's marker-less decode.
        completions = kwargs.get("transcript") or completions
        prompts = kwargs.get("sampled_prompt") or prompts  # a flat group's refill (rollout.FlatGroupRefill)
        seen = self._samples_before_this_rank([str(t) for t in task_ids[:len(completions)]])
        rows = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            task_id = str(task_ids[i])
            sample_index = seen.get(task_id, 0)
            seen[task_id] = sample_index + 1
            components = {n: _as_float(self._scores[n][i]) for n in self.names}
            rows.append({
                "run_id": self.run_id, "step": step, "task_id": task_id, "sample_index": sample_index,
                "prompt": _as_text(prompt), "completion": _as_text(completion),
                "prompt_tokens": prompt_tokens[i],
                "completion_tokens": (model_tokens[i] if model_tokens else
                                      len(completion_ids[i]) if completion_ids[i] is not None else None),
                "reward": _weighted_total(components, self.names, self.weights),
                "components": {k: v for k, v in components.items() if not math.isnan(v)},
                "guided": bool(guided[i]),
                **self._verdict_fields(task_id, _as_text(completion), trajectories[i]),
            })
        self._pending = rows
        self._buffer.extend(rows)

    def _samples_before_this_rank(self, task_ids: list[str]) -> dict[str, int]:
        """Per task, how many of this batch's samples lower ranks hold (all zero in one process)."""
        seen: dict[str, int] = {}
        if self.gather_task_ids is None:
            return seen
        for ids in self.gather_task_ids(task_ids)[:self.rank]:
            for task_id in ids:
                seen[task_id] = seen.get(task_id, 0) + 1
        return seen

    def _verdict_fields(self, task_id: str, completion: str, trajectory: dict | None = None) -> dict[str, Any]:
        if self.verify is None:
            return {}
        verdict = self.verify(task_id, completion) if trajectory is None else self.verify(task_id, completion, trajectory)
        if verdict is None:
            return {}
        return {**verdict.to_row(), "bucket": verdict.bucket}

    def pending_rows(self) -> list[dict[str, Any]]:
        """The rows just scored, in the batch's order, whose advantages are not set yet (their verdicts and rewards)."""
        return list(self._pending)

    def set_advantages(self, advantages: list[float]) -> None:
        """Attach TRL's advantages (same order as the batch) to the rows just scored."""
        for row, advantage in zip(self._pending, advantages):
            row["advantage"] = float(advantage)
        self._pending = []

    def set_generation_latency(self, seconds: float) -> None:
        """Batched generation has one wall time; each row gets it (the latency a caller would have seen)."""
        for row in self._buffer:
            row.setdefault("latency_s", float(seconds))

    def flush(self, step: int) -> int:
        """Write buffered rows of steps <= `step`; return how many rows were written."""
        ready = [r for r in self._buffer if r["step"] <= step]
        self._buffer = [r for r in self._buffer if r["step"] > step]
        fresh = [r for r in ready if r["step"] > self.skip_through_step]
        if fresh:
            self.write_rows(fresh)
            self.rows_written += len(fresh)
            for row in fresh:
                self.sink(RolloutScored(run_id=self.run_id, step=row["step"], task_id=row["task_id"],
                                        sample_index=row["sample_index"], completion=row["completion"],
                                        reward=row["reward"], bucket=row.get("bucket") or "",
                                        reason=row.get("v_reason") or ""))
        return len(fresh)

    def step_summary(self, step: int) -> dict[str, float]:
        """Verdict-level metrics of the rows of `step` still in the buffer (call before flush)."""
        rows = [r for r in self._buffer if r["step"] == step and "v_bucket" in r]
        if not rows:
            return {}
        n = len(rows)
        return {
            "train/success_rate": sum(r["v_bucket"] == "success" for r in rows) / n,
            "train/format_error_rate": sum(r["v_bucket"] == "format_error" for r in rows) / n,
            "train/unsafe_rate": sum(bool(r.get("v_unsafe")) for r in rows) / n,
        }


def _as_float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _weighted_total(components: dict[str, float], names: list[str], weights: list[float]) -> float:
    values = [(components[n], w) for n, w in zip(names, weights) if not math.isnan(components[n])]
    return float(sum(v * w for v, w in values)) if values else float("nan")


def _as_text(value: Any) -> str:
    """Prompts/completions are text for our datasets; chat-format lists are flattened to their content."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in value)
    return str(value)
