"""GRPO for one appliance run on several GPUs: TRL's GRPOTrainer under `accelerate launch`.

Written by `appliance export-recipe` next to the run's config.json (a TrainConfig)
and the accelerate configs; see README.md there for the two command lines. The
pack, prompts, reward functions, verifier, GRPO preset and rollout recorder are
the appliance's own, imported unchanged; only the launch differs from
`appliance train grpo`:

- generation runs in a separate `trl vllm-serve` process on its own GPU(s)
  (`vllm_mode="server"`; TRL pushes the merged LoRA weights to it every step),
  or with `model.generate` under `--no-vllm` (how the CPU test runs it);
- the run's batch (prompts_per_step x num_generations completions) is split
  over the training processes, so a step is the same step as on one GPU;
- every rank scores and stores its own slice of the batch; sample indices are
  numbered across ranks (RolloutRecorder.gather_task_ids), and each rank also
  logs its rows to <workspace>/<run_id>/rollouts-rank<N>.jsonl.

Not carried over from the single-GPU run: uncertainty screening of the tasks
(every task of the split is a candidate), held-out evals at checkpoints,
multi-turn packs, and the options of the single-GPU trainer's own code
(train.grpo.options_of_our_trainer_in_use: refused, by the export and by this
script).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(HERE / "config.json"), help="the run's TrainConfig (config.json)")
    p.add_argument("--model", default=None,
                   help="model directory or hub id (default: the config's model); vllm-serve must serve the same one")
    p.add_argument("--no-vllm", action="store_true", help="generate with model.generate (use_vllm=False)")
    p.add_argument("--vllm-host", default="127.0.0.1", help="host of `trl vllm-serve`")
    p.add_argument("--vllm-port", type=int, default=8000, help="port of `trl vllm-serve`")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the config's)")
    p.add_argument("--workspace", default=None, help="run store (default: the config's workspace)")
    p.add_argument("--per-device-batch", type=int, default=None,
                   help="completions per process per step (default: the run's batch split over the processes)")
    p.add_argument("--no-save", action="store_true", help="do not save the final adapter")
    return p.parse_args(argv)


def per_device_batch(total: int, num_processes: int, requested: int | None) -> int:
    """Completions per process per step: the single-GPU batch split evenly, unless one is given."""
    if requested is not None:
        return requested
    if total % num_processes:
        raise SystemExit(f"error: the run's batch of {total} completions does not split over {num_processes} "
                         f"processes; pass --per-device-batch or change prompts_per_step.")
    return total // num_processes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import dataclasses

    import torch
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list, gather_object
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from appliance.errors import ApplianceError
    from appliance.models import load_model
    from appliance.packs import load_pack
    from appliance.recipe.export import refuse_options_not_carried
    from appliance.store import Workspace
    from appliance.train.backends import RenderedPromptIds, freeze_untrained_adapter_weights
    from appliance.train.callbacks import ApplianceGRPOMixin
    from appliance.train.config import TrainConfig
    from appliance.train.grpo import default_reward_funcs, grpo_args, grpo_rows, make_verify
    from appliance.train.multiturn import is_multi_turn
    from appliance.train.presets import filters_zero_variance
    from appliance.train.recorder import RolloutRecorder

    on_gpu = torch.cuda.is_available()
    state = PartialState(cpu=not on_gpu)  # without a GPU: gloo over the launched processes
    config = TrainConfig.load(args.config)
    config = dataclasses.replace(config, stage="grpo", steps=args.steps or config.steps,
                                 workspace=args.workspace or config.workspace)
    try:
        refuse_options_not_carried(config)  # a config.json edited after the export
    except ApplianceError as err:
        raise SystemExit(f"error: {err}") from None
    pack = load_pack(config.pack)
    if is_multi_turn(pack):
        raise SystemExit(f"error: pack {pack.name} is multi-turn; the recipe trains single-turn packs only.")
    with state.main_process_first():  # one process creates the store (and converts an embedded model)
        workspace = Workspace.open(config.workspace)
        model, tokenizer = load_model(args.model or config.model, adapter=config.init_adapter,
                                      dtype="bfloat16" if on_gpu else "float32",
                                      for_training=True)
    if config.init_adapter:  # lora_layers / lora_targets choose which of its weights train, as in `appliance train`
        freeze_untrained_adapter_weights(model, config)
    else:
        lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                          bias="none", task_type="CAUSAL_LM",
                          **config.peft_targets(model.config.num_hidden_layers))
        model = get_peft_model(model, lora)

    run_id = [workspace.new_id("grpo") if state.is_main_process else None]
    broadcast_object_list(run_id)
    run_id = run_id[0]
    run_dir = Path(config.workspace) / run_id
    writer = workspace.writer(run_id)
    if state.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        config.save(run_dir / "config.json")
        writer.update_run(kind="grpo", status="running", model=args.model or config.model,
                          adapter=config.init_adapter, pack=pack.name, config=config.to_dict(),
                          output_dir=str(run_dir), started_at=time.time())
    state.wait_for_everyone()

    split = config.training_split(pack)
    reward_funcs, reward_weights = default_reward_funcs(pack, config.reward, split)
    rank_log = run_dir / f"rollouts-rank{state.process_index}.jsonl"

    def log_row(event: Any) -> None:
        with rank_log.open("a", encoding="utf-8") as out:
            out.write(event.to_json() + "\n")

    recorder = RolloutRecorder(run_id, reward_funcs, reward_weights, make_verify(pack),
                               write_rows=lambda rows: workspace.append("rollouts", rows), sink=log_row,
                               rank=state.process_index, gather_task_ids=lambda ids: gather_object([ids]))

    class FlushRollouts(TrainerCallback):
        def on_step_end(self, _args, train_state, control, **kwargs):
            recorder.flush(train_state.global_step)

    options = grpo_args(config, SimpleNamespace(trainer_dir=run_dir / "trainer", pack=pack))
    options.update({
        "per_device_train_batch_size": per_device_batch(config.prompts_per_step * config.num_generations,
                                                        state.num_processes, args.per_device_batch),
        "reward_weights": list(reward_weights),
        "use_vllm": not args.no_vllm,
        "vllm_mode": "server",
        "vllm_server_host": args.vllm_host,
        "vllm_server_port": args.vllm_port,
        "bf16": on_gpu,
        "use_cpu": not on_gpu,
        "gradient_checkpointing": False,
        "save_strategy": "no",  # the final adapter is saved below; resume is the single-GPU path's
    })
    trainer_cls = type("RecipeGRPOTrainer", (ApplianceGRPOMixin, RenderedPromptIds, GRPOTrainer), {})
    trainer = trainer_cls(model=model, reward_funcs=recorder.wrapped, args=GRPOConfig(**options),
                          train_dataset=Dataset.from_list(grpo_rows(pack, tokenizer, split)),
                          processing_class=tokenizer, callbacks=[FlushRollouts()])
    trainer.appliance_recorder = recorder
    trainer.appliance_filter_zero_variance = filters_zero_variance(config.preset)
    try:
        trainer.train()
    except BaseException as err:
        if state.is_main_process:
            writer.update_run(status="failed", error=str(err)[:500], finished_at=time.time())
        raise
    if not args.no_save:
        trainer.save_model(str(run_dir / "adapter"))
    state.wait_for_everyone()
    if state.is_main_process:
        writer.update_run(status="finished", finished_at=time.time())
        print(json.dumps({"run_id": run_id, "rows_written_rank0": recorder.rows_written,
                          "adapter": None if args.no_save else str(run_dir / "adapter")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
