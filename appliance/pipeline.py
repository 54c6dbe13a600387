"""`appliance run`: the seed's workflow end to end on one pack.

baseline eval on held-out tasks → recommendation → SFT if the format is rarely
right → GRPO with the pack's verifiable reward → promotion gate (held-out eval of
candidate vs baseline, safety, latency, BFCL) → a short report. Every stage
stores its rows, so the report is also one SQL query away.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.errors import ApplianceError
from appliance.events import EventSink, Log, RunFinished, RunStarted, null_sink


@dataclass
class PipelineSettings:
    model: str = field(default="smollm2-135m", metadata={"help": "base model"})
    pack: str = field(default="workplace-single", metadata={"help": "task pack"})
    quick: bool = field(default=False, metadata={"help": "tiny sizes: a smoke run of every stage"})
    baseline_only: bool = field(default=False, metadata={"help": "stop after the baseline and recommendation"})
    tasks_root: str = field(default="tasks", metadata={"help": "folder with task packs"})
    baseline_k: int = field(default=1, metadata={
        "help": "samples per task in the baseline; 1 = greedy, which the gate can reuse; >1 adds pass@k"})
    eval_limit: int | None = field(default=None, metadata={"help": "held-out tasks per eval (None: all)"})
    sft_steps: int = field(default=40, metadata={"help": "SFT steps when SFT is recommended"})
    grpo_steps: int = field(default=16, metadata={"help": "GRPO steps"})
    checkpoints_root: str = field(default="checkpoints", metadata={"help": "adapter registry"})

    def __post_init__(self) -> None:
        if self.quick:
            self.eval_limit, self.sft_steps, self.grpo_steps = min(self.eval_limit or 8, 8), 4, 2


@dataclass
class PipelineResult:
    lines: list[str]
    baseline: Any = None
    promoted: bool = False
    candidate: str | None = None
    stages_s: dict[str, float] = field(default_factory=dict)


def _timed(result: PipelineResult, stage: str, started: float) -> None:
    result.stages_s[stage] = time.perf_counter() - started


def run_pipeline(s: PipelineSettings, *, workspace: Any, sink: EventSink = null_sink) -> PipelineResult:
    from appliance.evaluate import EvalSettings, run_eval

    run_id = workspace.new_id("pipeline")
    sink(RunStarted(run_id=run_id, kind="pipeline", config=asdict(s)))
    result = PipelineResult(lines=[])
    t0 = time.perf_counter()
    baseline = run_eval(EvalSettings(model=s.model, pack=s.pack, split="val", k=s.baseline_k, limit=s.eval_limit,
                                     tasks_root=s.tasks_root), workspace=workspace, sink=sink)
    _timed(result, "baseline", t0)
    result.baseline = baseline
    m = baseline.metrics
    result.lines += [
        f"baseline {baseline.eval_id}: valid JSON {m['valid_json_rate']:.1%}, correct tool {m['correct_tool_rate']:.1%}, "
        f"execution success {m['execution_success_rate']:.1%}, pass@{s.baseline_k} {m[f'pass@{s.baseline_k}']:.1%} "
        f"on {m['n_tasks']} held-out tasks ({result.stages_s['baseline']:.0f}s)",
        f"recommendation: {baseline.recommendation}",
    ]
    action = baseline.recommendation.action
    if s.baseline_only or action == "promote":
        sink(RunFinished(run_id=run_id, summary={"lines": result.lines}))
        return result
    adapter, candidate_eval = _train(s, action, workspace, sink, result)
    reuse = {"candidate": candidate_eval} if candidate_eval else {}
    if s.baseline_k == 1:
        reuse["baseline"] = baseline.eval_id  # greedy on the same split: exactly what the gate would run
    _promote(s, adapter, workspace, sink, result, reuse)
    sink(RunFinished(run_id=run_id, summary={"lines": result.lines, "stages_s": result.stages_s}))
    return result


def _train(s: PipelineSettings, action: str, workspace: Any, sink: EventSink,
           result: PipelineResult) -> tuple[str, str | None]:
    """SFT when recommended, then GRPO; returns the final adapter and its held-out eval id."""
    from appliance.evaluate.heldout import make_heldout_eval
    from appliance.train import TrainConfig, run_grpo, run_sft

    on_eval = make_heldout_eval(model=s.model, pack=s.pack, workspace=workspace, limit=s.eval_limit,
                                tasks_root=s.tasks_root, sink=sink)
    common = {"model": s.model, "pack": s.pack, "output": s.checkpoints_root, "workspace": str(workspace.root)}
    adapter = None
    if action in ("sft", "out_of_reach"):
        t0 = time.perf_counter()
        sft = run_sft(TrainConfig(stage="sft", steps=s.sft_steps, eval_every=s.sft_steps, **common),
                      sink=sink, on_eval=on_eval, workspace=workspace)
        _timed(result, "sft", t0)
        adapter = _final_adapter(sft)
        result.lines.append(f"SFT {sft.run_id}: {s.sft_steps} steps → {adapter} ({result.stages_s['sft']:.0f}s)"
                            + _heldout_line(sft))
    t0 = time.perf_counter()
    grpo = run_grpo(TrainConfig(stage="grpo", steps=s.grpo_steps, init_adapter=adapter, eval_every=s.grpo_steps,
                                **common), sink=sink, on_eval=on_eval, workspace=workspace)
    _timed(result, "grpo", t0)
    result.lines.append(f"GRPO {grpo.run_id}: {s.grpo_steps} steps → {grpo.final_adapter} "
                        f"({result.stages_s['grpo']:.0f}s)" + _heldout_line(grpo))
    return _final_adapter(grpo), _heldout(grpo).get("eval_id")


def _final_adapter(train_result: Any) -> str:
    if not train_result.final_adapter:
        raise ApplianceError(f"run {train_result.run_id} saved no adapter; check `appliance checkpoints list`.")
    return str(train_result.final_adapter)


def _heldout(train_result: Any) -> dict[str, Any]:
    """The held-out eval recorded in the run's last checkpoint manifest ({} if none)."""
    from appliance.checkpoints import load_manifest

    if not train_result.checkpoints:
        return {}
    return load_manifest(train_result.checkpoints[-1]).get("metrics", {}).get("heldout") or {}


def _heldout_line(train_result: Any) -> str:
    success = _heldout(train_result).get("heldout_success")
    return f"; held-out success {success:.1%}" if isinstance(success, (int, float)) else ""


def _promote(s: PipelineSettings, adapter: str, workspace: Any, sink: EventSink, result: PipelineResult,
             reuse: dict[str, str]) -> None:
    from appliance.promotion import GateSettings, promote

    t0 = time.perf_counter()
    decision = promote(adapter, root=s.checkpoints_root, model=s.model, pack=s.pack, tasks_root=s.tasks_root,
                       workspace=workspace, sink=sink, settings=GateSettings(limit=s.eval_limit), reuse=reuse)
    _timed(result, "gate", t0)
    result.promoted, result.candidate = decision.promoted, adapter
    result.lines.append(("PROMOTED: " if decision.promoted else "NOT PROMOTED: ") + decision.summary)
    result.lines += [f"  - {r}" for r in decision.reasons]
    sink(Log(message=result.lines[-1]))
