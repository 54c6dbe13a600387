"""`appliance eval`: run every task k times, verify every output, store everything.

Single-step tasks are one batched generation over (task × k); multi-step tasks go
through the agent loop in `agent.py`. Ctrl-C stops between batches and keeps
what finished (the eval is stored as interrupted).
"""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

from appliance.errors import ApplianceError
from appliance.evaluate.agent import Trajectory, label_lost_track, run_trajectories
from appliance.evaluate.decision import DecisionThresholds, Recommendation, failure_detail, recommend
from appliance.evaluate.metrics import ScoredSample, summarize
from appliance.evaluate.scoring import Scorer, declining_everything, make_scorer
from appliance.generate.strict import STRICT_BY_DEFAULT, STRICT_HELP
from appliance.checkpoints import answer_tokens_of
from appliance.prompting import ANSWER_TOKENS, answer_tokens
from appliance.events import EvalFinished, EventSink, Progress, RunStarted, null_sink
from appliance.task import Task


@dataclass
class EvalSettings:
    model: str = field(default="smollm2-135m", metadata={"help": "catalogue name, local folder or hub id"})
    adapter: str | None = field(default=None, metadata={"help": "LoRA adapter folder to evaluate"})
    pack: str = field(default="workplace-single", metadata={"help": "task pack name or folder"})
    split: str = field(default="val", metadata={"help": "split to evaluate (never the train split for held-out claims)"})
    k: int = field(default=1, metadata={"help": "samples per task"})
    limit: int | None = field(default=None, metadata={"help": "evaluate only the first N tasks"})
    temperature: float | None = field(default=None, metadata={"help": "None: greedy for k=1, 0.7 for k>1"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": f"generation budget per turn (a call is ~60 tokens); None = the adapter's answer budget: "
                f"{ANSWER_TOKENS}, or {answer_tokens(checked=True)} for one trained with policy or time checks "
                f"(its `<think>` block comes first)"})
    batch_size: int = field(default=32, metadata={"help": "prompts per generation call"})
    backend: str = field(default="auto", metadata={"help": "auto | hf | vllm"})
    seed: int = field(default=0, metadata={"help": "sampling seed"})
    strict: bool = field(default=STRICT_BY_DEFAULT, metadata={"help": STRICT_HELP})
    tasks_root: str = field(default="tasks", metadata={"help": "folder holding task packs"})
    run_id: str | None = field(default=None, metadata={"help": "training run this eval belongs to, if any"})

    def validate(self) -> None:
        """Reject values that would fail (or quietly mean something else) after the model loads."""
        for name in ("k", "max_new_tokens", "batch_size"):
            if name == "max_new_tokens" and self.max_new_tokens is None:
                continue  # the adapter's own budget (run_eval)
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ApplianceError(f"{name} must be a whole number of at least 1, not {getattr(self, name)!r}.")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 0):
            raise ApplianceError(f"The eval limit must be a number of tasks (0 or none = the whole split), "
                                 f"not {self.limit!r}.")
        if self.temperature is not None and not 0 <= self.temperature < float("inf"):
            raise ApplianceError(f"temperature must be 0 (greedy) or more, not {self.temperature!r}.")
        if not 0 < self.top_p <= 1:
            raise ApplianceError(f"top_p must be above 0 and at most 1, not {self.top_p!r}.")

    @property
    def effective_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.k == 1 else 0.7


@dataclass
class EvalReport:
    eval_id: str
    settings: EvalSettings
    metrics: dict[str, Any]
    recommendation: Recommendation
    samples: list[ScoredSample]
    backend_reason: str
    interrupted: bool = False


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), max(1, size))]


class _Session:
    """One eval in progress: generator, scorer, prompts and the store rows."""

    def __init__(self, settings: EvalSettings, pack: Any, generator: Any, scorer: Scorer,
                 sink: EventSink, eval_id: str, writer: Any) -> None:
        self.settings, self.pack, self.generator, self.scorer = settings, pack, generator, scorer
        self.sink, self.eval_id, self.writer = sink, eval_id, writer
        self.samples: list[ScoredSample] = []

    def prompt(self, task: Task, messages: Sequence[dict[str, Any]]) -> str:
        from appliance.prompting import render_prompt

        return render_prompt(self.generator.tokenizer, self.pack.system_prompt, list(messages),
                             self.pack.tools_for(task))

    def _generate(self, prompts: list[str], n: int, tasks: Sequence[Task],
                  seed: int | None | str = "settings") -> list[list[Any]]:
        s = self.settings
        return self.generator.generate(prompts, n=n, temperature=s.effective_temperature, top_p=s.top_p,
                                       max_new_tokens=s.max_new_tokens, stop=None,
                                       seed=s.seed if seed == "settings" else seed,
                                       strict_tools=[self.pack.tools_for(task) for task in tasks] if s.strict else None)

    def keep(self, scored: list[ScoredSample], prompts: dict[str, str]) -> None:
        self.samples.extend(scored)
        if self.writer is not None:
            self.writer(self.eval_id, scored, prompts)

    def run_single_step(self, tasks: Sequence[Task]) -> None:
        prompts_all = {t.id: self.prompt(t, t.messages) for t in tasks}
        done = 0
        lengths = {task_id: len(prompt) for task_id, prompt in prompts_all.items()}
        for batch in self._batches_by_tools(tasks, lengths, self.settings.batch_size):
            prompts = {t.id: prompts_all[t.id] for t in batch}
            outputs = self._generate([prompts[t.id] for t in batch], self.settings.k, batch)
            scored = []
            for task, samples in zip(batch, outputs):
                for index, sample in enumerate(samples):
                    verdict = self.scorer.score_text(task, sample.text)
                    reward = self.scorer.reward(verdict)
                    scored.append(ScoredSample(task.id, index, sample.text, verdict, reward.total,
                                               reward.components, sample.latency_s, sample.prompt_tokens,
                                               sample.completion_tokens))
            self.keep(scored, prompts)
            done += len(batch)
            self.sink(Progress(run_id=self.eval_id, stage="eval", done=done, total=len(tasks)))

    def _batches_by_tools(self, tasks: Sequence[Task], lengths: dict[str, int], size: int) -> list[Sequence[Task]]:
        """Full batches in tool-list order, and by prompt length within one list; tasks whose tool list no
        other task shares come last, in length order.

        A batch then holds few tool lists, and the generator prefills each list's
        common head once for all its rows; length order keeps the padding small.
        A list of its own has no head to share, so only padding matters there:
        on BFCL's gate (135 lists for 140 tasks) this order took 185.9 s against
        231.6 s in task order, with the same answers (`bench/bench_eval_order.py`,
        base model, 2 cores; session 16).
        """
        lists = {task.id: json.dumps(self.pack.tools_for(task), sort_keys=True, default=str) for task in tasks}
        shared = Counter(lists.values())
        rank = {key: index if shared[key] > 1 else len(shared)
                for index, key in enumerate(dict.fromkeys(lists.values()))}
        return _chunks(sorted(tasks, key=lambda t: (rank[lists[t.id]], lengths[t.id])), size)

    def run_multi_step(self, tasks: Sequence[Task]) -> None:
        done = 0
        lengths = {t.id: sum(len(str(m.get("content") or "")) for m in t.messages) for t in tasks}
        size = max(1, self.settings.batch_size // max(1, self.settings.k))
        for batch in self._batches_by_tools(tasks, lengths, size):
            trajectories = [
                Trajectory(task=t, sample_index=i, messages=list(t.messages), world=self.scorer.verifier.episode(t))
                for t in batch for i in range(self.settings.k)
            ]
            first_prompts = {t.id: self.prompt(t, t.messages) for t in batch}

            def generate_turn(active: list[Trajectory]) -> list[Any]:
                prompts = [self.prompt(tr.task, tr.messages) for tr in active]
                # The k copies of a task are separate requests here; one shared seed would make vLLM
                # (which seeds per request) sample them identically, so k > 1 samples unseeded.
                seed = self.settings.seed if self.settings.k == 1 else None
                return [samples[0] for samples in self._generate(prompts, 1, [tr.task for tr in active], seed=seed)]

            run_trajectories(trajectories, max_turns=self.pack.max_turns, generate_turn=generate_turn)
            self.keep([self._score_trajectory(tr) for tr in trajectories], first_prompts)
            done += len(batch)
            self.sink(Progress(run_id=self.eval_id, stage="eval", done=done, total=len(tasks)))

    def _score_trajectory(self, tr: Trajectory) -> ScoredSample:
        verdict = self.scorer.score_calls(tr.task, tr.calls, parse_ok=not tr.parse_failed, raised=tr.raised,
                                          final_text=tr.final_text)
        expected_changes, made_changes = self.scorer.change_counts(tr.task, tr.calls)
        label_lost_track(tr, expected_changes, made_changes)
        reward = self.scorer.reward(verdict)
        return ScoredSample(tr.task.id, tr.sample_index, tr.final_text, verdict, reward.total, reward.components,
                            tr.latency_s, tr.prompt_tokens, tr.completion_tokens, turns=len(tr.turns),
                            horizon=tr.horizon, trajectory=tr.turns)


def run_eval(settings: EvalSettings, *, workspace: Any = None, sink: EventSink = null_sink,
             generator: Any = None, backend_reason: str = "",
             thresholds: DecisionThresholds = DecisionThresholds(), allow_interrupt: bool = False) -> EvalReport:
    """Evaluate, store and summarise. `generator` may be injected (tests, a live training engine).

    Ctrl-C stores what finished; with `allow_interrupt` the partial report is returned (marked
    interrupted), otherwise the interrupt goes on to the caller, so a gate never decides on half an eval.
    """
    from appliance.packs import load_pack

    settings.validate()
    if settings.max_new_tokens is None:  # stored with the eval as the number it ran under
        settings = replace(settings, max_new_tokens=answer_tokens_of(settings.adapter))
    pack = load_pack(settings.pack, root=settings.tasks_root)
    tasks = pack.tasks(settings.split)[: settings.limit] if settings.limit else pack.tasks(settings.split)
    if generator is None:
        generator, backend_reason = load_generator(settings)
    eval_id = f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    sink(RunStarted(run_id=eval_id, kind="eval", config={**asdict(settings), "backend_reason": backend_reason}))
    from appliance.evaluate.storage import EvalWriter

    writer = EvalWriter(workspace, settings, pack, backend=getattr(generator, "name", settings.backend),
                        run_id=settings.run_id) if workspace is not None else None
    session = _Session(settings, pack, generator, make_scorer(pack), sink, eval_id,
                       writer.write_samples if writer else None)
    started = time.perf_counter()
    interrupted = False
    try:
        session.run_single_step([t for t in tasks if t.kind == "single_step"])
        session.run_multi_step([t for t in tasks if t.kind == "multi_step"])
    except KeyboardInterrupt:
        interrupted = True
    except Exception as err:
        if writer is not None:
            writer.write_failed(eval_id, f"{type(err).__name__}: {err}")
        raise
    wall = time.perf_counter() - started
    done_ids = {s.task_id for s in session.samples}
    answered = [t for t in tasks if t.id in done_ids]
    metrics = summarize(session.samples, answered, settings.k, wall,
                        declining_everything(pack, answered, session.scorer))
    if session.scorer.is_bfcl:
        metrics["bfcl"] = _bfcl_breakdown(session.samples, pack)
    metrics["failure_detail"] = failure_detail(session.samples, {t.id: t for t in tasks}, pack.tools_for)
    rec = recommend(metrics, thresholds)
    if writer is not None:
        writer.write_eval(eval_id, metrics, rec, backend_reason, interrupted)
    sink(EvalFinished(run_id=eval_id, eval_id=eval_id, metrics=metrics, recommendation=str(rec)))
    if interrupted and not allow_interrupt:
        raise KeyboardInterrupt
    return EvalReport(eval_id, settings, metrics, rec, session.samples, backend_reason, interrupted)


def _bfcl_breakdown(samples: Sequence[ScoredSample], pack: Any) -> dict[str, float]:
    """Accuracy per BFCL category and the leaderboard's summary numbers (first sample per task)."""
    from appliance.bfcl import bfcl_summary

    return bfcl_summary((pack.task(s.task_id).tags.get("category", "?"), s.verdict.success)
                        for s in samples if s.sample_index == 0)


def load_generator(settings: EvalSettings) -> tuple[Any, str]:
    """The generator (and the reason for its backend) an eval under `settings` answers with."""
    _require_loadable(settings)
    return _make_generator(settings)


def _require_loadable(settings: EvalSettings) -> None:
    """One sentence for a model or adapter that cannot load, before minutes are spent loading."""
    from appliance.models import require_adapter_folder, require_available

    require_available(settings.model)
    if settings.adapter is not None:
        require_adapter_folder(settings.adapter)


def _make_generator(settings: EvalSettings) -> tuple[Any, str]:
    from appliance.generate import make_generator

    return make_generator(settings.backend, model=settings.model, adapter=settings.adapter,
                          batch_size=settings.batch_size)
