"""`appliance doctor`: hardware, library versions, and which backends will be used.

`collect()` is cheap and safe everywhere (it never imports vLLM or Unsloth; it
reads the unsloth backend's memory rule, which is plain arithmetic).
`gpu_smoke()` runs the GPU self-check parts, each in its own child process so a
CUDA crash in one part cannot hide the others' results (see gpu_smoke.py), each with
a time budget so the whole check ends inside ten minutes. With `wheels`, it first
installs a folder of wheels offline into a scratch folder that only the children see.
"""
from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any, Mapping, Sequence

from appliance import gpu_smoke as smoke
from appliance.errors import ERROR_PREFIX, ApplianceError

PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "duckdb", "textual",
            "xgrammar", "vllm", "unsloth", "unsloth_zoo", "bitsandbytes", "xformers")


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
    if train_backend == "cpu":
        from appliance.train.cpu import auto_precision_in_force

        info["cpu_training_precision"] = auto_precision_in_force()
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


# The whole self-check fits in ten minutes: each part gets its share, capped by what is left.
TOTAL_BUDGET_S = 600
PART_BUDGET_S = {"bnb": 150, "unsloth": 270, "vllm": 150}
# What an offline GPU machine needs brought as wheels (vLLM's is far too large); versions are our pins.
WHEELS_TO_BRING = ("trl", "peft", "unsloth", "unsloth_zoo", "bitsandbytes")


def wheels_to_bring() -> str:
    """`name==version ...` for WHEELS_TO_BRING, read from this package's own requirements (the gpu extra wins)."""
    pins: dict[str, str] = {}
    try:
        requirements = metadata.requires("rl-appliance") or []
    except metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)\s*(;.*)?", requirement)
        if found and (found[1] not in pins or "gpu" in (found[3] or "")):
            pins[found[1]] = found[2]
    return " ".join(f"{name}=={pins[name]}" if name in pins else name for name in WHEELS_TO_BRING)


def _download_hint(folder: Path) -> str:
    return f"download them on a machine with network: pip download --no-deps {wheels_to_bring()} -d {folder}"


def wheel_files(folder: Path) -> list[Path]:
    """The .whl files in `folder`; one sentence (ApplianceError) when there is nothing to install."""
    if not folder.exists():
        raise ApplianceError(f"--wheels {folder} does not exist; {_download_hint(folder)}.")
    if not folder.is_dir():
        raise ApplianceError(f"--wheels {folder} is a file, not a folder of wheels; {_download_hint(folder.parent)}.")
    files = sorted(folder.glob("*.whl"))
    if not files:
        raise ApplianceError(f"--wheels {folder} holds no .whl files; {_download_hint(folder)}.")
    return files


def install_wheels(files: Sequence[Path], target: Path) -> list[tuple[str, str]]:
    """Install `files` offline into `target` (pip --target); returns (name, version) of what landed there.

    Why --target and not a venv: a venv with --system-site-packages sees the base interpreter's
    packages, not those of the venv `appliance` itself may run in (torch, transformers), so the
    children would lose them. A plain folder put first on the children's PYTHONPATH keeps every
    installed package and lets the brought wheels win, and the user's environment is not touched.
    --no-deps: the folder holds exactly what is missing; --no-index: there is no network to ask.
    (A PYTHONPATH folder runs no .pth files; none of the wheels we bring ships one.)
    """
    if PathFinder.find_spec("pip") is None:
        raise ApplianceError(f"pip is not installed in {sys.executable}, so the wheels cannot be installed; "
                             "install pip (python -m ensurepip) or run without --wheels.")
    folders = sorted({str(f.parent) for f in files})
    command = [sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--quiet", "--target", str(target),
               *[arg for folder in folders for arg in ("--find-links", folder)], *map(str, files)]
    proc = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        said = [line.strip() for line in proc.stderr.splitlines() if line.strip()] or ["no message"]
        raise ApplianceError(f"pip could not install the wheels from {folders[0]}: {said[-1]}")
    return sorted((d.metadata["Name"], d.version) for d in metadata.distributions(path=[str(target)]))


def child_env(site: Path | None) -> dict[str, str]:
    """The children's environment: the brought wheels first on the path; the hub never asked."""
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")  # models come from configs; on a machine without network a hub call hangs
    return env


def run_part(argv: Sequence[str], env: Mapping[str, str], budget_s: float) -> int | None:
    """Run one part's child; its exit code, or None if it ran past `budget_s` and was killed.

    The child leads its own process group, so killing the group also ends what it started
    (vLLM's engine core is a grandchild that would otherwise keep holding GPU memory).
    """
    proc = subprocess.Popen(list(argv), env=dict(env), start_new_session=True)
    try:
        return proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        return None
    finally:  # also on Ctrl-C: a child in its own session does not get the terminal's SIGINT
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def gpu_smoke(part: str = "all", *, wheels: Path | None = None, shape: str = smoke.SHAPES[0],
              budgets: Mapping[str, float] = PART_BUDGET_S, total_budget_s: float = TOTAL_BUDGET_S) -> int:
    """Run the GPU self-check parts in child processes; prints `name: value` lines; 0 if none failed.

    A part whose library is not installed is skipped with one line (not a failure), unless it
    was asked for by name; a part that runs past its budget is killed and counts as failed.
    """
    deadline = time.monotonic() + total_budget_s
    files = wheel_files(wheels) if wheels is not None else []
    parts = list(smoke.PARTS) if part == "all" else [part]
    with tempfile.TemporaryDirectory(prefix="appliance-gpu-smoke-") as scratch:
        site = Path(scratch) / "site" if files else None
        if site is not None:
            for name, version in install_wheels(files, site):
                print(f"installed: {name} {version}", flush=True)
        search_path = [str(site), *sys.path] if site is not None else None
        missing = {name: smoke.missing_library(name, search_path) for name in parts}
        if part != "all" and missing[part]:
            raise ApplianceError(f"the {part} part needs {missing[part]}, which is not installed here; "
                                 + ("run it where vLLM is installed." if missing[part] == "vllm" else
                                    "add its wheel to a folder and pass --wheels (or pip install -e '.[gpu]')."))
        outcomes = {name: _run_one(name, missing[name], shape, child_env(site), budgets, deadline)
                    for name in parts}
    counts = {status: sum(v == status for v in outcomes.values()) for status in ("passed", "failed", "skipped")}
    for status, count in counts.items():
        print(f"gpu_smoke_{status}: {count}", flush=True)
    if counts["passed"] + counts["failed"] == 0:
        print(ERROR_PREFIX + "no part of the GPU smoke could run here; every part's library is missing.",
              file=sys.stderr)
        return 1
    return 1 if counts["failed"] else 0


def _part_command(name: str, shape: str) -> list[str]:
    return [sys.executable, "-m", "appliance.gpu_smoke", name, "--shape", shape]


def _run_one(name: str, missing: str | None, shape: str, env: Mapping[str, str],
             budgets: Mapping[str, float], deadline: float) -> str:
    """One part: skipped, passed or failed (a timeout is a failure, said as such)."""
    if missing:
        print(smoke.skip_line(name, missing), flush=True)
        return "skipped"
    print(f"== gpu smoke: {name}", flush=True)
    budget = max(0, int(min(budgets[name], deadline - time.monotonic())))
    code = run_part(_part_command(name, shape), env, budget)
    if code == smoke.EXIT_SKIPPED:  # the child found a library missing that the parent's look missed
        return "skipped"
    if code is None:
        print(f"{name}: timed out after {budget} s", flush=True)
    print(f"{name}_ok: {int(code == 0)}", flush=True)
    return "passed" if code == 0 else "failed"
