"""`appliance doctor`: hardware, library versions, and which backends will be used.

`collect()` is cheap and safe everywhere (it never imports vLLM or Unsloth; it
reads the unsloth backend's memory rule, which is plain arithmetic).
`gpu_smoke()` runs the GPU self-check parts, each in its own child process so a
CUDA crash in one part cannot hide the others' results (see gpu_smoke.py).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "duckdb", "textual",
            "vllm", "unsloth", "unsloth_zoo", "bitsandbytes", "xformers")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        return None
    return None


def _gpu() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"gpu": "torch not installed"}
    if not torch.cuda.is_available():
        return {"gpu": "none visible (CPU path)"}
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info(0)
    return {"gpu": props.name, "gpu_count": torch.cuda.device_count(),
            "vram_total_gib": round(total / 2**30, 1), "vram_used_gib": round((total - free) / 2**30, 1),
            "cuda": torch.version.cuda}


def collect() -> dict[str, Any]:
    from appliance.generate import choose_backend
    from appliance.train.backends import pick_backend
    from appliance.train.versions import check_versions

    info: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "cpu_cores": os.cpu_count(), "ram_gib": _ram_gib(), **_gpu()}
    for package in PACKAGES:
        info[f"version.{package}"] = _version(package) or "not installed"
    train_backend, train_reason = pick_backend("auto")
    gen_backend, gen_reason = choose_backend("auto")
    info["train_backend"] = f"{train_backend} ({train_reason})"
    info["generation_backend"] = f"{gen_backend} ({gen_reason})"
    info["vllm_gpu_memory_utilization"] = _gpu_memory_utilization_in_force(_vram_total_bytes())
    info["version_warnings"] = check_versions() or ["none"]
    return info


def _vram_total_bytes() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return int(torch.cuda.mem_get_info(0)[1]) if torch.cuda.is_available() else None


def _gpu_memory_utilization_in_force(total_vram_bytes: int | None) -> str:
    """What a GRPO run with the default config gives the colocated vLLM engine on this GPU, and why."""
    from appliance.train.config import TrainConfig
    from appliance.train.unsloth_backend import gpu_memory_utilization_in_force

    if total_vram_bytes is None:
        return "not used (no CUDA GPU: no vLLM engine)"
    value, why = gpu_memory_utilization_in_force(TrainConfig(stage="grpo"), total_vram_bytes)
    return f"{value} ({why})"


def gpu_smoke(part: str = "all") -> int:
    """Run the GPU self-check parts in child processes; prints `name: value` lines; 0 if all passed."""
    parts = ["bnb", "unsloth", "vllm"] if part == "all" else [part]
    failures = 0
    for name in parts:
        print(f"== gpu smoke: {name}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "appliance.gpu_smoke", name], check=False)
        print(f"{name}_ok: {int(proc.returncode == 0)}", flush=True)
        failures += proc.returncode != 0
    return 1 if failures else 0
