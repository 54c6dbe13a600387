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


def test_latency_is_read_as_the_tokens_a_request_generates_when_both_evals_counted_them():
    # Session 56: the same adapter's same answers read a wall p95 of 24.0 s in one run and 31.4 s in the next.
    ev = evidence(0.2, 0.6, base_p95=24.0, cand_p95=31.4)
    ev.baseline["completion_tokens_p95"], ev.candidate["completion_tokens_p95"] = 64, 64
    ok, reasons = gate(ev)
    assert ok, reasons
    assert "latency p95 64 → 64 tokens generated a request: ok (batch latency p95 24.00s → 31.40s" in reasons[3]
    ev.candidate["completion_tokens_p95"], ev.candidate["latency_p95_s"] = 81, 20.0  # more tokens, timed faster
    ok, reasons = gate(ev)
    assert not ok and "more than 25% more tokens, refused" in reasons[3]
    assert gate(ev, GateSettings(max_latency_regression=0.3))[0]


def test_refuses_a_general_function_calling_regression():
    ok, reasons = gate(evidence(0.2, 0.6, base_general=0.6, cand_general=0.4))
    assert not ok and any("BFCL" in r and "refused" in r for r in reasons)


def test_the_general_line_says_which_bfcl_categories_moved():
    # The embedded model scores only on `irrelevance` (declining): the line must show that is all that moved.
    ev = evidence(0.2, 0.5, base_general=0.143, cand_general=0.064)
    calling = {"simple_python": 0.0, "multiple": 0.0, "parallel": 0.0, "parallel_multiple": 0.0,
               "live_simple": 0.0, "live_multiple": 0.0}
    ev.baseline_general["bfcl"] = {**calling, "irrelevance": 1.0, "overall": 0.143}
    ev.candidate_general["bfcl"] = {**calling, "irrelevance": 0.45, "overall": 0.064}
    ok, reasons = gate(ev)
    assert not ok
    assert bfcl_line(reasons).endswith(
        "regresses, refused (by category: irrelevance 1.00 → 0.45; the other 6 at 0.00 on both)")
    ev.candidate_general["bfcl"] = dict(ev.baseline_general["bfcl"])
    assert "by category" not in bfcl_line(gate(ev)[1])


def bfcl_line(reasons: list[str]) -> str:
    return next(r for r in reasons if "BFCL" in r)


def test_refuses_a_candidate_no_better_than_declining_every_request():
    # Session 34: an adapter that declined all 120 val requests beat a base model that fails no-call tasks
    # (+7.5 points, interval above 0) and was promoted; declining is no skill.
    from dataclasses import replace

    declines_all = per_task(0.2)  # the no-call tasks are the first fifth
    ev = replace(evidence(0.1, 0.2), do_nothing=paired_bootstrap(declines_all, per_task(0.2)))
    ok, reasons = gate(ev)
    assert not ok
    assert reasons[1] == ("held-out success against doing nothing (every request declined scores 0.200) +0.000 "
                          "(95% interval +0.000 … +0.000): no better than declining every request, refused")
    acts_too = replace(ev, do_nothing=paired_bootstrap(declines_all, per_task(0.5)))
    assert gate(acts_too)[0]


def test_evidence_without_the_do_nothing_comparison_says_so():
    ok, reasons = gate(evidence(0.2, 0.6))  # what a record stored before session 34 holds
    assert ok and reasons[1].endswith("not checked (evidence stored before the gate compared it)")


def test_collect_evidence_scores_doing_nothing_on_the_candidates_tasks(monkeypatch):
    from pathlib import Path

    from appliance import promotion
    from appliance.packs import load_pack

    tasks = str(Path(__file__).resolve().parents[1] / "tasks")
    val = load_pack("workplace-single", root=tasks).tasks("val")
    declines = {t.id: float(not t.expected) for t in val}
    monkeypatch.setattr(promotion, "_measure", lambda model, adapter, *a, **kw: promotion._Measured(
        metrics(sum(declines.values()) / len(val) if adapter else 0.0),
        declines if adapter else dict.fromkeys(declines, 0.0)))
    ev = promotion.collect_evidence("cand", None, model="m", pack="workplace-single", tasks_root=tasks,
                                    workspace=None, s=GateSettings())
    assert ev.success.significant_improvement  # it beats a baseline that fails everything...
    assert ev.do_nothing.delta == 0.0 and not gate(ev)[0]  # ...and is refused all the same


def test_a_tiny_gain_on_few_tasks_is_not_enough():
    few = {f"t{i}": 0.0 for i in range(5)}
    gained = dict(few, t0=1.0)
    ev = GateEvidence(metrics(0.0), metrics(0.2), paired_bootstrap(few, gained))
    assert not gate(ev)[0]


def _with_regression(ev: GateEvidence, base: float, cand: float) -> GateEvidence:
    from dataclasses import replace

    return replace(ev, baseline_regression=metrics(base), candidate_regression=metrics(cand),
                   regression=paired_bootstrap(per_task(base), per_task(cand)))


def test_refuses_a_candidate_that_regresses_on_the_regression_split():
    ok, reasons = gate(_with_regression(evidence(0.2, 0.6), base=0.5, cand=0.2))
    assert not ok
    line = next(r for r in reasons if r.startswith("regression split"))
    assert "80 labelled failures" in line and "0.500 → 0.200" in line and line.endswith("regresses, refused")


def test_a_regression_split_held_or_improved_passes_and_its_evidence_is_a_reason():
    ok, reasons = gate(_with_regression(evidence(0.2, 0.6), base=0.3, cand=0.4))
    assert ok, reasons
    assert any(r.startswith("regression split (80 labelled failures) 0.300 → 0.400") and r.endswith(": ok")
               for r in reasons)


def test_a_small_regression_drop_is_allowed_only_by_the_setting():
    ev = _with_regression(evidence(0.2, 0.6), base=0.5, cand=0.4875)  # one task of 80 lost: not significant
    assert not gate(ev)[0]
    assert gate(ev, GateSettings(max_regression_drop=0.02))[0]


def test_without_a_regression_split_the_gate_says_it_was_not_checked():
    ok, reasons = gate(evidence(0.2, 0.6))
    assert ok and reasons[-1] == "regression split: not checked (the pack has no regression split)"
    assert GateSettings.__dataclass_fields__["max_regression_drop"].metadata["help"]


def test_collect_evidence_measures_the_regression_split_when_the_pack_has_one(tmp_path, monkeypatch):
    import json
    import shutil
    from pathlib import Path

    from appliance import promotion

    tasks = Path(__file__).resolve().parents[1] / "tasks"
    root = tmp_path / "tasks"
    shutil.copytree(tasks / "workplace-multi", root / "workplace-multi")
    row = json.loads((root / "workplace-multi" / "val.jsonl").read_text(encoding="utf-8").splitlines()[0])
    row["id"] = "regression-0"
    (root / "workplace-multi" / "regression.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    manifest = root / "workplace-multi" / "pack.toml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace(
        "[splits]\n", '[splits]\nregression = "regression.jsonl"\n', 1), encoding="utf-8")
    measured = []

    def fake(model, adapter, pack, split, *args, **kwargs):
        measured.append((adapter, split))
        rate = 0.0 if (adapter, split) == ("cand", "regression") else 1.0
        return promotion._Measured(metrics(rate), {"regression-0": rate})

    monkeypatch.setattr(promotion, "_measure", fake)
    ev = promotion.collect_evidence("cand", None, model="m", pack="workplace-multi", tasks_root=str(root),
                                    workspace=None, s=GateSettings())
    assert (None, "regression") in measured and ("cand", "regression") in measured
    ok, reasons = gate(ev)
    assert not ok and any(r.startswith("regression split (1 labelled failures) 1.000 → 0.000") for r in reasons)


def test_the_gate_reuses_a_stored_eval_only_when_it_was_decoded_the_same_way(tmp_path, monkeypatch, tiny_model_dir):
    """A pipeline's free baseline eval cannot stand in for a strict gate's baseline (or the other way round)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    import appliance.evaluate as evaluate
    from appliance import promotion
    from appliance.evaluate import EvalSettings, run_eval
    from appliance.packs import load_pack
    from appliance.store import Workspace
    from eval_support import ScriptedGenerator, expected_answer_for

    tasks = str(Path(__file__).resolve().parents[1] / "tasks")
    ws = Workspace.open(tmp_path / "ws")
    scripted = ScriptedGenerator(AutoTokenizer.from_pretrained(tiny_model_dir),
                                 expected_answer_for(load_pack("workplace-single", root=tasks), "val"))
    stored = run_eval(EvalSettings(split="val", limit=4, tasks_root=tasks), workspace=ws, generator=scripted).eval_id
    run = evaluate.run_eval
    fresh = []
    monkeypatch.setattr(evaluate, "run_eval", lambda settings, **kw: fresh.append(settings.strict) or run(
        settings, generator=scripted, **kw))
    for strict in (False, True):
        promotion._measure("m", None, "workplace-single", "val", GateSettings(limit=4, strict=strict), tasks, ws,
                           lambda event: None, reuse_eval=stored)
    assert fresh == [True]  # the free gate reused the stored free eval; the strict one evaluated again, strictly
