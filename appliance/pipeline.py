"""`appliance run`: the seed's workflow end to end on one pack.

baseline eval on held-out tasks → recommendation → SFT if the format is rarely
right → GRPO with the pack's verifiable reward → the checkpoint to promote, picked
on `dev` by the gate's safety rule → promotion gate (held-out eval of candidate vs
baseline, safety, latency, BFCL) → a short report. Every stage stores its rows, so
the report is also one SQL query away.

Each model-holding stage runs as its own `appliance …` child process that
streams typed events (STYLE rule 4): on a GPU the baseline's vLLM engine, the
SFT model and GRPO's colocated engine never share one process's memory, a CUDA
crash ends one stage with a clear error, and the memory is freed between stages.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from appliance.cpu_waiting import stage_environment, waiting_line
from appliance.errors import ERROR_PREFIX, ApplianceError
from appliance.generate.strict import STRICT_BY_DEFAULT, STRICT_HELP
from appliance.interrupts import sigterm_as_interrupt
from appliance.events import (CheckpointSaved, Event, EventSink, EvalFinished, Log, RunFailed, RunFinished,
                              RunStarted, null_sink, parse_event)
from appliance.train.config import TrainConfig


STAGE_STOP_S = 120  # after Ctrl-C or kill, how long a stage may take to store what it finished
# A --quick run is a smoke run of every stage on 2 cores in under 5 minutes; its numbers mean nothing.
QUICK_EVAL_LIMIT = 6  # held-out tasks per eval (the baseline, each stage's own eval, the gate's BFCL evals)
QUICK_SFT_STEPS, QUICK_GRPO_STEPS = 4, 2
QUICK_SCREEN_LIMIT = 16  # tasks a --quick run screens for GRPO: enough to pick its 2, seconds not minutes
QUICK_PROMPTS_PER_STEP = 1  # one group of rollouts a GRPO step
QUICK_SELECT_EVERY = 1  # a quick run reads both GRPO checkpoints on dev, so the pick runs too
SELECTION_SPLIT = "dev"  # where the pipeline picks its candidate checkpoint; the gate reads `val`
_TRAIN_FIELDS = {f.name: f for f in fields(TrainConfig)}


# The SFT stage's missing-tool rows for a pack that lists tools by domain (the WorkBench packs): a share of 0.3
# shown another domain's listing. Chosen on dev (docs/learning.md, session 52, H94 and H95): with the pipeline's
# GRPO after it, dev 92 of 120 (unsafe 3; the plain two passes: 90, unsafe 6) and BFCL dev 16 of 140, the gate's
# bar; its own decline of whole kinds of request (dev 82) is what GRPO undid (+8.3 over its start). Another pack
# keeps TrainConfig's defaults (off): the rows were measured on domain listings only.
DOMAIN_LISTING_MISSING_TOOLS: dict[str, Any] = {"missing_tool_share": 0.3, "missing_tool_listing": "other"}
CPU_BATCH_ORDER = "by_head"  # the SFT stage's batch order on the cpu backend (PipelineSettings.sft_batch_order)


def _sft_option(name: str) -> Any:
    """A field for one of the SFT stage's missing-tool options: None = the pack's default (`sft_missing_tools`),
    with TrainConfig's help."""
    default = (f"{DOMAIN_LISTING_MISSING_TOOLS[name]} for a pack that lists tools by domain, "
               f"else {_TRAIN_FIELDS[name].default}")
    return field(default=None, metadata={"help": f"{_TRAIN_FIELDS[name].metadata['help']} Default: {default}."})


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
    # Chosen on dev (docs/learning.md, sessions 39 and 46, H52 and H85): two passes at 4 rows a step (600 steps
    # over workplace-single's 1,200 train tasks, ~3 s a step on 2 CPU cores) scored 90 of 120 on dev against 67
    # for session 29's 150 steps of 8 (one pass), with 6 dev refusals carried out against 1. In passes, not
    # steps, so a pack of its own gets two passes too. GRPO's 15 steps (~25 s a step of 4 x 4 rollouts, plus 2-3
    # min of screening): 30 lost 8.3 dev points (session 7). The README's Results section names the latest timed
    # run of these defaults and its command.
    sft_steps: int | None = field(default=None, metadata={
        "help": "SFT steps when SFT is recommended; None = sft_passes over the pack's `train` split"})
    sft_passes: float = field(default=2.0, metadata={
        "help": "passes SFT takes over the pack's `train` split when no step count is given"})
    sft_batch_size: int = field(default=4, metadata={"help": "SFT rows per step"})
    sft_missing_tool_share: float | None = _sft_option("missing_tool_share")
    sft_missing_tool_listing: str | None = _sft_option("missing_tool_listing")
    # Chosen on dev (docs/learning.md, session 57, H101): SFT batches of one tool list take 17% less a step on the
    # cpu backend (one pass of the head through the adapted layers instead of 2.2), and the pipeline's pick from
    # them (the SFT start itself) read dev 88 of 120 with 2 unsafe and BFCL dev 16 of 140 (the old order's pick:
    # 89, 2). The unsloth backend keeps TrainConfig's order (it has no such pass, and no sampler of ours yet).
    sft_batch_order: str | None = field(default=None, metadata={
        "help": f"{_TRAIN_FIELDS['batch_order'].metadata['help']} Default: {CPU_BATCH_ORDER} on the cpu backend, "
                f"else {_TRAIN_FIELDS['batch_order'].default}."})
    grpo_steps: int = field(default=15, metadata={"help": "GRPO steps"})
    # Chosen on dev (docs/learning.md, session 55, H100): H94's GRPO read every 5 steps (H98) gained 6 dev points
    # by step 5 with its start's unsafe actions and 10 by step 15 with one more, the twin of val's.
    grpo_select_every: int = field(default=5, metadata={
        "help": f"evaluate GRPO's checkpoints on the pack's `{SELECTION_SPLIT}` split every N steps and keep, "
                f"among its start and them, the one with the highest `{SELECTION_SPLIT}` success whose "
                "unsafe-action rate there is not above its start's (ties: the earlier); 0 = keep the last "
                f"checkpoint, also the choice for a pack without a `{SELECTION_SPLIT}` split"})
    strict: bool = field(default=STRICT_BY_DEFAULT, metadata={
        "help": f"{STRICT_HELP}: baseline, training and gate alike"})
    checkpoints_root: str = field(default="checkpoints", metadata={"help": "adapter registry"})

    def __post_init__(self) -> None:
        if self.quick:
            self.eval_limit = min(self.eval_limit or QUICK_EVAL_LIMIT, QUICK_EVAL_LIMIT)
            self.sft_steps, self.grpo_steps = QUICK_SFT_STEPS, QUICK_GRPO_STEPS
            self.grpo_select_every = min(self.grpo_select_every, QUICK_SELECT_EVERY)

    def sft_steps_for(self, train_rows: int) -> int:
        """SFT's steps: the given count, else sft_passes over `train_rows` rows at sft_batch_size a step."""
        if self.sft_steps is not None:
            return self.sft_steps
        return max(1, round(self.sft_passes * -(-train_rows // self.sft_batch_size)))

    def sft_order(self) -> str:
        """The SFT stage's batch order: as given, else CPU_BATCH_ORDER where its stages train on the cpu backend."""
        from appliance.train.backends import auto_backend_name

        if self.sft_batch_order is not None:
            return self.sft_batch_order
        return CPU_BATCH_ORDER if auto_backend_name() == "cpu" else _TRAIN_FIELDS["batch_order"].default

    def sft_missing_tools(self, pack: Any) -> dict[str, Any]:
        """The SFT stage's missing-tool options, each as given, else the default for `pack`'s kind of listing."""
        defaults = DOMAIN_LISTING_MISSING_TOOLS if pack.lists_tools_by_domain else {
            name: _TRAIN_FIELDS[name].default for name in DOMAIN_LISTING_MISSING_TOOLS}
        given = {"missing_tool_share": self.sft_missing_tool_share,
                 "missing_tool_listing": self.sft_missing_tool_listing}
        return {name: defaults[name] if value is None else value for name, value in given.items()}

    def grpo_args(self) -> list[str]:
        """A quick run screens a sample of GRPO's pool, not all of it, and samples one prompt's group a step
        (measured on 2 cores: with 2 prompts a step GRPO's two steps took 37-39 s each, the run 5 min 43 s)."""
        if not self.quick:
            return []
        return ["--screen-limit", str(QUICK_SCREEN_LIMIT), "--prompts-per-step", str(QUICK_PROMPTS_PER_STEP)]


@dataclass
class PipelineResult:
    lines: list[str]
    baseline: EvalFinished | None = None
    promoted: bool = False
    candidate: str | None = None
    stages_s: dict[str, float] = field(default_factory=dict)


def run_stage(args: list[str], sink: EventSink) -> list[Event]:
    """Run `appliance ARGS --events` in a child process, forward its events, and return them.

    Ctrl-C reaches the child too (same process group): it stores what finished and exits, and the
    interrupt goes on from here. A failed child becomes one ApplianceError with its own words.
    """
    env = stage_environment()
    command = " ".join(args[:2] if args[0] == "train" else args[:1])
    sink(Log(message=f"stage `appliance {command}`: {waiting_line(env)}"))
    proc = subprocess.Popen([sys.executable, "-m", "appliance", *args, "--events"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    stderr_tail: deque[str] = deque(maxlen=20)
    reader = threading.Thread(target=lambda: stderr_tail.extend(proc.stderr), daemon=True)
    reader.start()
    events: list[Event] = []
    try:
        # `kill` (SIGTERM) of `appliance run` ends its running stage too, which would otherwise train on
        # unseen: the stage takes the SIGTERM as Ctrl-C (appliance.cli) and stores what finished.
        with sigterm_as_interrupt(proc.terminate):
            for line in proc.stdout:
                event = parse_event(line)
                if event is not None:
                    events.append(event)
                    sink(event)
            code = proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=STAGE_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    reader.join(timeout=5)
    if code != 0:
        failed = next((e.error for e in reversed(events) if isinstance(e, RunFailed)), "")
        said = failed or next((ln.strip() for ln in reversed(stderr_tail) if ln.strip()), f"exit code {code}")
        # The child's sentence already carries the CLI's prefix, and this one will be printed with it again.
        raise ApplianceError(f"`appliance {args[0]}` failed: {said.removeprefix(ERROR_PREFIX)}")
    return events


def _last(events: list[Event], kind: type) -> Any:
    found = [e for e in events if isinstance(e, kind)]
    if not found:
        raise ApplianceError(f"a pipeline stage finished without a {kind.type} event; see its log above.")
    return found[-1]


def _timed(result: PipelineResult, stage: str, started: float) -> None:
    result.stages_s[stage] = time.perf_counter() - started


def _common_args(s: PipelineSettings, workspace: Any) -> list[str]:
    return ["--workspace", str(workspace.root), "--tasks-root", s.tasks_root,
            "--strict" if s.strict else "--no-strict"]


def _eval_args(s: PipelineSettings, workspace: Any, pack: str, split: str, *extra: str) -> list[str]:
    """`appliance eval` of the run's model on `pack`/`split`, as many tasks as the run evaluates."""
    limit = ["--limit", str(s.eval_limit)] if s.eval_limit else []
    return ["eval", "--model", s.model, "--pack", pack, "--split", split, *extra, *limit, *_common_args(s, workspace)]


def _eval_stage(s: PipelineSettings, workspace: Any, sink: EventSink, pack: str, split: str,
                *extra: str) -> EvalFinished:
    """`appliance eval` of the run's model on `pack`/`split` as a stage of its own; returns its result."""
    return _last(run_stage(_eval_args(s, workspace, pack, split, *extra), sink), EvalFinished)


def check_inputs(s: PipelineSettings) -> PipelineSettings:
    """Refuse an unknown pack or model, no SFT passes, or SFT options the stage would refuse, in one sentence
    before any stage starts (no model loads here); the settings with the pack's defaults settled, so the run
    records (and its stages take) numbers and names, not "the pack's default"."""
    from appliance.models import require_available
    from appliance.packs import load_pack
    from appliance.train.common import refuse_other_listing_without_domains

    if not 0 < s.sft_passes < float("inf"):
        raise ApplianceError(f"sft_passes must be a positive number of passes, not {s.sft_passes!r}.")
    pack = load_pack(s.pack, root=s.tasks_root)
    missing = s.sft_missing_tools(pack)
    order = s.sft_order()
    refuse_other_listing_without_domains(TrainConfig(stage="sft", model=s.model, pack=s.pack, batch_order=order,
                                                     **missing), pack)
    require_available(s.model)
    if s.grpo_select_every < 0:
        raise ApplianceError(f"grpo_select_every must be 0 (keep the last checkpoint) or a number of steps, "
                             f"not {s.grpo_select_every!r}.")
    select_every = s.grpo_select_every if SELECTION_SPLIT in pack.splits else 0
    return replace(s, sft_steps=s.sft_steps_for(len(pack.tasks("train"))), grpo_select_every=select_every,
                   sft_batch_order=order, **{f"sft_{name}": value for name, value in missing.items()})


def run_pipeline(s: PipelineSettings, *, workspace: Any, sink: EventSink = null_sink) -> PipelineResult:
    s = check_inputs(s)
    run_id = workspace.new_id("pipeline")
    sink(RunStarted(run_id=run_id, kind="pipeline", config=asdict(s)))
    result = PipelineResult(lines=[])
    t0 = time.perf_counter()
    baseline = _eval_stage(s, workspace, sink, s.pack, "val", "-k", str(s.baseline_k))
    _timed(result, "baseline", t0)
    result.baseline = baseline
    m, k = baseline.metrics, s.baseline_k
    result.lines += [
        f"baseline {baseline.eval_id}: valid JSON {m['valid_json_rate']:.1%}, "
        f"correct tool {m['correct_tool_rate']:.1%}, "
        f"execution success {m['execution_success_rate']:.1%}, pass@{k} {m[f'pass@{k}']:.1%} "
        f"on {m['n_tasks']} held-out tasks ({result.stages_s['baseline']:.0f}s)",
        f"recommendation: {baseline.recommendation}",
    ]
    action = baseline.recommendation.split(":", 1)[0]
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


def _train_stage(stage: str, s: PipelineSettings, workspace: Any, sink: EventSink, extra: list[str], *,
                 every: int | None = None, split: str | None = None) -> tuple[str, list[Event]]:
    """One training child process, its checkpoints evaluated every `every` steps (default: at the end only) on
    `split` (default: the stage's); returns its final adapter folder and its events."""
    steps = s.sft_steps if stage == "sft" else s.grpo_steps
    batch = ["--batch-size", str(s.sft_batch_size), "--missing-tool-share", str(s.sft_missing_tool_share),
             "--missing-tool-listing", s.sft_missing_tool_listing, "--batch-order", s.sft_batch_order
             ] if stage == "sft" else []
    evals = ["--eval-every", str(every or steps), *(["--eval-split", split] if split else [])]
    # A quick run checks the fit on as few training tasks as it evaluates held out.
    fit = ["--fit-limit", str(s.eval_limit)] if s.quick else []
    args = ["train", stage, "--model", s.model, "--pack", s.pack, "--steps", str(steps), *evals, *batch,
            "--checkpoints", s.checkpoints_root, "--eval-limit", str(s.eval_limit or 0), *fit, *extra,
            *_common_args(s, workspace)]
    events = run_stage(args, sink)
    finished = _last(events, RunFinished)
    adapter = finished.summary.get("final_adapter")
    if not adapter:
        raise ApplianceError(f"run {finished.run_id} saved no adapter; check `appliance checkpoints list`.")
    return str(adapter), events


@dataclass(frozen=True)
class Contender:
    """An adapter the pipeline may hand to the gate, as it read on the selection split."""
    name: str
    adapter: str | None  # None: the base model, which the gate has nothing to promote for
    success: float
    unsafe: float


def pick_candidate(start: Contender, checkpoints: list[Contender]) -> Contender:
    """The gate's safety rule, applied on the selection split before val is read: of the start (when it is an
    adapter) and GRPO's checkpoints in step order, those whose unsafe-action rate is not above the start's come
    first; among them the highest success; ties go to the earlier, the start first (the lighter change)."""
    pool = ([start] if start.adapter else []) + checkpoints
    ranked = sorted(enumerate(pool), key=lambda item: (item[1].unsafe > start.unsafe, -item[1].success, item[0]))
    return ranked[0][1]


def _checkpoint_contenders(events: list[Event]) -> list[Contender]:
    return [Contender(f"step {e.step}", e.path, e.metrics.get("heldout/execution_success_rate", 0.0),
                      e.metrics.get("heldout/unsafe_action_rate", 0.0))
            for e in events if isinstance(e, CheckpointSaved)]


def _selection_line(start: Contender, checkpoints: list[Contender], chosen: Contender) -> str:
    read = "; ".join(f"{c.name} {c.success:.1%}, unsafe {c.unsafe:.1%}" for c in [start, *checkpoints])
    return f"pick on `{SELECTION_SPLIT}` (success, unsafe-action rate): {read} → {chosen.name}"


def _train(s: PipelineSettings, action: str, workspace: Any, sink: EventSink,
           result: PipelineResult) -> tuple[str, str | None]:
    """SFT when recommended, then GRPO, then the candidate picked on dev; returns it and its held-out eval id."""
    init: list[str] = []
    sft_adapter = None
    if action in ("sft", "out_of_reach"):
        t0 = time.perf_counter()
        sft_adapter, _ = _train_stage("sft", s, workspace, sink, [])
        _timed(result, "sft", t0)
        result.lines.append(f"SFT: {s.sft_steps} steps of {s.sft_batch_size} → {sft_adapter} "
                            f"({result.stages_s['sft']:.0f}s)" + _heldout_line(sft_adapter))
        init = ["--init-adapter", sft_adapter]
    selecting = s.grpo_select_every > 0
    start = _read_start(s, sft_adapter, workspace, sink, result) if selecting else None
    t0 = time.perf_counter()
    grpo_adapter, events = _train_stage("grpo", s, workspace, sink, init + s.grpo_args(),
                                        every=s.grpo_select_every or None,
                                        split=SELECTION_SPLIT if selecting else None)
    _timed(result, "grpo", t0)
    result.lines.append(f"GRPO: {s.grpo_steps} steps → {grpo_adapter} ({result.stages_s['grpo']:.0f}s)"
                        + _heldout_line(grpo_adapter))
    if start is None:
        candidate, candidate_eval = grpo_adapter, _heldout(grpo_adapter).get("eval_id")
    else:
        contenders = _checkpoint_contenders(events)
        chosen = pick_candidate(start, contenders)
        result.lines.append(_selection_line(start, contenders, chosen))
        if chosen is start:  # GRPO added nothing the rule allows: the SFT start goes to the gate, read on val
            return str(sft_adapter), _heldout(str(sft_adapter)).get("eval_id")
        candidate, candidate_eval = str(chosen.adapter), _read_on_val(s, str(chosen.adapter), workspace, sink,
                                                                      result)
    if sft_adapter is not None:
        result.lines.extend(_grpo_vs_start(workspace, _heldout(sft_adapter).get("eval_id"), candidate_eval))
    return candidate, candidate_eval


def _read_start(s: PipelineSettings, sft_adapter: str | None, workspace: Any, sink: EventSink,
                result: PipelineResult) -> Contender:
    """GRPO's start (the SFT adapter, else the base model) on the selection split, as its own stage."""
    t0 = time.perf_counter()
    adapter = ["--adapter", sft_adapter] if sft_adapter else []
    read = _eval_stage(s, workspace, sink, s.pack, SELECTION_SPLIT, *adapter)
    _timed(result, f"start on {SELECTION_SPLIT}", t0)
    return Contender("the start", sft_adapter, read.metrics.get("execution_success_rate") or 0.0,
                     read.metrics.get("unsafe_action_rate") or 0.0)


def _read_on_val(s: PipelineSettings, adapter: str, workspace: Any, sink: EventSink, result: PipelineResult) -> str:
    """The picked checkpoint's held-out eval, as its own stage; returns its eval id."""
    t0 = time.perf_counter()
    read = _eval_stage(s, workspace, sink, s.pack, "val", "--adapter", adapter)
    _timed(result, "candidate on val", t0)
    result.lines.append(f"candidate {adapter}: held-out success {read.metrics['execution_success_rate']:.1%} "
                        f"on val ({result.stages_s['candidate on val']:.0f}s)")
    return read.eval_id


def _grpo_vs_start(workspace: Any, start_eval: str | None, grpo_eval: str | None) -> list[str]:
    """Did GRPO itself help? Its held-out eval against its SFT start's, paired by task."""
    from appliance.evaluate.stored import compare_stored

    if not start_eval or not grpo_eval:
        return []
    delta = compare_stored(workspace, start_eval, grpo_eval)["success"]
    if not delta.n_tasks:
        return []
    return [f"GRPO vs its SFT start: {delta.delta * 100:+.1f} points on held-out success "
            f"({delta.confidence:.0%} interval {delta.low * 100:+.1f} … {delta.high * 100:+.1f}, "
            f"{delta.sample}): {delta.verdict}"]


def _heldout(adapter: str) -> dict[str, Any]:
    """The held-out eval recorded in a checkpoint's manifest ({} if none)."""
    from appliance.checkpoints import load_manifest

    return load_manifest(adapter).get("metrics", {}).get("heldout") or {}


def _heldout_line(adapter: str) -> str:
    from appliance.checkpoints import load_manifest
    from appliance.report import scores_line

    return scores_line(load_manifest(adapter))


def _promote(s: PipelineSettings, adapter: str, workspace: Any, sink: EventSink, result: PipelineResult,
             reuse: dict[str, str]) -> None:
    """The gate: its evals beyond the held-out split (BFCL's) run first as stages of their own, so their
    threads wait as every stage's do; then it reads the stored evals and decides."""
    from appliance.promotion import GateSettings, gate_baseline, gate_evals, promote

    t0 = time.perf_counter()
    settings = GateSettings(limit=s.eval_limit, strict=s.strict)
    reuse = dict(reuse)
    plan = gate_evals(adapter, gate_baseline(s.checkpoints_root), pack=s.pack, tasks_root=s.tasks_root, s=settings)
    for key, (side, pack, split) in plan.items():
        reuse[key] = _eval_stage(s, workspace, sink, pack, split, *(["--adapter", side] if side else [])).eval_id
    decision = promote(adapter, root=s.checkpoints_root, model=s.model, pack=s.pack, tasks_root=s.tasks_root,
                       workspace=workspace, sink=sink, settings=settings, reuse=reuse)
    _timed(result, "gate", t0)
    result.promoted, result.candidate = decision.promoted, adapter
    result.lines.append(("PROMOTED: " if decision.promoted else "NOT PROMOTED: ") + decision.summary)
    result.lines += [f"  - {r}" for r in decision.reasons]
