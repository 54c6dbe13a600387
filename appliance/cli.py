"""The `appliance` command: one front end over the engine (the TUI is the other).

Every subcommand parses its arguments here and calls one engine function in
`appliance.commands`; nothing here trains or scores. User mistakes surface as
one sentence and a non-zero exit, never a traceback (set APPLIANCE_DEBUG=1 to
see the traceback of an unexpected internal error).
"""
from __future__ import annotations

import argparse
import codecs
import math
import os
import sys
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Sequence

from appliance.cpu_waiting import wait_passively
from appliance.errors import ERROR_PREFIX, ApplianceError
from appliance.interrupts import sigterm_as_interrupt

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_NOT_PROMOTED = 3  # `appliance promote`: the gate ran and refused; its evidence is stored

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_PACK = "workplace-single"
# How much of a file `text_file` reads to tell text from a binary file.
TEXT_SNIFF_BYTES = 64 * 1024


class _Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line (exit 2), like every other user error, not a usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USER_ERROR,
                  f"{ERROR_PREFIX}{' '.join(message.split()).rstrip('.')} (see `{self.prog} --help`).\n")


# Argument types: a bad value is rejected while parsing, before anything loads, in one sentence.

def _at_least(minimum: int, text: str, kind: type) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < minimum:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {noun} of at least {minimum}, not {text!r}")
    return value


def _gate_help(name: str) -> str:
    from dataclasses import fields

    from appliance.promotion import GateSettings

    return next(f.metadata["help"] for f in fields(GateSettings) if f.name == name)


def _gate_default(name: str) -> Any:
    from appliance.promotion import GateSettings

    return getattr(GateSettings(), name)


def positive_int(text: str) -> int:
    return _at_least(1, text, int)


def non_negative_int(text: str) -> int:
    return _at_least(0, text, int)


def non_negative_float(text: str) -> float:
    return _at_least(0, text, float)


def positive_float(text: str) -> float:
    value = _at_least(0, text, float)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, not {text!r}")
    return value


def text_file(text: str) -> str:
    """An existing, readable file whose start is UTF-8 text (the reader reports the rest)."""
    path = Path(text).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; pass a file")
    try:
        with path.open("rb") as handle:
            head = handle.read(TEXT_SNIFF_BYTES)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot read {text} ({err.strerror})") from None
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a cut last character is fine
    except UnicodeDecodeError:
        head = b"\0"
    if b"\0" in head:
        raise argparse.ArgumentTypeError(f"{text} is not UTF-8 text (a binary file?)")
    return text


def new_file(text: str) -> str:
    """A file to write: its folder must exist, and it must not be a folder itself."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; pass a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {path.parent} does not exist")
    return text


def _common(p: argparse.ArgumentParser, *, events: bool = False) -> None:
    p.add_argument("--workspace", default=os.environ.get("APPLIANCE_WORKSPACE", "runs"),
                   help="run store folder (default: runs/, or $APPLIANCE_WORKSPACE)")
    p.add_argument("--tasks-root", default="tasks", help="folder that holds the task packs")
    if events:
        p.add_argument("--events", action="store_true",
                       help="print engine events as JSON lines (for the TUI and scripts)")


def _format(p: argparse.ArgumentParser, what: str = "the records") -> None:
    """--format for every command that prints records; the choices are appliance.report's."""
    from appliance.report import FORMATS

    p.add_argument("--format", choices=FORMATS, default=FORMATS[0],
                   help=f"how to print {what}: a table for a person, json or csv for a script (default: {FORMATS[0]})")


def _add_tasks(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser("tasks", help="list, check, describe and generate task packs")
    tsub = tasks.add_subparsers(dest="tasks_cmd", required=True,
                                metavar="{list,check,stats,generate,new,expand,from-failures}")
    p = tsub.add_parser("list", help="list the packs under tasks/")
    _format(p, "the packs")
    _common(p)
    p = tsub.add_parser("check", help="validate packs (schemas, expected calls, leakage, replay)")
    p.add_argument("packs", nargs="*", help="pack names or folders (default: all)")
    _common(p)
    p = tsub.add_parser("stats", help="split sizes, kinds, domains and policies of a pack")
    p.add_argument("pack", nargs="?", default=DEFAULT_PACK, help=f"pack name or folder (default: {DEFAULT_PACK})")
    _format(p, "one row per split")
    _common(p)
    p = tsub.add_parser("generate", help="regenerate the workplace packs (deterministic, seeded)")
    p.add_argument("--seed", type=int, default=0, help="generator seed: the same seed writes the same packs")
    p.add_argument("--workbench", default=None,
                   help="folder with WorkBench's data/ (default: ../shared/datasets/workbench if present)")
    _common(p)
    from appliance.userworld.cli import add_tasks_expand, add_tasks_new

    add_tasks_new(tsub)
    add_tasks_expand(tsub)
    from appliance.flywheel.cli import add_tasks_from_failures

    add_tasks_from_failures(tsub)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="score a JSONL of model outputs against a pack split and store the verdicts")
    p.add_argument("outputs", type=text_file, help="JSONL with fields task_id and output (or completion)")
    p.add_argument("--pack", default=DEFAULT_PACK, help=f"task pack the outputs answer (default: {DEFAULT_PACK})")
    p.add_argument("--split", default="val", help="split the task ids belong to (default: val)")
    p.add_argument("--reward", default=None, help="reward scheme (default: the pack's)")
    _format(p, "the summary")
    _common(p)


def _add_sql(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sql", help="query the run store with DuckDB SQL (no query: interactive prompt)")
    p.add_argument("query", nargs="?", help="one SQL query; omit for an interactive prompt")
    _format(p, "the result rows")
    p.add_argument("--max-rows", type=positive_int, default=200, help="rows shown in a table (default: 200)")
    _common(p)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    """Every default and help string comes from EvalSettings, which the cockpit reads too."""
    from dataclasses import fields

    from appliance.evaluate.runner import EvalSettings

    spec = {f.name: f for f in fields(EvalSettings)}

    def option(flag: str, name: str, **kwargs) -> None:
        p.add_argument(flag, dest=name, default=spec[name].default, help=spec[name].metadata["help"], **kwargs)

    p = sub.add_parser("eval", help="evaluate a model (and adapter) on a pack split; `eval compare A B` compares two")
    p.add_argument("compare", nargs="*", help="`compare EVAL_A EVAL_B` to compare two stored evals")
    option("--model", "model")
    option("--adapter", "adapter")
    option("--pack", "pack")
    option("--split", "split")
    option("-k", "k", type=positive_int)
    option("--limit", "limit", type=non_negative_int)
    option("--temperature", "temperature", type=non_negative_float)
    option("--max-new-tokens", "max_new_tokens", type=positive_int)
    option("--batch-size", "batch_size", type=positive_int)
    option("--backend", "backend", choices=["auto", "hf", "vllm"])
    option("--seed", "seed", type=int)
    option("--strict", "strict", action=argparse.BooleanOptionalAction)
    _format(p, "the eval's metrics, or `eval compare`'s deltas")
    _common(p, events=True)


def _add_audit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("audit", help="audit the reward: label a stratified sample of eval outputs agree/disagree")
    p.add_argument("--eval", dest="eval_id", default=None, help="eval id (default: the latest eval)")
    p.add_argument("-n", type=positive_int, default=64, help="sample size")
    p.add_argument("--labels", type=text_file, default=None,
                   help="non-interactive: JSONL of {task_id, sample_index, label: agree|disagree, note} to record")
    p.add_argument("--export", type=new_file, default=None, help="write disagreements as JSONL to this file")
    p.add_argument("--seed", type=int, default=0, help="seed of the stratified sample")
    _common(p)


# (flag, TrainConfig field, type, the stage it belongs to or None for both); help and defaults come from the field.
_TRAIN_FLAGS = (  # (flag, TrainConfig field, type, the stages that take it; None = every stage)
    ("--model", "model", str, None), ("--pack", "pack", str, None), ("--backend", "backend", str, None),
    ("--steps", "steps", int, None), ("--lr", "learning_rate", float, None),
    ("--optimizer", "optimizer", str, None), ("--lora-r", "lora_r", int, None),
    ("--lora-layers", "lora_layers", int, None), ("--lora-targets", "lora_targets", str, None),
    ("--eval-every", "eval_every", int, None),
    ("--eval-limit", "eval_limit", int, None), ("--fit-limit", "fit_limit", int, None),
    ("--init-adapter", "init_adapter", str, None), ("--resume", "resume_from", str, None),
    ("--checkpoints", "output", str, None), ("--seed", "seed", int, None),
    ("--train-split", "train_split", str, None), ("--eval-split", "eval_split", str, None),
    ("--epochs", "epochs", float, ("sft",)), ("--policy-checks", "policy_checks", bool, ("sft",)),
    ("--time-checks", "time_checks", bool, ("sft",)),
    ("--missing-tool-share", "missing_tool_share", float, ("sft",)),
    ("--missing-tool-listing", "missing_tool_listing", str, ("sft", "dpo")),
    ("--decision-weight", "decision_weight", float, ("sft",)),
    ("--batch-size", "batch_size", int, ("sft", "dpo")),
    ("--batch-order", "batch_order", str, ("sft",)),
    ("--preset", "preset", str, ("grpo",)), ("--num-generations", "num_generations", int, ("grpo",)),
    ("--prompts-per-step", "prompts_per_step", int, ("grpo",)),
    ("--max-completion-tokens", "max_completion_tokens", int, ("grpo",)),
    ("--temperature", "temperature", float, ("grpo",)), ("--beta", "beta", float, ("grpo", "dpo")),
    ("--reward", "reward", str, ("grpo",)), ("--scale-rewards", "scale_rewards", str, ("grpo",)),
    ("--task-selection", "task_selection", str, ("grpo",)),
    ("--screen-limit", "screen_limit", int, ("grpo",)),
    ("--max-no-call-share", "max_no_call_share", float, ("grpo",)),
    ("--guide-failed-groups", "guide_failed_groups", bool, ("grpo",)),
    ("--keep-decisions", "keep_decisions", bool, ("grpo",)),
    ("--positive-only", "positive_only", bool, ("grpo",)),
    ("--negatives-at-divergence", "negatives_at_divergence", bool, ("grpo",)),
    ("--negatives-without-copies", "negatives_without_copies", bool, ("grpo",)),
    ("--shared-prefixes-once", "shared_prefixes_once", bool, ("grpo",)),
    ("--resample-flat-groups", "resample_flat_groups", int, ("grpo",)),
    ("--strict", "strict", bool, None),
    ("--sft-anchor", "sft_anchor", float, ("grpo",)), ("--sft-anchor-batch", "sft_anchor_batch", int, ("grpo",)),
    ("--pairs-source", "pairs_source", str, ("dpo",)),
    ("--pairs-from", "pairs_from", str, ("dpo",)), ("--pairs-per-task", "pairs_per_task", int, ("dpo",)),
    ("--min-pairs", "min_pairs", int, ("dpo",)), ("--reference-pairs", "reference_pairs", bool, ("dpo",)),
    ("--rpo-alpha", "rpo_alpha", float, ("dpo",)),
    ("--reject-first-difference", "reject_first_difference", bool, ("dpo",)),
    ("--decision-only", "decision_only", bool, ("dpo",)),
    ("--successes-from", "successes_from", str, ("sft",)),
)
# What each stage trains on, for its help line.
_STAGE_HELP = {"sft": "SFT with LoRA on the pack's `train` split",
               "grpo": "GRPO with LoRA on the pack's `train_rl` (or `train`) split",
               "dpo": "DPO with LoRA on pairs of the pack's `train` tasks (stored samples, or its answers in two "
                      "listings)"}


def train_flag(field_name: str) -> str:
    """The `appliance train` flag that sets a TrainConfig field (the cockpit builds its commands with it)."""
    return next(flag for flag, name, _, _ in _TRAIN_FLAGS if name == field_name)


def train_flag_stages(field_name: str) -> tuple[str, ...]:
    """The kinds of `appliance train` run that take the flag of a TrainConfig field (the cockpit greys the rest)."""
    from appliance.train.config import STAGES

    return next(stages or STAGES for _, name, _, stages in _TRAIN_FLAGS if name == field_name)


def _train_choices() -> dict[str, list[str]]:
    from appliance.packs.manifest import EVAL_SPLITS, TRAIN_SPLITS
    from appliance.rewards import SCHEMES
    from appliance.train.config import BACKENDS, OPTIMIZERS, PAIR_SOURCES, REWARD_SCALINGS, TASK_SELECTIONS
    from appliance.train.presets import PRESETS

    return {"backend": list(BACKENDS), "train_split": list(TRAIN_SPLITS), "eval_split": list(EVAL_SPLITS),
            "preset": list(PRESETS), "reward": list(SCHEMES), "task_selection": list(TASK_SELECTIONS),
            "scale_rewards": list(REWARD_SCALINGS), "optimizer": list(OPTIMIZERS),
            "pairs_source": list(PAIR_SOURCES)}


def _add_train(sub: argparse._SubParsersAction) -> None:
    """Every flag is a TrainConfig field: its help text is the field's, and the default shown is the field's."""
    from dataclasses import MISSING, fields

    from appliance.train.config import STAGES, TrainConfig

    spec = {f.name: f for f in fields(TrainConfig)}
    choices = _train_choices()
    train = sub.add_parser("train", help="LoRA training: `train sft`, `train grpo` or `train dpo`")
    tsub = train.add_subparsers(dest="stage", required=True, metavar="{" + ",".join(STAGES) + "}")
    for stage in STAGES:
        p = tsub.add_parser(stage, help=_STAGE_HELP[stage])
        p.add_argument("--config", default=None, help="JSON run config to start from (flags override it)")
        for flag, name, kind, only in _TRAIN_FLAGS:
            if only is not None and stage not in only:
                continue
            default = spec[name].default if spec[name].default is not MISSING else None
            shown = "the stage's" if name in ("learning_rate", "beta") else default
            # None: keep the value from --config / the resumed run / TrainConfig's default.
            if kind is bool:  # --flag / --no-flag
                p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=f"{spec[name].metadata['help']} (default: {shown})")
                continue
            p.add_argument(flag, dest=name, type=kind, default=None, choices=choices.get(name),
                           metavar=None if name in choices else name.upper(),
                           help=f"{spec[name].metadata['help']} (default: {shown})")
        _common(p, events=True)


def _root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="checkpoints",
                   help="checkpoint registry the adapters live in (default: checkpoints)")


def _checkpoint(p: argparse.ArgumentParser, dest: str = "checkpoint", what: str = "the checkpoint") -> None:
    p.add_argument(dest, help=f"{what}: a step folder, as a path or relative to --root (e.g. <run>/step-00150)")


def _add_checkpoints(sub: argparse._SubParsersAction) -> None:
    ck = sub.add_parser("checkpoints", help="list, show and diff versioned adapters")
    csub = ck.add_subparsers(dest="ck_cmd", required=True, metavar="{list,show,diff}")
    p = csub.add_parser("list", help="every checkpoint, oldest first, and which one is promoted")
    _root(p)
    _format(p, "the checkpoints")
    p = csub.add_parser("show", help="a checkpoint's manifest: what produced it and its metrics")
    _checkpoint(p)
    _root(p)
    _format(p, "the manifest")
    p = csub.add_parser("diff", help="the manifest fields that differ between two checkpoints")
    _checkpoint(p, "a", "the first checkpoint")
    _checkpoint(p, "b", "the second checkpoint")
    _root(p)
    _format(p, "the changed fields")

    p = sub.add_parser("promote", help="promote a checkpoint if it beats the baseline without regressions "
                                       f"(exit {EXIT_NOT_PROMOTED} when the gate refuses it)")
    _checkpoint(p)
    _root(p)
    p.add_argument("--model", default=None, help="base model (default: the one in the checkpoint's manifest)")
    p.add_argument("--pack", default=None, help="task pack (default: the one the checkpoint was trained on)")
    p.add_argument("--limit", type=positive_int, default=None, help=_gate_help("limit"))
    p.add_argument("--strict", action=argparse.BooleanOptionalAction, default=_gate_default("strict"),
                   help=_gate_help("strict"))
    _common(p, events=True)
    p = sub.add_parser("rollback", help="return to the previously promoted adapter")
    _root(p)
    _common(p)
    p = sub.add_parser("export", help="write an adapter merged into its base model as safetensors")
    _checkpoint(p)
    p.add_argument("--merged", required=True, metavar="OUT", help="output folder")
    p.add_argument("--force", action="store_true",
                   help="write into OUT even if it already holds files (otherwise: refused, or asked on a terminal)")
    _root(p)


# (flag, PipelineSettings field, type); defaults and help come from the field.
_RUN_FLAGS = (
    ("--model", "model", str), ("--pack", "pack", str), ("--quick", "quick", bool),
    ("--baseline-only", "baseline_only", bool), ("--checkpoints", "checkpoints_root", str),
    ("--baseline-k", "baseline_k", positive_int), ("--eval-limit", "eval_limit", positive_int),
    ("--sft-steps", "sft_steps", positive_int), ("--sft-passes", "sft_passes", positive_float),
    ("--sft-batch-size", "sft_batch_size", positive_int),
    ("--sft-missing-tool-share", "sft_missing_tool_share", float),
    ("--sft-missing-tool-listing", "sft_missing_tool_listing", str),
    ("--sft-batch-order", "sft_batch_order", str),
    ("--grpo-steps", "grpo_steps", positive_int), ("--grpo-select-every", "grpo_select_every", non_negative_int),
    ("--strict", "strict", bool),
)


def _add_run(sub: argparse._SubParsersAction) -> None:
    from dataclasses import MISSING, fields

    from appliance.pipeline import PipelineSettings

    spec = {f.name: f for f in fields(PipelineSettings)}
    p = sub.add_parser("run", help="the whole workflow: baseline → decide → SFT → GRPO → eval → promote")
    for flag, name, kind in _RUN_FLAGS:
        default = spec[name].default if spec[name].default is not MISSING else None
        help_text = spec[name].metadata["help"]
        if kind is bool:  # --flag / --no-flag, from the field's default
            p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=default,
                           help=f"{help_text} (default: {default})")
        else:
            shown = "" if default is None else f" (default: {default})"
            p.add_argument(flag, dest=name, type=kind, default=default, help=help_text + shown)
    _common(p, events=True)


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    from appliance import doctor, gpu_smoke

    p = sub.add_parser("doctor", help="hardware, library versions and which backend will be used")
    p.add_argument("--json", action="store_true", help="one JSON object (for the TUI)")
    p.add_argument("--gpu-smoke", action="store_true",
                   help="GPU self-check, each part in its own process within "
                        f"{doctor.TOTAL_BUDGET_S // 60} minutes: 4-bit load → 2 GRPO steps → save → sampling; "
                        "prints step time, peak VRAM and tokens/s")
    p.add_argument("--part", choices=["all", *gpu_smoke.PARTS], default="all",
                   help="run one part of the GPU smoke (a machine may lack vLLM); with `all`, a part whose "
                        "library is missing is skipped")
    p.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                   help="with --gpu-smoke on a machine without network: install the .whl files in DIR offline "
                        f"into a scratch folder only the smoke uses (bring: {' '.join(doctor.WHEELS_TO_BRING)})")
    p.add_argument("--shape", choices=gpu_smoke.SHAPES, default=gpu_smoke.SHAPES[0],
                   help="the random model the smoke builds from a config: a tiny Llama, or a Qwen2 with "
                        "Qwen2.5-1.5B's dimensions (real step time and VRAM)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="appliance",
        description="The RL appliance: baseline → verify → SFT/GRPO with LoRA → held-out eval → promote. "
                    "Run with no arguments in a terminal to open the cockpit.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("ui", help="open the Textual cockpit (the default in a terminal)")
    _common(p)
    p.add_argument("--pack", default=DEFAULT_PACK, help=f"the pack the cockpit opens on (default: {DEFAULT_PACK})")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"the base model it evaluates and trains (default: {DEFAULT_MODEL})")
    for add in (_add_tasks, _add_verify, _add_sql, _add_eval, _add_audit, _add_train,
                _add_checkpoints, _add_run, _add_doctor):
        add(sub)
    from appliance.flywheel.cli import add_serve, add_trajectories

    add_serve(sub)
    add_trajectories(sub)
    from appliance.recipe.cli import add_export_recipe

    add_export_recipe(sub)
    return parser


def _handler(command: str) -> Callable[[argparse.Namespace], int]:
    from appliance import commands

    return getattr(commands, f"cmd_{command}")


def main(argv: Sequence[str] | None = None) -> int:
    # Before torch loads: OpenMP's default spin-waiting makes 2 threads on a shared 2-core machine
    # 5-20x slower (measured in bench/bench_generate.py); passive waiting removes that cliff. A pipeline
    # stage alone on the machine spins briefly instead (appliance.cpu_waiting).
    wait_passively()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if sys.stdin.isatty() and sys.stdout.isatty():
            args = parser.parse_args(["ui"])
        else:
            parser.print_help()
            return 0
    try:
        # `kill` ends a command as Ctrl-C does: what finished is stored, the run is marked interrupted, and
        # `appliance run` hands it on to its running stage. Textual keeps its own signal handling.
        with sigterm_as_interrupt() if args.command != "ui" else nullcontext():
            return int(_handler(args.command)(args) or 0)
    except ApplianceError as err:
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted: finished work was kept.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as err:  # noqa: BLE001 - last line of defence: one sentence, no traceback
        if os.environ.get("APPLIANCE_DEBUG"):
            traceback.print_exc()
        print(f"internal error: {type(err).__name__}: {err} "
              "(set APPLIANCE_DEBUG=1 to see the traceback, and please report it).", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
