"""bench/bench_undeclared_arguments.py: a call whose only fault is an undeclared argument passes once it is
dropped; any other fault still fails."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from appliance.packs.pack import load_pack
from appliance.verify import Verifier

ROOT = Path(__file__).resolve().parents[1]


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_undeclared", ROOT / "bench" / "bench_undeclared_arguments.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_undeclared_arguments_are_forgiven():
    bench = bench_module()
    pack = load_pack("workplace-single", root=ROOT / "tasks")
    verifier = Verifier.for_pack(pack)
    task = next(t for t in pack.tasks("dev") if t.tags.get("template") == "delete_event_by_id")
    (expected,) = task.expected
    right = {"name": expected.name, "arguments": dict(expected.arguments)}
    padded = {"name": expected.name, "arguments": {**expected.arguments, "field": "event_name", "new_value": "x"}}
    wrong_id = {"name": expected.name, "arguments": {**{k: "99999999" for k in expected.arguments}, "field": "x"}}

    assert verifier.verify(task, json.dumps(right)).success
    assert not verifier.verify(task, json.dumps(padded)).success
    assert bench.succeeds_without_undeclared(pack, verifier, task, json.dumps(padded))
    assert not bench.succeeds_without_undeclared(pack, verifier, task, json.dumps(wrong_id))
    assert not bench.succeeds_without_undeclared(pack, verifier, task, "No action is needed.")
