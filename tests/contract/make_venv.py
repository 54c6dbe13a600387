"""Build (or confirm) the contract venv: the pinned GPU-path libraries, on a CPU.

    python3 tests/contract/make_venv.py [VENV]      # default .venv-contract

What goes in, all read from pyproject.toml so the pins live in one place:

- CPU torch 2.13.0 (the GPU stack pins 2.14.0 with CUDA; trl, transformers and
  peft import the same on either), then this project editable with its own
  dependencies and trl at the `gpu` extra's pin (1.15.0), plus pytest;
- the wheels of unsloth, unsloth_zoo and vllm at their `gpu` pins, downloaded
  with --no-deps and never installed: Unsloth refuses to import without CUDA
  and vLLM's dependencies are CUDA builds, so the contract reads their source
  straight from the wheel (zip) files.

A stamp inside the venv hashes pyproject.toml and this script; while it is
unchanged the script does nothing, so `make contract` pays for the install
once. PINNED_WHEELS may name a folder that already holds those wheels (they
are copied from it instead of downloaded); TORCH_PIP_ARGS works as for
`make setup`.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_TORCH = "torch==2.13.0"
SOURCE_ONLY = ("unsloth", "unsloth_zoo", "vllm")  # read from their wheels, never imported
INSTALLED_FROM_GPU_EXTRA = ("trl",)
WHEELS_DIR = "wheels"


def gpu_pins(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """Package → exact version of the `gpu` extra (names normalised to underscores)."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["gpu"]
    pins = {}
    for requirement in extras:
        name, version = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;]+)\s*", requirement).groups()
        pins[name.lower().replace("-", "_")] = version
    return pins


def wheel_path(wheels: Path, package: str, version: str) -> Path | None:
    found = sorted(wheels.glob(f"{package}-{version}-*.whl"))
    return found[0] if found else None


def _stamp() -> str:
    """Changes with pyproject.toml (the pins, and the project's own dependencies) and with this script."""
    text = (ROOT / "pyproject.toml").read_text() + CPU_TORCH + Path(__file__).read_text()
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _pip(python: Path, *args: str) -> None:
    command = [str(python), "-m", "pip", "install", "-q", *args]
    print("+", shlex.join(command), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def _fetch_wheels(python: Path, wheels: Path, pins: dict[str, str]) -> None:
    """The source-only wheels into `wheels`: copied from PINNED_WHEELS where it has them, else downloaded."""
    wheels.mkdir(parents=True, exist_ok=True)
    local = Path(os.environ["PINNED_WHEELS"]) if os.environ.get("PINNED_WHEELS") else None
    missing = []
    for name in SOURCE_ONLY:
        if wheel_path(wheels, name, pins[name]) is not None:
            continue
        found = wheel_path(local, name, pins[name]) if local else None
        if found is not None:
            shutil.copy2(found, wheels / found.name)
        else:
            missing.append(f"{name}=={pins[name]}")
    if missing:
        command = [str(python), "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                   "-d", str(wheels), *missing]
        print("+", shlex.join(command), flush=True)
        subprocess.run(command, check=True, cwd=ROOT)


def build(venv_dir: Path) -> None:
    pins = gpu_pins()
    stamp = venv_dir / f".contract-{_stamp()}"
    if stamp.exists():
        print(f"{venv_dir}: up to date ({', '.join(f'{k}=={v}' for k, v in sorted(pins.items()))})")
        return
    python = venv_dir / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    torch_args = shlex.split(os.environ.get("TORCH_PIP_ARGS", ""))
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        _pip(python, *torch_args, CPU_TORCH)
    _pip(python, "-e", ".", *(f"{name}=={pins[name]}" for name in INSTALLED_FROM_GPU_EXTRA), "pytest>=8")
    _fetch_wheels(python, venv_dir / WHEELS_DIR, pins)
    for old in venv_dir.glob(".contract-*"):
        old.unlink()
    stamp.touch()
    print(f"{venv_dir}: ready")


if __name__ == "__main__":
    build(ROOT / (sys.argv[1] if len(sys.argv) > 1 else ".venv-contract"))
