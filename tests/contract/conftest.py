"""The contract suite runs only under `make contract` (APPLIANCE_CONTRACT=1, in .venv-contract).

A plain `pytest` run skips it: there trl is the CPU path's 1.16 and the pinned
GPU wheels are absent. Under `make contract` nothing is skipped: a missing
package or wheel is a failure, so an upgrade cannot pass by going unchecked.
"""
from __future__ import annotations

import os

import pytest

ENABLED = os.environ.get("APPLIANCE_CONTRACT") == "1"


@pytest.fixture(scope="session", autouse=True)
def _contract_only() -> None:  # session scope: decided before any module-scoped fixture reads a wheel
    if not ENABLED:
        pytest.skip("contract suite: run `make contract` (needs .venv-contract with the pinned GPU libraries)")


@pytest.fixture(scope="session")
def pins() -> dict[str, str]:
    """The `gpu` extra's exact versions, from pyproject.toml."""
    from .make_venv import gpu_pins

    return gpu_pins()
