"""Version drift check against the library sets this project was verified with.

The CPU path and the GPU path differ only in TRL (1.16.x on CPU because 1.15's
GRPOTrainer needs Triton there; 1.15.0 on GPU because Unsloth caps it). A
mismatch is a warning, not an error: the user may know better, but a drifted
unsloth/trl/vllm trio is the most common source of broken RL runs.
"""
from __future__ import annotations

from importlib import metadata

# Package -> pinned version on each path. None: not used on that path.
PINNED: dict[str, dict[str, str | None]] = {
    "torch": {"cpu": None, "gpu": "2.14.0"},
    "transformers": {"cpu": "5.17.0", "gpu": "5.17.0"},
    "trl": {"cpu": "1.16", "gpu": "1.15.0"},
    "peft": {"cpu": "0.21.2", "gpu": "0.21.2"},
    "vllm": {"cpu": None, "gpu": "0.33.0"},
    "unsloth": {"cpu": None, "gpu": "2026.10.9"},
    "bitsandbytes": {"cpu": None, "gpu": "0.50.2"},
}


def installed_versions(packages=tuple(PINNED)) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _matches(installed: str, pinned: str) -> bool:
    """A pin "1.16" accepts any 1.16.x; "1.15.0" is exact (local suffixes like +cu128 ignored)."""
    base = installed.split("+", 1)[0]
    if pinned.count(".") < 2:  # a minor-version pin
        return base == pinned or base.startswith(pinned + ".")
    return base == pinned


def check_versions(path: str | None = None, installed: dict[str, str | None] | None = None) -> list[str]:
    """One warning line per package that differs from the pinned set for `path` (cpu|gpu).

    `path=None` infers it: gpu when unsloth is installed, else cpu.
    """
    installed = installed if installed is not None else installed_versions()
    if path is None:
        path = "gpu" if installed.get("unsloth") else "cpu"
    warnings: list[str] = []
    for package, pins in PINNED.items():
        pinned, have = pins[path], installed.get(package)
        if pinned is None:
            continue
        if have is None:
            warnings.append(f"{package} is not installed; the {path} path was verified with {package}=={pinned}.")
        elif not _matches(have, pinned):
            warnings.append(f"{package} {have} is installed; the {path} path was verified with {package}=={pinned}"
                            f" (pip install '{package}=={pinned}' if training misbehaves).")
    return warnings
