"""Printing for the CLI: tables (rich), CSV/JSON rows, progress, interactive prompts.

Everything a command shows a person goes through here, so the pipeline report and
the single commands look the same. No engine logic. Records (lists of rows, or one
object's fields) go through `print_records` / `print_fields`, which speak every
format in FORMATS; on a terminal tables fit its width, and when stdout is a pipe or
a file nothing is cut, ellipsised or wrapped.
"""
from __future__ import annotations

import csv
import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from appliance.events import Alarm, Event, EvalFinished, Log, Progress, RunFailed, StepMetrics

# The output formats of every command that prints records; the CLI's --format choices come from here.
FORMATS = ("table", "json", "csv")
# Width given to rich when the output is not a terminal: wide enough that no table column is ever shrunk.
_UNBOUNDED_WIDTH = 1 << 16

console = Console()
err_console = Console(stderr=True)
_piped_console = Console(width=_UNBOUNDED_WIDTH)
_piped_err_console = Console(stderr=True, width=_UNBOUNDED_WIDTH)


def out() -> Console:
    """stdout: the terminal's width for a person; unbounded when piped, so an id is never cut or wrapped."""
    return console if console.is_terminal else _piped_console


def err_out() -> Console:
    """stderr, with the same rule as `out`."""
    return err_console if err_console.is_terminal else _piped_err_console


# The few step metrics worth a line on a terminal; everything else is in the store and the cockpit.
STEP_LINE = (("loss", "loss"), ("reward", "reward/mean"), ("success", "train/success_rate"),
             ("format errors", "train/format_error_rate"), ("flat groups", "frac_reward_zero_std"),
             ("kl", "kl"), ("step s", "time/step_s"))
# A sentence printed under the first step line of a run that shows a metric which reads like a bug.
FLAT_GROUPS_NOTE = ("note: flat groups = the share of prompt groups whose samples all got the same reward; "
                    "such a group has zero advantage and gives no learning signal.")
GRPO_LOSS_NOTE = ("note: GRPO's loss is ~0 by construction (advantages are normalised within each group and "
                  "there is no KL term), but its gradient is not; watch reward and success instead.")
# Below this a printed GRPO loss reads as 0.
_ZERO_LOSS = 5e-3

SEED_METRICS = (
    ("valid JSON rate", "valid_json_rate"),
    ("correct tool rate", "correct_tool_rate"),
    ("correct argument rate", "correct_argument_rate"),
    ("execution success rate", "execution_success_rate"),
    ("unsafe action rate", "unsafe_action_rate"),
)


def _fmt(value: Any) -> str:
    """A value in a table cell, for a person: floats to 3 places, a flat dict of counts as `name n, …`."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict) and all(isinstance(v, (int, float, str)) for v in value.values()):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def _csv_cell(value: Any) -> str:
    """A value in a CSV cell, for a script: full precision, nested values as JSON."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def print_json(obj: Any) -> None:
    """One JSON document on stdout, on one line (a script's parser, not rich's pretty-printer, reads it)."""
    print(json.dumps(obj, default=str, ensure_ascii=False))


def print_records(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, fmt: str = "table",
                  title: str | None = None, max_rows: int | None = None, empty: str | None = None) -> None:
    """Rows as a table (a person), a JSON array of objects or CSV with a header (a script).

    `max_rows` and `empty` (the sentence shown instead of an empty table) apply to tables only:
    a script gets every row, and an empty list is `[]` or a lone header.
    """
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")  # a shell reads lines, not CRLF records
        writer.writerow(columns)
        writer.writerows([[_csv_cell(v) for v in row] for row in rows])
        return
    if fmt == "json":
        print_json([dict(zip(columns, row)) for row in rows])
        return
    if not rows and empty:
        out().print(empty, highlight=False)
        return
    table = Table(*columns, title=title)
    shown = rows if max_rows is None else rows[:max_rows]
    for row in shown:
        table.add_row(*[Text(_fmt(v)) for v in row])  # Text: a value is never read as rich markup
    out().print(table)
    if len(rows) > len(shown):
        out().print(f"[dim]… {len(rows) - len(shown)} more rows (use --max-rows)[/dim]")


def print_fields(obj: dict[str, Any], *, fmt: str = "table", title: str | None = None) -> None:
    """One object: the object itself as JSON, else one `field, value` row per (dotted) leaf."""
    from appliance.checkpoints import flatten_fields

    if fmt == "json":
        print_json(obj)
        return
    print_records(("field", "value"), list(flatten_fields(obj).items()), fmt=fmt, title=title)


def sql_prompt(ws: Any, *, fmt: str, max_rows: int) -> int:
    """A minimal interactive SQL prompt; an empty line or Ctrl-D exits."""
    err_console.print("DuckDB SQL over the run store. Tables: runs, rollouts, evals, eval_samples, "
                      "checkpoints, audits, events, alarms. Empty line to quit.")
    while True:
        try:
            query = input("sql> ").strip()
        except EOFError:
            return 0
        if not query:
            return 0
        try:
            columns, rows = ws.query(query)
        except Exception as err:  # noqa: BLE001 - a bad query must not end the session
            err_console.print(f"[red]error:[/red] {err}")
            continue
        print_records(columns, rows, fmt=fmt, max_rows=max_rows)


# ---------------------------------------------------------------- packs

def print_pack_list(packs: Iterable[Any], *, fmt: str = "table") -> None:
    rows = [(pack.name, pack.world, pack.manifest["scorer"], pack.reward_scheme,
             {s: len(pack.tasks(s)) for s in pack.splits}) for pack in packs]
    print_records(("pack", "world", "scorer", "reward", "splits"), rows, fmt=fmt,
                  empty="no task packs here; pass --tasks-root or run `appliance tasks generate`.")


def print_pack_stats(pack: Any, *, fmt: str = "table") -> None:
    from appliance.packs.manifest import SPLIT_ROLES

    rows = [(split, SPLIT_ROLES.get(split, ""), s["count"], s["kinds"], s["domains"], s["sources"],
             s["policy"]["refuse"], s["no_call"]) for split, s in pack.stats().items()]
    print_records(("split", "role", "tasks", "kinds", "domains", "sources", "refusals", "no_call"), rows, fmt=fmt,
                  title=f"{pack.name}, data hash {pack.data_hash()[:12]}")


def print_check(pack: Any, issues: Sequence[str], notes: Sequence[str] = ()) -> None:
    """`appliance tasks check`: problems (the exit code counts them), then notes (weaknesses that do not fail)."""
    if not issues:
        out().print(f"[green]ok[/green] {pack.name}: " +
                    ", ".join(f"{s} {len(pack.tasks(s))}" for s in pack.splits))
    else:
        out().print(f"[red]{len(issues)} problem(s)[/red] in {pack.name}:")
        for issue in issues:
            out().print(f"  - {issue}", markup=False)
    for note in notes:
        out().print("  [yellow]note[/yellow]: ", end="")
        out().print(note, markup=False)


def print_verify_summary(summary: dict[str, Any], *, fmt: str = "table") -> None:
    print_fields(summary, fmt=fmt, title=f"verified {summary.get('n_outputs', 0)} outputs")


# ---------------------------------------------------------------- evals

def metrics_table(metrics: dict[str, Any], title: str = "") -> Table:
    k = metrics.get("k", 1)
    table = Table("metric", "value", title=title or None)
    for label, key in SEED_METRICS:
        table.add_row(label, f"{metrics.get(key, 0.0):.1%}")
    table.add_row("pass@1", f"{metrics.get('pass@1', 0.0):.1%}")
    if k > 1:
        table.add_row(f"pass@{k}", f"{metrics.get(f'pass@{k}', 0.0):.1%}")
    table.add_row("mean reward", f"{metrics.get('mean_reward', 0.0):.3f}")
    table.add_row("inconsistent tasks", str(metrics.get("inconsistent_tasks", 0)))
    table.add_row("success on tasks requiring a change",
                  f"{metrics.get('success_on_change_tasks', 0.0):.1%} "
                  f"(of {metrics.get('n_tasks_requiring_change', 0)} tasks)")
    table.add_row("do-nothing floor", f"{metrics.get('do_nothing_floor', 0.0):.1%}")
    # A sample's latency is the wall time of the generation batch it was in, not of one request.
    table.add_row("batch latency p50 / p95",
                  f"{metrics.get('latency_p50_s', 0):.2f}s / {metrics.get('latency_p95_s', 0):.2f}s")
    if "completion_tokens_p95" in metrics:  # what the gate reads as latency (promotion.py)
        table.add_row("tokens a request p50 / p95",
                      f"{metrics['completion_tokens_p50']:.0f} / {metrics['completion_tokens_p95']:.0f}")
    table.add_row("generated tokens/s", f"{metrics.get('tokens_per_s', 0):.1f}")
    table.add_row("tokens (prompt + completion)",
                  f"{metrics.get('total_prompt_tokens', 0)} + {metrics.get('total_completion_tokens', 0)}")
    if "mean_turns" in metrics:
        table.add_row("mean turns", f"{metrics['mean_turns']:.2f}")
        table.add_row("long-horizon failures", json.dumps(metrics.get("long_horizon", {})))
    return table


def buckets_table(metrics: dict[str, Any]) -> Table:
    buckets = metrics.get("buckets", {})
    total = sum(buckets.values()) or 1
    table = Table("failure bucket", "samples", "share")
    for name, count in buckets.items():
        table.add_row(name, str(count), f"{count / total:.1%}")
    return table


def print_eval(result: Any) -> None:
    s = result.settings
    title = f"{result.eval_id}: {s.model}{' + ' + s.adapter if s.adapter else ''} on {s.pack}/{s.split}, k={s.k}"
    out().print(metrics_table(result.metrics, title=title))
    out().print(buckets_table(result.metrics))
    if "bfcl" in result.metrics:
        table = Table("BFCL category", "accuracy")
        for name, value in result.metrics["bfcl"].items():
            table.add_row(name, f"{value:.1%}")
        out().print(table)
    if result.backend_reason:
        out().print(f"backend: {result.backend_reason}", markup=False)
    if result.interrupted:
        out().print("[yellow]interrupted: the finished tasks were scored and stored.[/yellow]")
    out().print(f"[bold]recommendation:[/bold] {result.recommendation}")


def print_compare(cmp: dict[str, Any], *, fmt: str = "table") -> None:
    """Metric deltas, then the paired-bootstrap success difference as the last row (with its interval)."""
    d = cmp["success"]
    rows = [(name, a, b, delta, None, None) for name, a, b, delta in cmp["deltas"]]
    rows.append((f"success, paired over {d.sample}", None, None, d.delta, d.low, d.high))
    print_records(("metric", "a", "b", "delta", "low", "high"), rows, fmt=fmt,
                  title=f"a = {cmp['a']}, b = {cmp['b']}")
    if fmt == "table":
        out().print(f"success difference over {d.sample}: {d.delta:+.3f} ({d.confidence:.0%} paired-bootstrap "
                    f"interval, resampling {d.unit}s: {d.low:+.3f} … {d.high:+.3f}) — {d.verdict}")
        if cmp.get("decoding"):
            out().print(f"note: {cmp['decoding']}")
        print_moved(cmp.get("moved", []))
        print_moved_templates(cmp.get("templates", []))


def print_moved(moved: Sequence[tuple[str, str, int, list[str]]]) -> None:
    """The answers that changed bucket between the two evals (a table for a person; scripts query eval_samples)."""
    from appliance.evaluate.stored import moved_summary

    if not moved:
        out().print(moved_summary(moved))
        return
    print_records(("bucket in a", "bucket in b", "tasks", "e.g."), [(x, y, n, ", ".join(ids)) for x, y, n, ids in moved],
                  title=moved_summary(moved))


def print_moved_templates(moved: Sequence[tuple[str, int, int, int]]) -> None:
    """The templates whose successes changed between the two evals (first samples), largest change first."""
    from appliance.evaluate.stored import moved_templates_summary

    if not moved:
        return
    print_records(("template", "tasks", "right in a", "right in b", "change"),
                  [(name, n, a, b, f"{b - a:+d}") for name, n, a, b in moved], title=moved_templates_summary(moved))


def print_audit(agreement: dict[str, Any]) -> None:
    rows = [(bucket, row["n"], row["agree"], f"{row['rate']:.0%}") for bucket, row in agreement["by_bucket"].items()]
    print_records(("bucket", "labelled", "agree", "agreement"), rows)
    out().print(f"overall agreement {agreement['rate']:.0%} over {agreement['n']} labels")


def audit_prompt(sample: Sequence[dict[str, Any]], labels: list[dict[str, Any]]) -> None:
    """Interactive audit: show each output with its verdict and append agree/disagree (+ note) to `labels`.

    Each answer is in `labels` as soon as it is given, so a caller that meets EOFError or
    KeyboardInterrupt from here still holds every answer so far (a label whose note was cut off
    keeps an empty note).
    """
    for i, row in enumerate(sample, 1):
        console.rule(f"{i}/{len(sample)}  task {row['task_id']} sample {row['sample_index']}")
        console.print(Text.assemble(("request: ", "bold"), str(row.get("request", ""))))
        console.print(Text.assemble(("output: ", "bold"), str(row["completion"])))
        console.print(Text.assemble(("verdict: ", "bold"), f"{row['bucket']} — {row['reason']}  reward "
                                    f"{row['reward']:.2f} {json.dumps(row.get('components') or {})}"))
        while True:
            answer = input("agree with the verifier? [a]gree / [d]isagree / [s]kip / [q]uit: ").strip().lower()
            if answer in {"a", "d", "s", "q"}:
                break
        if answer == "q":
            return
        if answer == "s":
            continue
        label = {"task_id": row["task_id"], "sample_index": row["sample_index"],
                 "label": "agree" if answer == "a" else "disagree", "note": ""}
        labels.append(label)
        label["note"] = input("note (optional): ").strip()


def confirm(question: str) -> bool:
    """Ask a person yes/no on the terminal; anything but yes (or the end of input) is no."""
    try:
        return input(f"{question} [y/N] ").strip().lower() in {"y", "yes"}
    except EOFError:
        return False


# ---------------------------------------------------------------- training, checkpoints, promotion

def print_train(result: Any) -> None:
    from appliance.checkpoints import load_manifest

    scores = scores_line(load_manifest(result.final_adapter)) if result.final_adapter else ""
    out().print(f"run {result.run_id}: {len(result.checkpoints)} checkpoint(s); final adapter {result.final_adapter}"
                f"; {result.wall_time_s:.0f}s{scores}", markup=False)


def scores_line(manifest: dict[str, Any]) -> str:
    """A checkpoint's held-out success and, apart from it, its success on its own training tasks (the fit)."""
    metrics = manifest.get("metrics") or {}
    heldout, fit = metrics.get("heldout") or {}, metrics.get("fit") or {}
    line = ""
    if isinstance(heldout.get("heldout_success"), (int, float)):
        line += f"; held-out success {heldout['heldout_success']:.1%}"
        if heldout.get("split", "val") != "val":
            line += f" on `{heldout['split']}`"
    if isinstance(fit.get("success"), (int, float)):
        line += f"; on {fit.get('n_tasks')} of its own `{fit.get('split')}` tasks {fit['success']:.1%}"
    return line


def print_checkpoints(items: Sequence[Any], promoted: dict[str, Any] | None, *, fmt: str = "table") -> None:
    promoted_id = promoted.get("id") if promoted else None
    rows = [(item.id, item.manifest.get("stage"), item.manifest.get("parent"),
             ((item.manifest.get("metrics") or {}).get("heldout") or {}).get("heldout_success"),
             item.id == promoted_id) for item in items]
    print_records(("checkpoint", "stage", "parent", "heldout_success", "promoted"), rows, fmt=fmt,
                  empty="no checkpoints yet — run `appliance train sft` or `appliance run`.")


def print_manifest(checkpoint_id: str, manifest: dict[str, Any], *, fmt: str = "table") -> None:
    print_fields(manifest, fmt=fmt, title=checkpoint_id)


def print_manifest_diff(a: str, b: str, changes: Sequence[dict[str, Any]], *, fmt: str = "table") -> None:
    print_records(("field", "a", "b"), [(c["field"], c["a"], c["b"]) for c in changes], fmt=fmt,
                  title=f"a = {a}, b = {b}", empty=f"{a} and {b} have the same manifest (apart from created_at).")


def print_promotion(decision: Any) -> None:
    colour = "green" if decision.promoted else "yellow"
    out().print(f"[{colour}]{'promoted' if decision.promoted else 'refused'}[/{colour}]: ", end="")
    out().print(decision.summary, markup=False, highlight=False)
    for reason in decision.reasons:
        out().print(f"  - {reason}", markup=False, highlight=False)


def print_baseline(eval_id: str, metrics: dict[str, Any]) -> None:
    out().print(metrics_table(metrics, title=f"baseline {eval_id}"))
    out().print(buckets_table(metrics))


def print_pipeline(result: Any, *, baseline_shown: bool = False) -> None:
    """The report, in stage order: the baseline's tables (unless shown live as it finished), then the
    pipeline's lines (baseline, recommendation, SFT, GRPO, then the gate's decision and reasons)."""
    if result.baseline is not None and not baseline_shown:
        print_baseline(result.baseline.eval_id, result.baseline.metrics)
    console.rule("pipeline report")
    for line in result.lines:
        out().print(line, markup=False, highlight=False)


def print_doctor(info: dict[str, Any]) -> None:
    table = Table("item", "value")
    for key, value in info.items():
        table.add_row(key, Text(_fmt(value)))
    out().print(table)


# ---------------------------------------------------------------- live events for a person

class HumanSink:
    """Renders engine events for a person: a progress bar for Progress, lines for the rest.

    `baseline_live`: print the first finished eval's tables on stdout as it arrives (the pipeline's
    baseline), so the report reads in stage order; `baseline_shown` then names that eval.
    """

    def __init__(self, *, baseline_live: bool = False) -> None:
        self._bar = None
        self._baseline_live = baseline_live
        self.baseline_shown: str | None = None
        self._explained: set[tuple[str, str]] = set()

    def __call__(self, event: Event) -> None:
        if isinstance(event, Progress):
            self._progress(event)
            return
        self._close_bar()
        if isinstance(event, StepMetrics):
            shown = "  ".join(f"{label} {event.metrics[key]:.3g}" for label, key in STEP_LINE
                              if isinstance(event.metrics.get(key), (int, float)))
            err_out().print(f"step {event.step}: {shown}", highlight=False)
            self._explain(event)
        elif isinstance(event, Alarm):
            err_out().print(Text.assemble((f"ALARM ({event.kind}): ", "bold red"), event.message))
        elif isinstance(event, RunFailed):
            err_out().print(Text.assemble(("failed: ", "red"), event.error))
        elif isinstance(event, Log):
            err_out().print(Text(event.message, style="dim"))
        elif isinstance(event, EvalFinished) and self._baseline_live and self.baseline_shown is None:
            print_baseline(event.eval_id, event.metrics)
            self.baseline_shown = event.eval_id
        # any other EvalFinished: the command prints the full report

    def _explain(self, event: StepMetrics) -> None:
        """The first time in a run a step line shows a metric that reads like a bug, one sentence on why not."""
        metrics = event.metrics
        grpo = "frac_reward_zero_std" in metrics
        notes = []
        if grpo and abs(metrics.get("loss", 1.0)) < _ZERO_LOSS and not metrics.get("kl"):
            notes.append(("loss", GRPO_LOSS_NOTE))
        if grpo:
            notes.append(("flat groups", FLAT_GROUPS_NOTE))
        for key, note in notes:
            if (event.run_id, key) not in self._explained:
                self._explained.add((event.run_id, key))
                err_out().print(Text(f"  {note}", style="dim"))

    def _progress(self, event: Progress) -> None:
        from tqdm import tqdm

        if self._bar is None or self._bar.desc != event.stage:
            self._close_bar()
            # `initial`: work done before the first report does not count towards the rate.
            # tqdm draws the new bar itself; a refresh now would draw the same line twice.
            self._bar = tqdm(total=event.total, initial=event.done, desc=event.stage, file=sys.stderr, leave=False)
            return
        self._bar.total = event.total
        self._bar.n = event.done
        self._bar.refresh()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
