"""`appliance export-recipe RUN_OR_CONFIG --engine trl --out DIR`: the parser and its handler."""
from __future__ import annotations

import argparse

from .export import DEFAULT_GPUS, DEFAULT_STRATEGY, DEFAULT_VLLM_GPUS, STRATEGIES

ENGINES = ("trl",)


def add_export_recipe(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-recipe", help="write a multi-GPU launch of a GRPO run on TRL (script, "
                                             "accelerate config, command lines)")
    p.add_argument("source", metavar="RUN_OR_CONFIG", help="a run id, a run folder or a config.json")
    p.add_argument("--engine", choices=ENGINES, default="trl", help="training engine to launch on (default: trl)")
    p.add_argument("--out", required=True, help="folder to write the recipe into")
    p.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help=f"accelerate config the command lines use (default: {DEFAULT_STRATEGY}; all are written)")
    p.add_argument("--gpus", type=int, default=DEFAULT_GPUS, help=f"GPUs on the machine (default: {DEFAULT_GPUS})")
    p.add_argument("--vllm-gpus", type=int, default=DEFAULT_VLLM_GPUS,
                   help=f"of those, GPUs for `trl vllm-serve` (default: {DEFAULT_VLLM_GPUS})")
    p.add_argument("--model", default=None, help="model path or hub id for the target machine (default: the run's)")
    p.add_argument("--workspace", default="runs", help="where run ids are looked up (default: runs)")
    p.set_defaults(command="export_recipe")  # cli._handler looks up commands.cmd_<command>


def cmd_export_recipe(args: argparse.Namespace) -> int:
    from .export import export_recipe

    recipe = export_recipe(args.source, args.out, workspace=args.workspace, strategy=args.strategy,
                           gpus=args.gpus, vllm_gpus=args.vllm_gpus, model=args.model)
    print(f"wrote {recipe.out_dir}/ (train_grpo.py, config.json, accelerate/, README.md)")
    print(recipe.serve_command)
    print(f"cd {recipe.out_dir} && {recipe.train_command}")
    return 0
