"""Engine and UI are separate houses; heavy GPU/ML libraries load only when needed."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

ML = ("torch", "transformers", "trl", "peft", "vllm", "unsloth")


def modules_after(import_line: str) -> set[str]:
    code = f"import sys, json\n{import_line}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("module", ["appliance.cli", "appliance.commands", "appliance.evaluate",
                                    "appliance.packs", "appliance.store", "appliance.verify",
                                    "appliance.rewards", "appliance.world", "appliance.audit",
                                    "appliance.promotion", "appliance.pipeline"])
def test_engine_never_imports_textual_or_tui(module):
    loaded = modules_after(f"import {module}")
    assert not {m for m in loaded if m == "textual" or m.startswith(("textual.", "tui"))}


@pytest.mark.parametrize("module", ["appliance.cli", "appliance.evaluate", "appliance.store",
                                    "appliance.verify", "appliance.packs"])
def test_light_engine_modules_do_not_load_ml_libraries(module):
    loaded = modules_after(f"import {module}")
    assert not {m for m in loaded if m.split(".")[0] in ML}


def test_ui_never_imports_ml_libraries():
    loaded = modules_after("import tui.app")
    assert not {m for m in loaded if m.split(".")[0] in ML}
