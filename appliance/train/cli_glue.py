"""From `appliance train sft|grpo|dpo` flags to a TrainConfig and a run with held-out evals."""
from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from appliance.events import EventSink
from appliance.train.common import TrainResult
from appliance.train.config import TrainConfig

# Set from the command line elsewhere (stage, workspace) or not a setting of the run's own.
_NOT_FLAGS = {"stage", "workspace"}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """Start from --config (if given), then apply every flag the person set."""
    base: dict[str, Any] = {}
    if args.config:
        base = TrainConfig.load(args.config).to_dict()
    base["stage"] = args.stage
    base["workspace"] = args.workspace
    for name in (f.name for f in fields(TrainConfig) if f.name not in _NOT_FLAGS):
        value = getattr(args, name, None)  # each --flag's dest is its TrainConfig field (appliance.cli)
        if value is not None:
            base[name] = value
    if getattr(args, "resume_from", None):
        _refuse_changed_settings(TrainConfig.from_dict(base), given=set(base) - {"stage", "workspace", "resume_from"})
    return TrainConfig.from_dict(base)


def _refuse_changed_settings(config: TrainConfig, given: set[str]) -> None:
    """A resumed run keeps its saved settings (only a larger --steps extends it); a flag that would change one
    is refused with a sentence rather than silently ignored."""
    from appliance.errors import ApplianceError
    from appliance.train.common import CONFIG_FILE, find_run_dir

    saved = TrainConfig.load(find_run_dir(config) / CONFIG_FILE)
    changed = sorted(name for name in given - {"steps"} if getattr(config, name) != getattr(saved, name))
    if changed:
        shown = ", ".join(f"{name} (saved {getattr(saved, name)!r}, given {getattr(config, name)!r})"
                          for name in changed)
        raise ApplianceError(f"--resume continues run {config.resume_from} with its saved settings and cannot change "
                             f"{shown}; drop those flags, or start a new run with --init-adapter.")


def train_from_args(args: argparse.Namespace, *, sink: EventSink, workspace: Any) -> TrainResult:
    from appliance.evaluate.heldout import make_heldout_eval
    from appliance.packs import load_pack
    from appliance.train import run_dpo, run_grpo, run_sft
    from appliance.train.common import resumed_config

    config = config_from_args(args)
    effective = resumed_config(config)  # a resumed run trains and evaluates its own model and pack
    pack = load_pack(effective.pack, root=args.tasks_root)
    on_eval = make_heldout_eval(model=effective.model, pack=effective.pack, workspace=workspace,
                                split=effective.eval_split, tasks_root=args.tasks_root, sink=sink,
                                limit=effective.eval_limit or None, strict=effective.strict,
                                fit_split=effective.training_split(pack), fit_limit=effective.fit_limit)
    runner = {"sft": run_sft, "grpo": run_grpo, "dpo": run_dpo}[config.stage]
    return runner(config, sink=sink, on_eval=on_eval, workspace=workspace, pack=pack)
