"""Held-out eval as a training callback: `on_eval(adapter_dir, step) -> metrics`.

The trainer calls it at every checkpoint; it evaluates the saved adapter on the
pack's held-out split (greedy, a fixed subset on a CPU so a check takes about a
minute), stores the eval, and returns the numbers the reward-hacking alarm and
the checkpoint manifest keep, each checkpoint read at its own answer budget
(appliance.checkpoints.answer_tokens_of: room for the checks SFT taught it). With
a fit split it also answers the first tasks of the run's own training split, so
under- and overfitting show next to held-out success (returned under `fit`, kept
apart from the held-out numbers).
"""
from __future__ import annotations

from typing import Any, Callable

from appliance.events import EventSink, null_sink
from appliance.generate.strict import STRICT_BY_DEFAULT

HELDOUT_KEYS = ("execution_success_rate", "valid_json_rate", "unsafe_action_rate", "mean_reward",
                "latency_p95_s", "pass@1")


def make_heldout_eval(*, model: str, pack: str, workspace: Any, split: str = "val", limit: int | None = 32,
                      k: int = 1, tasks_root: str = "tasks", sink: EventSink = null_sink,
                      max_new_tokens: int | None = None,
                      strict: bool = STRICT_BY_DEFAULT, fit_split: str | None = None,
                      fit_limit: int = 0) -> Callable[[str, int], dict[str, Any]]:
    from appliance.evaluate.runner import EvalSettings, load_generator, run_eval

    # Checked now, not at the first checkpoint: a bad limit should not cost a training run.
    EvalSettings(model=model, pack=pack, split=split, k=k, limit=limit, tasks_root=tasks_root,
                 max_new_tokens=max_new_tokens, strict=strict).validate()
    fits = bool(fit_split and fit_limit)

    def on_eval(adapter_dir: str, step: int, engine: Any = None, tokenizer: Any = None,
                run_id: str | None = None) -> dict[str, Any]:
        """`engine`: the trainer's colocated vLLM (Unsloth) — reused with the adapter, never a second engine."""
        def settings_for(on_split: str, on_limit: int | None) -> EvalSettings:
            return EvalSettings(model=model, adapter=str(adapter_dir), pack=pack, split=on_split, k=k,
                                limit=on_limit, tasks_root=tasks_root, max_new_tokens=max_new_tokens,
                                run_id=run_id, strict=strict)

        # The held-out eval and the fit check answer with one loaded copy of the checkpoint.
        if engine is not None:
            from appliance.generate import make_generator

            generator, reason = make_generator("auto", engine=engine, adapter=adapter_dir, tokenizer=tokenizer)
        else:
            generator, reason = load_generator(settings_for(split, limit))

        def evaluate(on_split: str, on_limit: int | None) -> Any:
            return run_eval(settings_for(on_split, on_limit), workspace=workspace, sink=sink, generator=generator,
                            backend_reason=reason)

        report = evaluate(split, limit)
        metrics = {key: report.metrics.get(key) for key in HELDOUT_KEYS}
        metrics["heldout_success"] = report.metrics["execution_success_rate"]
        metrics["eval_id"] = report.eval_id
        metrics["split"] = split
        metrics["step"] = step
        if fits:
            fit = evaluate(str(fit_split), fit_limit)
            metrics["fit"] = {"split": fit_split, "n_tasks": fit.metrics.get("n_tasks"),
                              "success": fit.metrics["execution_success_rate"], "eval_id": fit.eval_id}
        return metrics

    return on_eval
