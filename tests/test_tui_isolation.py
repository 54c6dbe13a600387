"""The cockpit never imports the training stack: a fresh interpreter imports tui.app and checks sys.modules."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "trl", "peft", "unsloth", "vllm", "accelerate", "datasets")
ROOT = Path(__file__).resolve().parents[1]


def test_tui_app_imports_no_training_stack():
    code = ("import sys, json, tui.app, tui.screens.evaluate, tui.screens.audit; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_compare_tab_engine_import_stays_light():
    # The Compare tab calls the engine's compare_stored; importing it must not pull torch either.
    code = ("import sys, json, appliance.evaluate.stored; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
