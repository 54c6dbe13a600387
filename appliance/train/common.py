"""What SFT, GRPO and DPO runs share: the run folder, the store, resume, checkpoints, OOM advice, the result.

A run lives in three places:
    runs/<run_id>/config.json          the TrainConfig (also in every checkpoint manifest)
    runs/<run_id>/trainer/checkpoint-N TRL/transformers checkpoints: adapter + optimizer + RNG state (resume)
    checkpoints/<run_id>/step-NNNNN/   the registry copy: PEFT adapter + manifest (eval, promote, serve)
and in the store (runs/, DuckDB views over parquet): runs, rollouts, checkpoints, alarms rows.
"""
from __future__ import annotations

import dataclasses
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import checkpoints as registry
from ..errors import ApplianceError
from ..events import Alarm, CheckpointSaved, Event, EventSink, Log, RunFailed, RunFinished, RunStarted
from .alarms import check_reward_hacking
from .backends import get_backend, pick_backend
from .config import TrainConfig
from .versions import check_versions

CONFIG_FILE = "config.json"
TRAINER_DIR = "trainer"
HELDOUT_KEYS = ("heldout_success", "success_rate", "success")
# Batches padded to a multiple of this, so a run meets a few shapes rather than one per batch: CPU kernels (bf16's,
# oneDNN's) are built and cached per shape, which made SFT's steps slow and made a DPO run's memory grow with every
# new length (tiny model, 40 steps: malloc'd memory 253 → 815 MB unpadded, flat at 180-192 MB at one shape;
# docs/learning.md, session 51).
PAD_TO_MULTIPLE_OF = 128


@dataclass
class TrainResult:
    run_id: str
    stage: str
    checkpoints: list[str]
    final_adapter: str | None
    metrics_history: list[dict[str, float]]
    wall_time_s: float
    run_dir: str
    resumed_from_step: int = 0


@dataclass
class RunContext:
    config: TrainConfig
    run_id: str
    run_dir: Path
    workspace: Any
    writer: Any
    backend: Any
    sink: EventSink
    pack: Any
    resume_checkpoint: Path | None = None
    resume_step: int = 0
    base_model: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    checkpoint_points: list[dict[str, Any]] = field(default_factory=list)
    saved: list[registry.Checkpoint] = field(default_factory=list)
    alarmed: bool = False
    # Settings the backend actually uses where they differ from, or add to, the config (settings_in_force).
    in_force: dict[str, Any] = field(default_factory=dict)

    @property
    def trainer_dir(self) -> Path:
        return self.run_dir / TRAINER_DIR

    def emit(self, event: Event) -> None:
        self.sink(event)
        if self.writer is not None:
            self.writer.record(event)

    # -- checkpoints ------------------------------------------------------------------------

    def parent_id(self) -> str | None:
        if self.saved:
            return self.saved[-1].id
        previous = registry.latest_checkpoint(self.config.output, self.run_id)
        if previous is not None:
            return previous.id
        if self.config.init_adapter:
            try:
                return registry.load_checkpoint(self.config.init_adapter).id
            except ApplianceError:
                return str(self.config.init_adapter)
        return None

    def _eval_context(self, model: Any) -> dict[str, Any]:
        """on_eval's keyword arguments: this run's id, and the model when it carries a colocated vLLM
        engine, so a held-out eval never starts a second one. An Unsloth model loaded without vLLM
        (SFT) has `fast_generate` too, but no engine (appliance.generate.vllm.colocated_engine)."""
        from ..generate.vllm import colocated_engine

        context: dict[str, Any] = {"run_id": self.run_id}
        if colocated_engine(model) is not None:
            context["engine"] = model
        return context

    def save_checkpoint(self, model: Any, step: int, train_metrics: dict[str, float],
                        on_eval: Callable[..., dict] | None) -> registry.Checkpoint:
        manifest = {
            "run_id": self.run_id, "step": step, "stage": self.config.stage, "base_model": self.base_model,
            "pack": {"name": self.pack.name, "data_hash": self.pack.data_hash()},
            "config": self.config.to_dict(), **({"in_force": self.in_force} if self.in_force else {}),
            "parent": self.parent_id(), "answer_tokens": self.config.answer_budget(),
            "metrics": {"train": train_metrics},
        }
        with tempfile.TemporaryDirectory(prefix="adapter-", dir=self.run_dir) as tmp:
            self.backend.save_adapter(model, tmp)
            ckpt = registry.save_checkpoint(self.config.output, tmp, manifest)
        if on_eval is not None:
            with random_state_kept():
                heldout = dict(on_eval(str(ckpt.path), step, **self._eval_context(model)) or {})
            fit = heldout.pop("fit", None)  # the run's own training tasks: not a held-out number
            manifest["metrics"]["heldout"] = heldout
            if fit:
                manifest["metrics"]["fit"] = fit
            ckpt = registry.Checkpoint(ckpt.path, manifest)
            registry._atomic_write_json(ckpt.path / registry.MANIFEST, manifest)
        self.saved.append(ckpt)
        registry.record_in_store(self.workspace, ckpt)
        metrics = manifest["metrics"]
        flat = {**{f"train/{k}": v for k, v in train_metrics.items()},
                **_numbers("heldout", metrics.get("heldout")), **_numbers("fit", metrics.get("fit"))}
        self.emit(CheckpointSaved(run_id=self.run_id, step=step, path=str(ckpt.path), metrics=flat))
        self._check_alarms(step, train_metrics, manifest["metrics"].get("heldout") or {})
        return ckpt

    def _check_alarms(self, step: int, train: dict[str, float], heldout: dict[str, Any]) -> None:
        point = {"step": step, "train_reward": train.get("reward/mean"),
                 "shaped_reward": train.get("reward/mean"), "strict_success": train.get("train/success_rate"),
                 "heldout_success": next((heldout[k] for k in HELDOUT_KEYS if k in heldout), None)}
        self.checkpoint_points.append(point)
        alarm = check_reward_hacking(self.checkpoint_points, run_id=self.run_id)
        if alarm is not None and not self.alarmed:  # one alarm per run; the history keeps growing
            self.alarmed = True
            self.raise_alarm(alarm)

    def raise_alarm(self, alarm: Alarm) -> None:
        self.sink(alarm)
        if self.writer is not None:
            self.writer.record(alarm)
            self.writer.alarm(alarm.kind, alarm.message, step=alarm.step)


@contextmanager
def random_state_kept() -> Iterator[None]:
    """Run a block without moving the process's random streams (Python's, NumPy's, torch's on the CPU and each
    GPU). A checkpoint's eval between training steps loads an adapter and seeds its sampling; the steps after it
    must draw what they would have drawn without it, or `--eval-every` changes the adapter a run trains
    (docs/learning.md, session 54: a dev eval at GRPO's step 5 changed the samples of steps 6-15)."""
    import random

    import numpy as np
    import torch

    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _numbers(prefix: str, values: dict[str, Any] | None) -> dict[str, float]:
    """The numeric entries of a manifest's metrics block, as `prefix/name` event metrics."""
    return {f"{prefix}/{k}": v for k, v in (values or {}).items() if isinstance(v, (int, float))}


# ---------------------------------------------------------------- starting and finishing

def find_run_dir(config: TrainConfig) -> Path:
    given = Path(str(config.resume_from))
    for candidate in (given, Path(config.workspace) / str(config.resume_from)):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    raise ApplianceError(f"No run {config.resume_from!r} under {config.workspace}/ to resume; "
                         f"check the run id (appliance runs lists them).")


def last_trainer_checkpoint(trainer_dir: Path) -> tuple[Path | None, int]:
    found = []
    for folder in trainer_dir.glob("checkpoint-*") if trainer_dir.is_dir() else []:
        match = re.fullmatch(r"checkpoint-(\d+)", folder.name)
        if match and (folder / "trainer_state.json").is_file():
            found.append((int(match.group(1)), folder))
    if not found:
        return None, 0
    step, folder = max(found)
    return folder, step


def kept_selection(run: "RunContext", filename: str, chosen: Any, load: Callable[[Path], Any],
                   select: Callable[[], Any]) -> Any:
    """The stored samples a run trains on (DPO's pairs, expert iteration's rows), saved as runs/<run_id>/<filename>
    and announced in the log: `chosen` if the caller selected them before the run started, the saved ones for a
    resumed run (it trains on what it started with), else `select()`."""
    path = run.run_dir / filename
    if chosen is None and path.is_file():
        chosen = load(run.run_dir)
    else:
        chosen = chosen or select()
        registry._atomic_write_json(path, chosen.to_dict())
    run.emit(Log(run_id=run.run_id, message=chosen.summary()))
    return chosen


def _open_workspace(path: str) -> Any:
    from ..store import Workspace

    return Workspace.open(path)


def _load_pack(name: str) -> Any:
    from ..packs import load_pack

    return load_pack(name)


def _describe_base_model(spec: str) -> dict[str, Any]:
    from ..models import local_model_dir, resolve_model

    ref = resolve_model(spec)
    info: dict[str, Any] = {"id": ref.id, "source": ref.source}
    try:
        path = local_model_dir(ref)
        info["path"] = str(path)
        info["hash"] = registry.base_model_hash(path)
    except Exception as err:  # a hub model not downloaded yet: identify it by id only
        info["hash"] = None
        info["hash_error"] = str(err)
    return info


def resumed_config(config: TrainConfig) -> TrainConfig:
    """For --resume: the saved config wins (same run), except that a larger --steps extends the run."""
    if not config.resume_from:
        return config
    saved = TrainConfig.load(find_run_dir(config) / CONFIG_FILE)
    return dataclasses.replace(saved, resume_from=config.resume_from, steps=max(saved.steps, config.steps))


IN_FORCE_FILE = "in_force.json"


def start_run(config: TrainConfig, stage: str, sink: EventSink, pack: Any = None,
              workspace: Any = None) -> RunContext:
    """Create (or reopen, for --resume) the run: folder, config, store rows, backend, pack."""
    resume_checkpoint, resume_step = None, 0
    if config.resume_from:
        run_dir = find_run_dir(config)
        config = resumed_config(config)
    else:
        config = dataclasses.replace(config, stage=stage)
    if stage == "grpo" and config.max_completion_tokens is None:  # the start's budget, saved with the run
        config = dataclasses.replace(config, max_completion_tokens=config.completion_tokens)
    # The backend first: Unsloth patches transformers/trl/peft when imported and warns that its
    # optimisations may not apply if any of them came first (unsloth/_gpu_init.py:20-21, :135-142).
    backend_name, reason = pick_backend(config.backend)
    backend = get_backend(backend_name, config)
    _quiet_libraries()
    if config.resume_from:
        resume_checkpoint, resume_step = last_trainer_checkpoint(run_dir / TRAINER_DIR)
        run_id = run_dir.name
    else:
        workspace = workspace or _open_workspace(config.workspace)
        run_id = workspace.new_id(stage)
        run_dir = Path(config.workspace) / run_id
    if config.stage != stage:
        raise ApplianceError(f"Run {run_id} is a {config.stage} run; resume it with the {config.stage} command.")
    workspace = workspace or _open_workspace(config.workspace)
    run_dir.mkdir(parents=True, exist_ok=True)
    config.save(run_dir / CONFIG_FILE)
    run = RunContext(config=config, run_id=run_id, run_dir=run_dir, workspace=workspace,
                     writer=workspace.writer(run_id), backend=backend, sink=sink,
                     pack=pack if pack is not None else _load_pack(config.pack),
                     resume_checkpoint=resume_checkpoint, resume_step=resume_step)
    run.base_model = _describe_base_model(config.model)
    run.in_force = settings_in_force(backend, config)
    if run.in_force:  # next to config.json, which stays a TrainConfig that --config and --resume can load
        registry._atomic_write_json(run_dir / IN_FORCE_FILE, run.in_force)
    # A resumed run keeps the time it first started.
    started = {} if resume_checkpoint is not None else {"started_at": time.time()}
    run.writer.update_run(kind=stage, status="running", model=config.model, adapter=config.init_adapter,
                          pack=run.pack.name, config=config.to_dict(), output_dir=str(run_dir), **started)
    run.emit(RunStarted(run_id=run_id, kind=stage, config=config.to_dict()))
    run.emit(Log(run_id=run_id, message=f"backend {backend_name}: {reason}"))
    for name, value in run.in_force.items():
        run.emit(Log(run_id=run_id, message=f"in force: {name} = {value}"))
    path = "gpu" if backend_name == "unsloth" else "cpu"
    for warning in [*check_versions(path), *filter(None, [kl_reference_warning(backend, config)])]:
        run.emit(Log(run_id=run_id, level="warning", message=warning))
    if resume_checkpoint is not None:
        run.emit(Log(run_id=run_id, message=f"resuming at step {resume_step} from {resume_checkpoint}"))
    return run


def settings_in_force(backend: Any, config: TrainConfig) -> dict[str, Any]:
    """What the backend uses for settings it may replace (e.g. Unsloth's standby memory target); {} if none."""
    describe = getattr(backend, "settings_in_force", None)
    return dict(describe(config)) if describe is not None else {}


def kl_reference_warning(backend: Any, config: TrainConfig) -> str | None:
    """A sentence when beta > 0 would pull toward the base model rather than toward init_adapter.

    TRL keeps a frozen copy of a pretrained adapter as the KL reference (trl grpo_trainer.py:455-483); a
    backend whose `kl_reference` is "base" (Unsloth, which removes that copy) measures KL against the base.
    """
    if config.stage != "grpo" or config.beta <= 0 or not config.init_adapter:
        return None
    if getattr(backend, "kl_reference", "start") != "base":
        return None
    return (f"beta={config.beta:g} on the {backend.name} backend pulls the policy toward the base model, not toward "
            f"init_adapter {config.init_adapter}: the KL term also undoes what that adapter learned. Use beta 0, "
            f"or the cpu backend to regularise toward the starting adapter.")


def oom_error(run: RunContext) -> ApplianceError:
    """Advice for an out-of-memory error, naming the settings that are in force on this backend."""
    config = run.config
    if config.stage == "grpo":
        knobs = [f"max_completion_tokens ({config.completion_tokens})",
                 f"num_generations ({config.num_generations})", f"prompts_per_step ({config.prompts_per_step})"]
    else:
        knobs = [f"batch_size ({config.batch_size})", f"max_seq_length ({config.max_seq_length})"]
    more = getattr(run.backend, "memory_knobs", None)
    knobs += list(more(config)) if more is not None else []
    return ApplianceError(
        f"Out of memory: start a new run with a smaller model or a lower {', '.join(knobs)} (--init-adapter with "
        f"this run's last checkpoint keeps what it learned); --resume {run.run_id} keeps this run's settings.")


def _quiet_libraries() -> None:
    """No per-dataset-pass and weight-loading bars: our events report progress, the bars only clutter stderr."""
    import datasets
    from transformers.utils import logging as transformers_logging

    datasets.disable_progress_bars()
    transformers_logging.disable_progress_bar()


def _quiet(trainer: Any) -> None:
    """Drop transformers' stdout printer: a child process's stdout carries only our events."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)


def train_with_guard(run: RunContext, trainer: Any) -> None:
    """trainer.train (resuming when asked), turning OOM into advice and recording failure."""
    _quiet(trainer)
    try:
        trainer.train(resume_from_checkpoint=str(run.resume_checkpoint) if run.resume_checkpoint else None)
    except BaseException as err:
        if run.backend.is_out_of_memory(err):
            err = oom_error(run)
        fail_run(run, err)
        if isinstance(err, ApplianceError):
            raise err from None
        raise


def training_split_or_fail(run: RunContext) -> str:
    """The split the run trains on (TrainConfig.training_split), checked against the pack before any model loads."""
    split = run.config.training_split(run.pack)
    if split not in run.pack.splits or not run.pack.tasks(split):
        raise fail_run(run, ApplianceError(
            f"pack '{run.pack.name}' has no tasks in a '{split}' split to train on; it has "
            f"{', '.join(run.pack.splits)}."))
    return split


def refuse_options_of_our_trainer(run: RunContext, options: tuple[tuple[str, str, str | None, str], ...]) -> None:
    """Refuse, before the model loads, an option of ours the pack or the backend cannot take (one sentence).

    `options` rows are (TrainConfig field, backend capability, why a multi-turn pack cannot take it or None,
    what the backend lacks); an option is in use when its value differs from TrainConfig's default.
    """
    from .multiturn import is_multi_turn

    for name, capability, not_multi_turn, backend_lacks in options:
        if not option_in_use(run.config, name):
            continue
        if not_multi_turn and is_multi_turn(run.pack):
            raise fail_run(run, ApplianceError(
                f"{name} needs a single-turn pack; {run.pack.name} runs multi-turn episodes, {not_multi_turn}."))
        if not getattr(run.backend, capability, False):
            raise fail_run(run, ApplianceError(
                f"{name} is not available on the {run.backend.name} backend yet{backend_lacks}; use --backend cpu "
                "or leave it off."))


_TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def option_in_use(config: TrainConfig, name: str) -> bool:
    """Whether `config` sets the field `name` away from TrainConfig's default."""
    return getattr(config, name) != _TRAIN_DEFAULTS[name]


def fail_run(run: RunContext, err: BaseException) -> BaseException:
    """Record a run as failed (or stopped, for Ctrl-C) in the store and as an event; returns `err` to raise."""
    stopped = isinstance(err, KeyboardInterrupt)
    # An interrupt carries no text; say what happened rather than print an empty `failed:` line.
    message = "stopped by an interrupt (Ctrl-C or kill) before the run finished" if stopped else str(err)
    run.writer.update_run(status="stopped" if stopped else "failed", error=message[:500], finished_at=time.time())
    run.emit(RunFailed(run_id=run.run_id, error=message))
    return err


def finish_run(run: RunContext, started: float) -> TrainResult:
    final = run.saved[-1] if run.saved else registry.latest_checkpoint(run.config.output, run.run_id)
    result = TrainResult(run_id=run.run_id, stage=run.config.stage,
                         checkpoints=[str(c.path) for c in registry.list_checkpoints(run.config.output, run.run_id)],
                         final_adapter=str(final.path) if final else None, metrics_history=run.history,
                         wall_time_s=time.perf_counter() - started, run_dir=str(run.run_dir),
                         resumed_from_step=run.resume_step)
    run.writer.update_run(status="finished", finished_at=time.time())
    run.emit(RunFinished(run_id=run.run_id, summary={
        "final_adapter": result.final_adapter, "steps": run.config.steps, "wall_time_s": result.wall_time_s,
        "checkpoints": len(result.checkpoints)}))
    return result


# Set on every run, because importing Unsloth changes their defaults (unsloth models/rl.py:3310-3341:
# weight_decay 0.001, warmup_steps 0.1, logging_nan_inf_filter False); these are transformers'
# own defaults (training_args.py), what the CPU path was measured with, except the NaN filter:
# a NaN or infinite loss is logged as it is on both backends, never replaced by the running mean.
# Unsloth's other replacements are set per run below or by a backend (seed, lr, batch sizes,
# optim, bf16/fp16, report_to) or only move memory and speed (torch_empty_cache_steps,
# dataloader_pin_memory, padding_free, the eval-only batch sizes).
FIXED_TRAINER_ARGS: dict[str, Any] = {
    "weight_decay": 0.0,
    "warmup_steps": 0,
    "logging_nan_inf_filter": False,
    "auto_find_batch_size": False,
}


def trainer_args(config: TrainConfig, run: RunContext) -> dict[str, Any]:
    """TrainingArguments shared by SFTConfig, GRPOConfig and DPOConfig."""
    return {
        **FIXED_TRAINER_ARGS,
        "output_dir": str(run.trainer_dir),
        "max_steps": config.steps,
        "learning_rate": config.effective_learning_rate,
        **optimizer_args(config),
        "gradient_accumulation_steps": 1,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": config.eval_every,
        "save_total_limit": 2,  # optimizer state for resume; the registry keeps every adapter
        "seed": config.seed,
        "data_seed": config.seed,
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def optimizer_args(config: TrainConfig) -> dict[str, Any]:
    """TrainingArguments' `optim` for a config that asks for SGD; AdamW is each backend's own default."""
    return {"optim": "sgd"} if config.optimizer == "sgd" else {}


def tools_shown(pack: Any, task: Any) -> list[dict[str, Any]]:
    """The tools listed in `task`'s prompt: the pack's choice for the task when it makes one, else all of them."""
    tools_for = getattr(pack, "tools_for", None)
    return tools_for(task) if tools_for is not None else pack.tools


def listing_without_called(pack: Any, task: Any, listing: str = "own") -> list[dict[str, Any]]:
    """The listing of `task` with every tool it calls left out: its own (`own`) or another domain's (`other`,
    Pack.other_domain_tools). What SFT's missing-tool rows and DPO's listing pairs show with a decline."""
    called = {call.name for call in task.expected}
    shown = pack.other_domain_tools(task) if listing == "other" else tools_shown(pack, task)
    return [tool for tool in shown if tool["function"]["name"] not in called]


def refuse_other_listing_without_domains(config: Any, pack: Any) -> None:
    """Refuse `missing_tool_listing = "other"` for a pack that does not list tools by domain, before the run."""
    if config.lists_other_domain and not pack.lists_tools_by_domain:
        raise ApplianceError(f"missing_tool_listing 'other' shows another domain's tools; pack '{pack.name}' "
                             f"does not list its tools by domain (use --missing-tool-listing own).")


def prompt_for(pack: Any, tokenizer: Any, task: Any, tools: list[dict[str, Any]] | None = None) -> str:
    """The exact prompt eval uses (appliance.evaluate renders it the same way); `tools` replaces the listing."""
    from ..prompting import render_prompt

    listing = tools_shown(pack, task) if tools is None else tools
    return render_prompt(tokenizer, pack.system_prompt, list(task.messages), listing)
