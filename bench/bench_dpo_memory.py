"""A DPO run's memory on the CPU backend, with its batches padded to a few lengths (the default) and without.

CPU kernels are built and cached per input shape, so a run that meets a new sequence length at every batch keeps
more native memory with every step (session 50: a 150-step DPO of the embedded model grew from 5.0 to 13.2 GB).
Each setting runs in its own process: the tiny random model (appliance.tiny) or `--model` (a name or folder
`appliance train` takes, e.g. the embedded smollm2-135m, about 26 s a step on one core), workplace-single's
listing pairs, batches of 4, and malloc's in-use bytes (glibc mallinfo2; torch's CPU tensors live there, Python's
objects mostly too) read after the first `--from-step` steps and after the last.

    .venv/bin/python bench/bench_dpo_memory.py [--steps 30] [--from-step 5] [--model smollm2-135m]

Prints `name: value` lines: each setting's in-use MB at both readings and its growth, and the growth's ratio
(unpadded / padded). Linux with glibc only; the tiny model takes about four minutes a setting on one core.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = ("padded", "unpadded")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def in_use_mb() -> float:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


def one_setting(setting: str, steps: int, from_step: int, folder: Path, model: str | None) -> dict[str, float]:
    """Train in this process and return the in-use MB after `from_step` steps and after the last."""
    import trl

    import appliance.train.dpo as dpo
    from appliance.tiny import save_tiny_model
    from appliance.train import TrainConfig, run_dpo

    model = model or str(save_tiny_model(folder / "tiny"))
    if setting == "unpadded":
        padded_args = dpo.dpo_args
        dpo.dpo_args = lambda config, run: {**padded_args(config, run), "pad_to_multiple_of": None}
    readings: dict[str, float] = {}
    original_step = trl.DPOTrainer.training_step

    def training_step(trainer, *args, **kwargs):
        loss = original_step(trainer, *args, **kwargs)
        done = trainer.state.global_step + 1  # global_step counts the step once the optimizer has run
        if done in (from_step, steps):
            readings[f"step_{done}"] = in_use_mb()
        return loss

    trl.DPOTrainer.training_step = training_step
    pack = Path(__file__).resolve().parent.parent / "tasks" / "workplace-single"
    run_dpo(TrainConfig(model=model, pack=str(pack), backend="cpu", stage="dpo", steps=steps,
                        eval_every=steps, batch_size=4, max_seq_length=4096, pairs_source="listing",
                        missing_tool_listing="other", reject_first_difference=True,
                        output=str(folder / "checkpoints"), workspace=str(folder / "workspace")))
    return readings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--from-step", type=int, default=5)
    parser.add_argument("--model", help="a model `appliance train` takes; default: the tiny random model")
    parser.add_argument("--setting", choices=SETTINGS, help=argparse.SUPPRESS)  # the child process's one setting
    args = parser.parse_args()
    if args.setting:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(one_setting(args.setting, args.steps, args.from_step, Path(folder), args.model)))
        return 0
    growth = {}
    for setting in SETTINGS:
        model = ["--model", args.model] if args.model else []
        proc = subprocess.run([sys.executable, __file__, "--setting", setting, "--steps", str(args.steps),
                               "--from-step", str(args.from_step), *model], capture_output=True, text=True, check=True)
        readings = json.loads(proc.stdout.strip().splitlines()[-1])
        first, last = readings[f"step_{args.from_step}"], readings[f"step_{args.steps}"]
        growth[setting] = last - first
        print(f"dpo_in_use_mb_step_{args.from_step}_{setting}: {first:.0f}")
        print(f"dpo_in_use_mb_step_{args.steps}_{setting}: {last:.0f}")
        print(f"dpo_in_use_growth_mb_{setting}: {growth[setting]:.0f}")
    print(f"dpo_in_use_growth_ratio_unpadded_over_padded: {growth['unpadded'] / max(growth['padded'], 1.0):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
