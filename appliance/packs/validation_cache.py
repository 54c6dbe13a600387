"""Remember split files that passed the full (slow) tool-schema check, by content hash.

Checking every per-row tool of BFCL against the JSON Schema metaschema takes
~15 s; a file whose exact bytes already passed skips only that check on later
loads (every other check still runs). Any edit changes the hash, so an edited
file is checked in full again.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _cache_dir() -> Path:
    root = os.environ.get("APPLIANCE_CACHE") or Path.home() / ".cache" / "rl-appliance"
    return Path(root) / "validated-splits"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_validated(path: Path) -> bool:
    try:
        return (_cache_dir() / _digest(path)).exists()
    except OSError:
        return False


def mark_validated(path: Path) -> None:
    try:
        directory = _cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / _digest(path)).touch()
    except OSError:
        pass  # a read-only home only costs the next load some time
