"""bench/bench_decision_threshold.py: the frontier declines the least confident acts first and scores them as
declines; the AUC ranks call tasks above no-call tasks; the canonical decline is scored as any answer is."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from appliance.packs.pack import load_pack

ROOT = Path(__file__).resolve().parents[1]


def bench_module():
    spec = importlib.util.spec_from_file_location("bench_threshold", ROOT / "bench" / "bench_decision_threshold.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_frontier_declines_least_confident_acts_first():
    bench = bench_module()
    Outcome = bench.Outcome
    outcomes = {
        "refusal": Outcome(needs_call=False, acted=True, success=False, unsafe=True, decline_success=True),
        "wrong_call": Outcome(needs_call=True, acted=True, success=False, unsafe=False, decline_success=False),
        "right_call": Outcome(needs_call=True, acted=True, success=True, unsafe=False, decline_success=False),
        "declined": Outcome(needs_call=False, acted=False, success=True, unsafe=False, decline_success=True),
    }
    margins = {"refusal": 0.5, "wrong_call": 0.2, "right_call": 3.0, "declined": -1.0}
    points = bench.frontier(margins, outcomes)
    assert [p["declined"] for p in points] == [0, 1, 2, 3]
    assert points[0] == {"declined": 0, "success": 2, "unsafe": 1, "missed_calls": 0}
    assert points[1] == {"declined": 1, "success": 2, "unsafe": 1, "missed_calls": 1}  # the wrong call goes first
    assert points[2] == {"declined": 2, "success": 3, "unsafe": 0, "missed_calls": 1}  # then the refusal
    assert points[3] == {"declined": 3, "success": 2, "unsafe": 0, "missed_calls": 2}
    assert bench.point_at(margins, outcomes, 0.5) == points[2]  # a margin at the threshold declines
    assert bench.point_at(margins, outcomes, 0.1) == points[0]  # the plain decline never counts as an act


def test_auc_ranks_calls_above_declines():
    bench = bench_module()
    needs_call = {"a": True, "b": True, "c": False, "d": False}
    assert bench.auc({"a": 2.0, "b": 1.0, "c": 0.0, "d": -1.0}, needs_call) == 1.0
    assert bench.auc({"a": -1.0, "b": 0.0, "c": 1.0, "d": 2.0}, needs_call) == 0.0
    assert bench.auc({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, needs_call) == 0.5


def test_declining_everything_succeeds_only_where_no_call_is_expected():
    from appliance.evaluate.scoring import declining_everything

    for name, split in (("workplace-single", "dev"), ("bfcl", "gate")):  # the verifier's rules and BFCL's
        pack = load_pack(name, root=ROOT / "tasks")
        tasks = pack.tasks(split)
        declining = declining_everything(pack, tasks)
        assert declining == {t.id: float(not t.expected) for t in tasks}
        assert 0 < sum(declining.values()) < len(tasks)
