"""CLI command handlers: parse nothing, decide nothing, call the engine, print results.

Each `cmd_<name>(args)` returns an exit code. Output formatting lives in
`appliance.report` so the pipeline and the commands print the same tables.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appliance import report
from appliance.cli import EXIT_NOT_PROMOTED
from appliance.errors import ApplianceError
from appliance.events import Event
from appliance.flywheel.cli import cmd_serve, cmd_trajectories  # noqa: F401 - cli._handler finds them by name
from appliance.recipe.cli import cmd_export_recipe  # noqa: F401 - cli._handler finds it by name


def _workspace(args: argparse.Namespace):
    from appliance.store import Workspace

    workspace = Workspace.open(args.workspace)
    workspace.fail_abandoned()  # a killed eval or run must not read `running` forever
    return workspace


def _event_sink(args: argparse.Namespace, *, baseline_live: bool = False):
    """--events: JSON lines on stdout; otherwise a progress bar and readable lines on stderr
    (`baseline_live`: and the pipeline's baseline tables on stdout as soon as it finishes)."""
    if getattr(args, "events", False):
        def emit(event: Event) -> None:
            print(event.to_line(), flush=True)
        return emit
    return report.HumanSink(baseline_live=baseline_live)


# ---------------------------------------------------------------- tasks

def cmd_tasks(args: argparse.Namespace) -> int:
    from appliance.packs import check_pack, list_packs, load_pack
    from appliance.packs.check import check_notes

    if args.tasks_cmd == "list":
        report.print_pack_list([load_pack(p, root=args.tasks_root) for p in list_packs(args.tasks_root)],
                               fmt=args.format)
        return 0
    if args.tasks_cmd == "stats":
        report.print_pack_stats(load_pack(args.pack, root=args.tasks_root), fmt=args.format)
        return 0
    if args.tasks_cmd == "check":
        names = args.packs or list_packs(args.tasks_root)
        problems = 0
        for name in names:
            pack = load_pack(name, root=args.tasks_root)
            issues = check_pack(pack)
            problems += len(issues)
            report.print_check(pack, issues, check_notes(pack))
        return 1 if problems else 0
    if args.tasks_cmd == "generate":
        from appliance.packs.build import build_workplace_packs

        src = args.workbench or _default_workbench()
        summary = build_workplace_packs(root=args.tasks_root, workbench_src=src, seed=args.seed)
        report.print_json(summary)
        return 0
    if args.tasks_cmd == "new":
        from appliance.userworld.cli import cmd_tasks_new

        return cmd_tasks_new(args)
    if args.tasks_cmd == "expand":
        from appliance.userworld.cli import cmd_tasks_expand

        return cmd_tasks_expand(args)
    if args.tasks_cmd == "from-failures":
        from appliance.flywheel.cli import cmd_tasks_from_failures

        return cmd_tasks_from_failures(args)
    raise ApplianceError(f"unknown tasks command {args.tasks_cmd!r}.")


def _default_workbench() -> str | None:
    for candidate in (Path("../shared/datasets/workbench"), Path(__file__).parents[2] / "shared/datasets/workbench"):
        if (candidate / "data").is_dir():
            return str(candidate)
    return None


# ---------------------------------------------------------------- verify / sql

def cmd_verify(args: argparse.Namespace) -> int:
    from appliance.verify_file import verify_outputs_file

    summary = verify_outputs_file(args.outputs, pack_name=args.pack, split=args.split, scheme=args.reward,
                                  tasks_root=args.tasks_root, workspace=_workspace(args))
    report.print_verify_summary(summary, fmt=args.format)
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    import duckdb

    ws = _workspace(args)
    if args.query:
        try:
            columns, rows = ws.query(args.query)
        except duckdb.Error as err:
            raise ApplianceError(" ".join(str(err).split())) from err
        report.print_records(columns, rows, fmt=args.format, max_rows=args.max_rows)
        return 0
    return report.sql_prompt(ws, fmt=args.format, max_rows=args.max_rows)


# ---------------------------------------------------------------- eval / audit

def cmd_eval(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    if args.compare:
        if len(args.compare) != 3 or args.compare[0] != "compare":
            raise ApplianceError("use `appliance eval compare EVAL_A EVAL_B` to compare two evals.")
        from appliance.evaluate.stored import compare_stored

        report.print_compare(compare_stored(ws, args.compare[1], args.compare[2], tasks_root=args.tasks_root),
                             fmt=args.format)
        return 0
    from appliance.evaluate import EvalSettings, run_eval

    settings = EvalSettings(model=args.model, adapter=args.adapter, pack=args.pack, split=args.split, k=args.k,
                            limit=args.limit, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                            batch_size=args.batch_size, backend=args.backend, seed=args.seed, strict=args.strict,
                            tasks_root=args.tasks_root)
    result = run_eval(settings, workspace=ws, sink=_event_sink(args), allow_interrupt=True)
    if args.events:
        return 0
    if args.format == "table":
        report.print_eval(result)
    else:
        report.print_fields({"eval_id": result.eval_id, **result.metrics}, fmt=args.format)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from appliance import audit

    ws = _workspace(args)
    eval_id = args.eval_id or audit.latest_eval_id(ws)
    sample = audit.draw_sample(ws, eval_id, n=args.n, seed=args.seed)  # an unknown eval is refused first
    if not args.labels and not _stdin_has_input():
        raise ApplianceError("the interactive audit reads answers from stdin, which is closed or empty; run it "
                             "in a terminal, or pass --labels FILE.")
    if args.labels:
        labels = audit.read_labels_file(args.labels)
    else:
        labels = _labels_from_a_person(ws, eval_id, sample)
    audit.record_labels(ws, eval_id, sample, labels)
    report.print_audit(audit.agreement(ws, eval_id))
    if args.export:
        count = audit.export_disagreements(ws, eval_id, args.export)
        print(f"wrote {count} disagreements to {args.export}")
    return 0


def _labels_from_a_person(ws, eval_id: str, sample: list) -> list:
    """The interactive audit; if stdin ends or Ctrl-C comes first, the answers given so far are stored."""
    from appliance import audit

    labels: list = []
    try:
        report.audit_prompt(sample, labels)
    except EOFError:
        audit.record_labels(ws, eval_id, sample, labels)
        raise ApplianceError(f"stdin ended after {len(labels)} of {len(sample)} answers; those were stored, so run "
                             "`appliance audit` again to label the rest (type q to stop early).") from None
    except KeyboardInterrupt:
        audit.record_labels(ws, eval_id, sample, labels)
        raise
    return labels


def _stdin_has_input() -> bool:
    """False when stdin is closed or at its end (`</dev/null`); a terminal or a pipe with data is fine."""
    stdin = sys.stdin
    if stdin is None:
        return False
    if stdin.isatty():
        return True
    peek = getattr(getattr(stdin, "buffer", None), "peek", None)
    if peek is None:
        return True  # cannot tell without consuming; input() will say
    try:
        return bool(peek(1))
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- training and checkpoints

def cmd_train(args: argparse.Namespace) -> int:
    from appliance.models import require_adapter_folder, require_available
    from appliance.train.backends import require_targets_in_adapter
    from appliance.train.cli_glue import config_from_args, train_from_args

    # Every setting is checked here, before a model loads: a bad value costs a second, not a training run.
    if args.config:
        _require_json_object(args.config, "run config")
    try:
        config = config_from_args(args)
    except TypeError as err:  # a JSON value of the wrong kind, e.g. "steps": "ten"
        raise ApplianceError(f"the run config {args.config} has a setting of the wrong type ({err}).") from None
    if not config.resume_from:  # a resumed run uses the model and adapter it was started with
        require_available(config.model)
        if config.init_adapter:
            require_adapter_folder(config.init_adapter)
            require_targets_in_adapter(config)
    result = train_from_args(args, sink=_event_sink(args), workspace=_workspace(args))
    if not args.events:
        report.print_train(result)
    return 0


def _require_json_object(path: str, what: str) -> None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ApplianceError(f"cannot read the {what} {path}: {err.strerror}.") from None
    except UnicodeDecodeError:
        raise ApplianceError(f"the {what} {path} is not UTF-8 text; pass a JSON file.") from None
    except ValueError as err:
        raise ApplianceError(f"the {what} {path} is not valid JSON ({err}).") from None
    if not isinstance(data, dict):
        raise ApplianceError(f"the {what} {path} must hold one JSON object of setting names to values.")


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from appliance import checkpoints

    if args.ck_cmd == "list":
        report.print_checkpoints(checkpoints.list_checkpoints(args.root), checkpoints.current_promoted(args.root),
                                 fmt=args.format)
    elif args.ck_cmd == "show":
        shown = checkpoints.load_checkpoint(checkpoints.resolve_checkpoint(args.checkpoint, args.root))
        report.print_manifest(shown.id, shown.manifest, fmt=args.format)
    else:
        a = checkpoints.load_checkpoint(checkpoints.resolve_checkpoint(args.a, args.root))
        b = checkpoints.load_checkpoint(checkpoints.resolve_checkpoint(args.b, args.root))
        report.print_manifest_diff(a.id, b.id, checkpoints.diff_manifests(a.manifest, b.manifest), fmt=args.format)
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    from appliance.promotion import GateSettings, promote

    decision = promote(args.checkpoint, root=args.root, model=args.model, pack=args.pack,
                       tasks_root=args.tasks_root, workspace=_workspace(args), sink=_event_sink(args),
                       settings=GateSettings(limit=args.limit, strict=args.strict))
    report.print_promotion(decision)
    return 0 if decision.promoted else EXIT_NOT_PROMOTED


def cmd_rollback(args: argparse.Namespace) -> int:
    from appliance import checkpoints

    previous = checkpoints.rollback(args.root, workspace=_workspace(args), reason="appliance rollback")
    print(f"rolled back: the promoted adapter is now {previous['path'] if previous else 'the base model (no adapter)'}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from appliance import checkpoints

    source = checkpoints.resolve_checkpoint(args.checkpoint, args.root)
    _may_write_into(Path(args.merged).expanduser(), force=args.force)
    out = checkpoints.export_merged(source, args.merged)
    print(f"wrote merged safetensors to {out}")
    return 0


def _may_write_into(folder: Path, *, force: bool) -> None:
    """An export never writes over files a person has there unless told to (--force) or asked on a terminal."""
    if folder.exists() and not folder.is_dir():
        raise ApplianceError(f"{folder} is a file; pass a folder (new or empty) to --merged.")
    if force or not folder.is_dir() or not any(folder.iterdir()):
        return
    if not sys.stdin.isatty():
        raise ApplianceError(f"{folder} already holds files; pass --force to write the merged model over them, "
                             "or choose a new folder.")
    if not report.confirm(f"{folder} already holds files; write the merged model over them?"):
        raise ApplianceError(f"nothing was exported and {folder} was left as it was.")


# ---------------------------------------------------------------- pipeline, doctor, ui

def cmd_run(args: argparse.Namespace) -> int:
    from appliance.pipeline import PipelineSettings, run_pipeline

    from appliance.cli import _RUN_FLAGS

    settings = PipelineSettings(tasks_root=args.tasks_root, **{name: getattr(args, name) for _, name, _ in _RUN_FLAGS})
    sink = _event_sink(args, baseline_live=True)
    result = run_pipeline(settings, workspace=_workspace(args), sink=sink)
    report.print_pipeline(result, baseline_shown=getattr(sink, "baseline_shown", None) is not None)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from appliance import doctor

    if args.gpu_smoke:
        return doctor.gpu_smoke(part=args.part, wheels=args.wheels, shape=args.shape)
    if args.wheels is not None:
        raise ApplianceError("--wheels goes with --gpu-smoke: appliance doctor --gpu-smoke --wheels DIR.")
    info = doctor.collect()
    if args.json:
        print(json.dumps(info, default=str))
    else:
        report.print_doctor(info)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """The cockpit is its own program (`python -m tui`): the engine never imports the UI, it hands over."""
    import os

    argv = [sys.executable, "-m", "tui", "--workspace", args.workspace, "--pack", args.pack, "--model", args.model]
    try:
        os.execv(sys.executable, argv)
    except OSError as err:
        raise ApplianceError(f"the terminal UI could not start ({err.strerror}); reinstall with `make setup`.") from err
    return 0

