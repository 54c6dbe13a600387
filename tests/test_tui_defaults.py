"""The cockpit does what the CLI does: its forms show the engine's defaults and, untouched, pass nothing else."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from textual.widgets import Input, Select

from appliance.cli import build_parser, train_flag
from appliance.train.cli_glue import config_from_args
from appliance.train.config import STAGES, TrainConfig, field_help
from test_tui_support import settle, T0, TASKS_ROOT, build_app
from tui.data import StoreData, init_adapter_default, pack_splits
from tui.screens.evaluate import EVAL_DEFAULTS, eval_args
from tui.screens.train import KNOBS, knob_defaults, train_args

SIZE = (100, 30)
DEFAULTS = TrainConfig()
APP = SimpleNamespace(pack=DEFAULTS.pack, model=DEFAULTS.model, backend="auto")



def field_value(app, field_id: str) -> str:
    """What an Input of the current screen holds."""
    return app.screen.query_one(f"#{field_id}", Input).value


def cli_config(argv: list[str]) -> TrainConfig:
    """The TrainConfig `appliance <argv>` would train with (parsed only; nothing runs)."""
    return config_from_args(build_parser().parse_args(argv))


@pytest.mark.parametrize("kind", STAGES)
def test_every_train_knob_shows_what_a_bare_cli_run_uses(kind):
    config = cli_config(["train", kind])
    shown = knob_defaults(kind)
    for knob in KNOBS:
        engine = config.effective_learning_rate if knob.field == "learning_rate" else getattr(config, knob.field)
        assert (shown[knob.id] == "" and knob.unset) if engine is None else float(shown[knob.id]) == engine, knob
    assert float(knob_defaults("sft")["lr"]) == 1e-3 and float(knob_defaults("grpo")["lr"]) == 5e-5


@pytest.mark.parametrize("kind", STAGES)
def test_an_untouched_train_form_trains_what_a_bare_cli_run_trains(kind):
    args = train_args(APP, kind, DEFAULTS.preset, knob_defaults(kind))
    assert not {train_flag(knob.field) for knob in KNOBS} & set(args) and "--preset" not in args
    assert cli_config(args) == cli_config(["train", kind])


def test_only_knobs_that_differ_from_the_default_are_passed():
    knobs = {**knob_defaults("grpo"), "lr": "5e-5", "steps": "40", "generations": ""}
    args = train_args(APP, "grpo", "dapo", knobs, init_adapter="checkpoints/sft-1/step-20")
    config = cli_config(args)
    assert "--lr" not in args and config.effective_learning_rate == 5e-5
    assert (config.steps, config.preset, config.init_adapter) == (40, "dapo", "checkpoints/sft-1/step-20")
    assert config.num_generations == DEFAULTS.num_generations
    assert "--strict" not in args and "--no-strict" not in args and config.strict == DEFAULTS.strict
    held = cli_config(train_args(APP, "grpo", "dapo", knobs, strict=not DEFAULTS.strict))
    assert held.strict is not DEFAULTS.strict  # the form's strict box reaches the run's config
    # A resumed run keeps its saved config, starting adapter included.
    assert "--init-adapter" not in train_args(APP, "grpo", "grpo", {}, resume="grpo-1", init_adapter="x")


def test_stored_sample_knobs_reach_their_own_kind_only():
    knobs = {**knob_defaults("sft"), "successes-from": "eval-7", "train-split": "train_rl", "pairs-from": "eval-8"}
    config = cli_config(train_args(APP, "sft", DEFAULTS.preset, knobs, init_adapter="ck/sft-1/step-150"))
    assert (config.successes_from, config.train_split, config.pairs_from) == ("eval-7", "train_rl", None)
    dpo = cli_config(train_args(APP, "dpo", DEFAULTS.preset, {**knobs, "rpo-alpha": "1"}))
    assert (dpo.pairs_from, dpo.successes_from, dpo.rpo_alpha, dpo.train_split) == ("eval-8", None, 1.0, "train_rl")
    grpo = train_args(APP, "grpo", DEFAULTS.preset, knobs)
    assert "--successes-from" not in grpo and "--pairs-from" not in grpo  # greyed out for GRPO, as the CLI refuses


def test_eval_defaults_are_the_clis():
    parsed = build_parser().parse_args(["eval"])
    assert (EVAL_DEFAULTS.k, EVAL_DEFAULTS.split) == (parsed.k, parsed.split) == (1, "val")
    args = eval_args(APP, "val", str(EVAL_DEFAULTS.k), "", "")
    assert "-k" not in args and build_parser().parse_args(args).k == parsed.k
    assert build_parser().parse_args(eval_args(APP, "val", "4", "", "")).k == 4
    assert EVAL_DEFAULTS.strict == parsed.strict and build_parser().parse_args(args).strict == parsed.strict
    assert build_parser().parse_args(eval_args(APP, "val", "1", "", "", strict=True)).strict is True
    assert build_parser().parse_args(eval_args(APP, "val", "1", "", "", strict=False)).strict is False


def test_evaluable_splits_leave_out_both_training_pools():
    splits = pack_splits(TASKS_ROOT, "workplace-single")
    assert "dev" in splits and "val" in splits
    assert "train" not in splits and "train_rl" not in splits


def test_grpo_starts_from_the_newest_sft_checkpoint_else_the_promoted_adapter(tmp_path):
    data = StoreData(tmp_path / "runs")
    assert init_adapter_default(data, "smollm2-135m", "workplace-single") == ""  # no store yet: the base model
    data.append("runs", [{"run_id": "grpo-1", "kind": "grpo", "model": "smollm2-135m", "pack": "workplace-single",
                          "started_at": T0}])
    data.append("checkpoints", [{"id": "grpo-1/step-8", "run_id": "grpo-1", "step": 8, "path": "ck/grpo-1/step-8",
                                 "status": "promoted", "promoted": True, "created_at": T0}])
    assert init_adapter_default(data, "smollm2-135m", "workplace-single") == "ck/grpo-1/step-8"
    data.append("runs", [{"run_id": "sft-1", "kind": "sft", "model": "smollm2-135m", "pack": "workplace-single",
                          "started_at": T0 + 10}])
    data.append("checkpoints", [{"id": f"sft-1/step-{s}", "run_id": "sft-1", "step": s, "path": f"ck/sft-1/step-{s}",
                                 "status": "saved", "promoted": False, "created_at": T0 + s} for s in (8, 16)])
    assert init_adapter_default(data, "smollm2-135m", "workplace-single") == "ck/sft-1/step-16"
    assert init_adapter_default(data, "other-model", "workplace-single") == ""  # an adapter fits one base model


@pytest.mark.anyio
async def test_train_form_follows_the_kind_and_keeps_what_the_person_typed(tmp_path):
    app, engine, _ = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("train")
        await settle(app, pilot)
        value = lambda field_id: field_value(app, field_id)  # noqa: E731
        assert {knob.id: value(knob.id) for knob in KNOBS} == knob_defaults("grpo")
        assert value("init-adapter") == "checkpoints/sft-1/step-20"  # the store's SFT checkpoint
        help_for = field_help()
        assert all(app.screen.query_one(f"#{knob.id}", Input).tooltip == help_for[knob.field] for knob in KNOBS)

        app.screen.query_one("#steps", Input).value = "5"
        app.screen.query_one("#kind", Select).value = "sft"
        await pilot.pause()
        assert (value("lr"), value("steps"), value("init-adapter")) == (knob_defaults("sft")["lr"], "5", "")
        assert app.screen.query_one("#generations", Input).disabled
        assert not app.screen.query_one("#successes-from", Input).disabled
        assert app.screen.query_one("#pairs-from", Input).disabled

        app.screen.query_one("#kind", Select).value = "grpo"
        await pilot.pause()
        assert (value("lr"), value("init-adapter")) == (knob_defaults("grpo")["lr"], "checkpoints/sft-1/step-20")
        app.screen.action_start()
        await settle(app, pilot)
        args = engine.calls[-1]
        assert cli_config(args) == TrainConfig(steps=5, init_adapter="checkpoints/sft-1/step-20",
                                               workspace=cli_config(["train", "grpo"]).workspace)


@pytest.mark.anyio
async def test_a_run_that_ends_makes_the_newest_sft_checkpoint_grpos_start(tmp_path):
    app, _, data = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("train")
        await settle(app, pilot)
        assert field_value(app, "init-adapter") == "checkpoints/sft-1/step-20"
        # What the run started from the form stores (its child process writes the store), then the engine exits.
        data.append("runs", [{"run_id": "sft-9", "kind": "sft", "model": app.model, "pack": app.pack,
                              "started_at": T0 + 1000}])
        data.append("checkpoints", [{"id": "sft-9/step-8", "run_id": "sft-9", "step": 8, "path": "checkpoints/sft-9/step-8",
                                     "status": "saved", "promoted": False, "created_at": T0 + 1000}])
        app.screen.action_start()
        await settle(app, pilot)
        assert field_value(app, "init-adapter") == "checkpoints/sft-9/step-8"  # without leaving the screen


@pytest.mark.anyio
async def test_evaluate_form_shows_the_engines_k_and_split(tmp_path):
    app, _, _ = build_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await app.switch_mode("evaluate")
        await pilot.pause()
        assert app.screen.query_one("#k", Input).value == str(EVAL_DEFAULTS.k)
        assert app.screen.query_one("#split", Select).value == EVAL_DEFAULTS.split
