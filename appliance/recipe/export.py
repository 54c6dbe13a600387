"""Export a run as a multi-GPU launch on TRL: a script, accelerate configs and the command lines.

`export_recipe(source, out_dir)` writes into `out_dir`:
    config.json        the run's TrainConfig (the script reads it)
    train_grpo.py      appliance/recipe/train_grpo.py, copied as it is
    accelerate/        zero2.yaml, zero3.yaml, fsdp.yaml for the training processes
    README.md          the two command lines (vLLM server, accelerate launch) and what changes

The script imports the pack, prompts, rewards and recorder from the appliance
package, so the machine that runs it needs `pip install rl-appliance` plus
`trl[vllm]` and, for the DeepSpeed configs, `deepspeed`.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import ApplianceError
from ..train.config import TrainConfig

HERE = Path(__file__).resolve().parent
SCRIPT = "train_grpo.py"
STRATEGIES = ("zero2", "zero3", "fsdp")
DEFAULT_STRATEGY = "zero3"
DEFAULT_GPUS = 8
DEFAULT_VLLM_GPUS = 1


@dataclass(frozen=True)
class Recipe:
    out_dir: Path
    config: TrainConfig
    model: str
    strategy: str
    gpus: int
    vllm_gpus: int

    @property
    def train_processes(self) -> int:
        return self.gpus - self.vllm_gpus

    @property
    def serve_command(self) -> str:
        devices = ",".join(str(i) for i in range(self.vllm_gpus))
        return (f"CUDA_VISIBLE_DEVICES={devices} trl vllm-serve --model {self.model} "
                f"--tensor-parallel-size {self.vllm_gpus} --port 8000")

    @property
    def train_command(self) -> str:
        devices = ",".join(str(i) for i in range(self.vllm_gpus, self.gpus))
        return (f"CUDA_VISIBLE_DEVICES={devices} accelerate launch --config_file accelerate/{self.strategy}.yaml "
                f"{SCRIPT} --model {self.model} --vllm-port 8000")


def load_source_config(source: str | Path, workspace: str | Path = "runs") -> TrainConfig:
    """A TrainConfig from a config JSON file, a run directory, or a run id under `workspace`."""
    given = Path(str(source))
    for candidate in (given, given / "config.json", Path(workspace) / str(source) / "config.json"):
        if candidate.is_file():
            config = TrainConfig.load(candidate)
            if config.stage != "grpo":
                raise ApplianceError(f"{source} is a {config.stage} run; export-recipe exports GRPO runs.")
            return config
    raise ApplianceError(f"No run or config {source!r}: give a config.json, a run folder, or a run id under "
                         f"{workspace}/ (appliance runs lists them).")


def refuse_options_not_carried(config: TrainConfig) -> None:
    """One sentence, before anything is written or loaded, for a run whose options the recipe would drop: the
    script runs TRL's GRPOTrainer with none of the single-GPU trainer's own code (train.grpo)."""
    from ..train.grpo import options_of_our_trainer_in_use

    used = options_of_our_trainer_in_use(config)
    if used:
        raise ApplianceError(f"The multi-GPU recipe does not carry {', '.join(used)} (the single-GPU trainer's "
                             f"own code); set {'it' if len(used) == 1 else 'them'} back to the default in the "
                             f"config or run `appliance train grpo` on one GPU.")


def model_location(spec: str) -> str:
    """What vllm-serve and the script load: a hub id or a directory (the embedded model's converted copy)."""
    from ..models import resolve_model

    return resolve_model(spec).location


def export_recipe(source: str | Path, out_dir: str | Path, *, workspace: str | Path = "runs",
                  strategy: str = DEFAULT_STRATEGY, gpus: int = DEFAULT_GPUS,
                  vllm_gpus: int = DEFAULT_VLLM_GPUS, model: str | None = None) -> Recipe:
    if strategy not in STRATEGIES:
        raise ApplianceError(f"Unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}.")
    if not 1 <= vllm_gpus < gpus:
        raise ApplianceError(f"--vllm-gpus must leave at least one of the {gpus} GPUs for training, not {vllm_gpus}.")
    config = load_source_config(source, workspace)
    refuse_options_not_carried(config)
    recipe = Recipe(Path(out_dir), config, model or model_location(config.model), strategy, gpus, vllm_gpus)
    batch = config.prompts_per_step * config.num_generations
    if batch % recipe.train_processes:
        raise ApplianceError(f"The run's batch of {batch} completions (prompts_per_step x num_generations) does not "
                             f"split over {recipe.train_processes} training GPUs; choose --gpus so that it does.")
    out = recipe.out_dir
    (out / "accelerate").mkdir(parents=True, exist_ok=True)
    config.save(out / "config.json")
    shutil.copyfile(HERE / SCRIPT, out / SCRIPT)
    for name in STRATEGIES:
        text = (HERE / "accelerate" / f"{name}.yaml").read_text(encoding="utf-8")
        text = text.replace("{num_processes}", str(recipe.train_processes)).replace("{mixed_precision}", "bf16")
        (out / "accelerate" / f"{name}.yaml").write_text(text, encoding="utf-8")
    (out / "README.md").write_text(readme(recipe), encoding="utf-8")
    return recipe


def readme(recipe: Recipe) -> str:
    config = recipe.config
    batch = config.prompts_per_step * config.num_generations
    return f"""# GRPO on {recipe.gpus} GPUs: pack {config.pack}, model {recipe.model}

Exported by `appliance export-recipe`. Needs the appliance (`pip install rl-appliance`), `trl[vllm]`
and, for the DeepSpeed configs, `deepspeed`, on one machine with {recipe.gpus} GPUs. Run from this folder.

1. Start the generation server on the first {recipe.vllm_gpus} GPU(s) and wait for "Application startup complete":

       {recipe.serve_command}

2. Train on the other {recipe.train_processes} GPU(s) (accelerate/{recipe.strategy}.yaml; zero2, zero3 and fsdp are here):

       {recipe.train_command}

The script runs TRL's GRPOTrainer with `use_vllm=True, vllm_mode="server"`, the appliance's pack, prompts,
reward functions ({config.reward or "the pack's scheme"}) and preset ({config.preset}). A step is the single-GPU step:
{config.prompts_per_step} prompts x {config.num_generations} generations = {batch} completions, {batch // recipe.train_processes} per training process.
Rollouts land in the store under {config.workspace}/ as on one GPU (`appliance sql`), one part per rank per step;
the final LoRA is saved to {config.workspace}/<run_id>/adapter.

Without GPUs (a check that the recipe runs; `--cpu` alone would start one process):
`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 {SCRIPT} --no-vllm --model DIR`.
"""
