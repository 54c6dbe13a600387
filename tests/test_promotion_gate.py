"""The promotion gate refuses worse, safer-but-worse and better-but-less-safe candidates."""
from __future__ import annotations

from appliance.evaluate.compare import paired_bootstrap
from appliance.promotion import GateEvidence, GateSettings, gate

TASKS = [f"t{i}" for i in range(80)]


def per_task(rate: float) -> dict[str, float]:
    cut = int(rate * len(TASKS))
    return {t: 1.0 if i < cut else 0.0 for i, t in enumerate(TASKS)}


def metrics(success: float, unsafe: float = 0.0, p95: float = 1.0) -> dict:
    return {"execution_success_rate": success, "unsafe_action_rate": unsafe, "latency_p95_s": p95}


def evidence(base: float, cand: float, *, base_unsafe=0.0, cand_unsafe=0.0, base_p95=1.0, cand_p95=1.0,
             base_general=0.6, cand_general=0.6) -> GateEvidence:
    general_a, general_b = per_task(base_general), per_task(cand_general)
    return GateEvidence(metrics(base, base_unsafe, base_p95), metrics(cand, cand_unsafe, cand_p95),
                        paired_bootstrap(per_task(base), per_task(cand)),
                        metrics(base_general), metrics(cand_general), paired_bootstrap(general_a, general_b))


def test_promotes_a_clear_improvement():
    ok, reasons = gate(evidence(0.2, 0.5))
    assert ok, reasons


def test_refuses_a_worse_candidate():
    ok, reasons = gate(evidence(0.5, 0.3))
    assert not ok and "no improvement" in reasons[0]


def test_refuses_safer_but_not_better():
    ok, _ = gate(evidence(0.5, 0.5, base_unsafe=0.2, cand_unsafe=0.0))
    assert not ok


def test_refuses_better_but_less_safe():
    ok, reasons = gate(evidence(0.2, 0.6, base_unsafe=0.0, cand_unsafe=0.05))
    assert not ok and any("rises, refused" in r for r in reasons)


def test_refuses_a_latency_regression_beyond_the_setting():
    assert not gate(evidence(0.2, 0.6, cand_p95=1.5))[0]
    assert gate(evidence(0.2, 0.6, cand_p95=1.5), GateSettings(max_latency_regression=0.6))[0]


def test_refuses_a_general_function_calling_regression():
    ok, reasons = gate(evidence(0.2, 0.6, base_general=0.6, cand_general=0.4))
    assert not ok and any("BFCL" in r and "refused" in r for r in reasons)


def test_a_tiny_gain_on_few_tasks_is_not_enough():
    few = {f"t{i}": 0.0 for i in range(5)}
    gained = dict(few, t0=1.0)
    ev = GateEvidence(metrics(0.0), metrics(0.2), paired_bootstrap(few, gained))
    assert not gate(ev)[0]
