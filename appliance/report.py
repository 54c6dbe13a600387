"""Printing for the CLI: tables (rich), CSV/JSON rows, progress, interactive prompts.

Everything a command shows a person goes through here, so the pipeline report and
the single commands look the same. No engine logic.
"""
from __future__ import annotations

import csv
import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

from appliance.events import Alarm, Event, EvalFinished, Log, Progress, RunFailed, StepMetrics

console = Console()
err_console = Console(stderr=True)

# The few step metrics worth a line on a terminal; everything else is in the store and the cockpit.
STEP_LINE = (("loss", "loss"), ("reward", "reward/mean"), ("success", "train/success_rate"),
             ("format errors", "train/format_error_rate"), ("flat groups", "frac_reward_zero_std"),
             ("kl", "kl"), ("step s", "time/step_s"))

SEED_METRICS = (
    ("valid JSON rate", "valid_json_rate"),
    ("correct tool rate", "correct_tool_rate"),
    ("correct argument rate", "correct_argument_rate"),
    ("execution success rate", "execution_success_rate"),
    ("unsafe action rate", "unsafe_action_rate"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return "" if value is None else str(value)


def print_json(obj: Any) -> None:
    console.print_json(json.dumps(obj, default=str))


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, fmt: str = "table",
               max_rows: int = 200) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows([[_fmt(v) for v in row] for row in rows])
        return
    if fmt == "json":
        print(json.dumps([dict(zip(columns, row)) for row in rows], default=str))
        return
    table = Table(*columns, show_lines=False)
    for row in rows[:max_rows]:
        table.add_row(*[_fmt(v) for v in row])
    console.print(table)
    if len(rows) > max_rows:
        console.print(f"[dim]… {len(rows) - max_rows} more rows (use --max-rows)[/dim]")


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
        print_rows(columns, rows, fmt=fmt, max_rows=max_rows)


# ---------------------------------------------------------------- packs

def print_pack_list(packs: Iterable[Any]) -> None:
    table = Table("pack", "world", "scorer", "reward", "splits")
    for pack in packs:
        sizes = ", ".join(f"{s} {len(pack.tasks(s))}" for s in pack.splits)
        table.add_row(pack.name, pack.world, pack.manifest["scorer"], pack.reward_scheme, sizes)
    console.print(table)


def print_pack_stats(pack: Any) -> None:
    console.print(f"[bold]{pack.name}[/bold]  data hash {pack.data_hash()[:12]}")
    print_json(pack.stats())


def print_check(pack: Any, issues: Sequence[str]) -> None:
    if not issues:
        console.print(f"[green]ok[/green] {pack.name}: " +
                      ", ".join(f"{s} {len(pack.tasks(s))}" for s in pack.splits))
        return
    console.print(f"[red]{len(issues)} problem(s)[/red] in {pack.name}:")
    for issue in issues:
        console.print(f"  - {issue}")


def print_verify_summary(summary: dict[str, Any]) -> None:
    print_json(summary)


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
    table.add_row("latency p50 / p95", f"{metrics.get('latency_p50_s', 0):.2f}s / {metrics.get('latency_p95_s', 0):.2f}s")
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
    console.print(metrics_table(result.metrics, title=title))
    console.print(buckets_table(result.metrics))
    if "bfcl" in result.metrics:
        table = Table("BFCL category", "accuracy")
        for name, value in result.metrics["bfcl"].items():
            table.add_row(name, f"{value:.1%}")
        console.print(table)
    if result.backend_reason:
        console.print(f"backend: {result.backend_reason}")
    if result.interrupted:
        console.print("[yellow]interrupted: the finished tasks were scored and stored.[/yellow]")
    console.print(f"[bold]recommendation:[/bold] {result.recommendation}")


def print_compare(cmp: dict[str, Any]) -> None:
    table = Table("metric", cmp["a"], cmp["b"], "delta")
    for name, a, b, delta in cmp["deltas"]:
        table.add_row(name, f"{a:.3f}", f"{b:.3f}", f"{delta:+.3f}")
    console.print(table)
    d = cmp["success"]
    console.print(f"success difference over {d.n_tasks} shared tasks: {d.delta:+.3f} "
                  f"({d.confidence:.0%} paired-bootstrap interval {d.low:+.3f} … {d.high:+.3f}) — {d.verdict}")


def print_audit(agreement: dict[str, Any]) -> None:
    table = Table("bucket", "labelled", "agree", "agreement")
    for bucket, row in agreement["by_bucket"].items():
        table.add_row(bucket, str(row["n"]), str(row["agree"]), f"{row['rate']:.0%}")
    console.print(table)
    console.print(f"overall agreement {agreement['rate']:.0%} over {agreement['n']} labels")


def audit_prompt(sample: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Interactive audit: show each output with its verdict and take agree/disagree (+ note)."""
    labels = []
    for i, row in enumerate(sample, 1):
        console.rule(f"{i}/{len(sample)}  task {row['task_id']} sample {row['sample_index']}")
        console.print(f"[bold]request:[/bold] {row.get('request', '')}")
        console.print(f"[bold]output:[/bold] {row['completion']}")
        console.print(f"[bold]verdict:[/bold] {row['bucket']} — {row['reason']}  reward {row['reward']:.2f} "
                      f"{json.dumps(row.get('components') or {})}")
        while True:
            answer = input("agree with the verifier? [a]gree / [d]isagree / [s]kip / [q]uit: ").strip().lower()
            if answer in {"a", "d", "s", "q"}:
                break
        if answer == "q":
            break
        if answer == "s":
            continue
        note = input("note (optional): ").strip()
        labels.append({"task_id": row["task_id"], "sample_index": row["sample_index"],
                       "label": "agree" if answer == "a" else "disagree", "note": note})
    return labels


# ---------------------------------------------------------------- training, checkpoints, promotion

def print_train(result: Any) -> None:
    console.print(f"run {result.run_id}: {len(result.checkpoints)} checkpoint(s); final adapter {result.final_adapter}"
                  f"; {result.wall_time_s:.0f}s")


def print_checkpoints(items: Sequence[Any], promoted: dict[str, Any] | None) -> None:
    if not items:
        console.print("no checkpoints yet — run `appliance train sft` or `appliance run`.")
        return
    table = Table("checkpoint", "stage", "parent", "held-out success", "promoted")
    for item in items:
        heldout = (item.manifest.get("metrics") or {}).get("heldout") or {}
        table.add_row(item.id, str(item.manifest.get("stage", "")), str(item.manifest.get("parent") or ""),
                      _fmt(heldout.get("heldout_success")),
                      "yes" if promoted and promoted.get("id") == item.id else "")
    console.print(table)


def print_promotion(decision: Any) -> None:
    colour = "green" if decision.promoted else "yellow"
    console.print(f"[{colour}]{'promoted' if decision.promoted else 'refused'}[/{colour}]: {decision.summary}")
    for reason in decision.reasons:
        console.print(f"  - {reason}")


def print_pipeline(result: Any) -> None:
    if result.baseline is not None:
        console.print(metrics_table(result.baseline.metrics, title=f"baseline {result.baseline.eval_id}"))
        console.print(buckets_table(result.baseline.metrics))
    console.rule("pipeline report")
    for line in result.lines:
        console.print(line)


def print_doctor(info: dict[str, Any]) -> None:
    table = Table("item", "value")
    for key, value in info.items():
        table.add_row(key, _fmt(value))
    console.print(table)


# ---------------------------------------------------------------- live events for a person

class HumanSink:
    """Renders engine events for a person: a progress bar for Progress, lines for the rest."""

    def __init__(self) -> None:
        self._bar = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, Progress):
            self._progress(event)
            return
        self._close_bar()
        if isinstance(event, StepMetrics):
            shown = "  ".join(f"{label} {event.metrics[key]:.3g}" for label, key in STEP_LINE
                              if isinstance(event.metrics.get(key), (int, float)))
            err_console.print(f"step {event.step}: {shown}", highlight=False)
        elif isinstance(event, Alarm):
            err_console.print(f"[bold red]ALARM ({event.kind}):[/bold red] {event.message}")
        elif isinstance(event, RunFailed):
            err_console.print(f"[red]failed:[/red] {event.error}")
        elif isinstance(event, Log):
            err_console.print(f"[dim]{event.message}[/dim]")
        elif isinstance(event, EvalFinished):
            pass  # the command prints the full report

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
