"""Which train tasks a GRPO run samples from: the ones its starting policy is unsure about.

A GRPO group only teaches when its rewards differ: a group whose samples all
succeed, or all fail, has zero advantage everywhere and moves nothing. Before
training, each single-turn train task is scored with the probability `p` that
sampling at the run's temperature yields its expected answer exactly (one
teacher-forced forward pass, `HFGenerator.completion_logprobs`). A group of n
samples then differs with chance at least `1 - p^n - (1 - p)^n` when the
expected answer is the only one that succeeds (equivalent answers only add to
`p`). `task_selection=uncertain` keeps the `steps x prompts_per_step` tasks
with the highest chance, so each step's prompts are ones it can learn from
(`x (1 + resample_flat_groups)` with dynamic sampling, which refills flat groups from the same pool).

Measured in `make run` (workplace-single's 600 train tasks, its SFT adapter,
smollm2-135m, T 1.0): a group of 4 varies with chance 0.42 on average over all
tasks and 0.86 on the 120 kept, and 19% of the groups were flat in training
(65% without screening); screening took 2.3 minutes on 2 CPU cores. The scores go into the run's events (`tasks_screened`, queryable with
SQL) and into `runs/<run_id>/screening.json`, which a resumed run reuses, so it
trains on the same tasks.

Multi-turn packs are not screened: their `expected` lists only the
state-changing calls, not the whole episode, so there is no exact answer to
score. The unsloth backend does not screen yet (`supports_screening`).
"""
from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..events import Log, Progress, TasksScreened

SCREENING_FILE = "screening.json"


@dataclass(frozen=True)
class ScreenedTask:
    task_id: str
    gold_logprob: float  # log-probability of sampling the expected answer exactly
    variance_chance: float  # chance a group of n samples has rewards that differ
    selected: bool = False


def variance_chance(success_probability: float, group_size: int) -> float:
    """Chance that n independent samples are neither all successes nor all failures."""
    p = min(max(success_probability, 0.0), 1.0)
    return 1.0 - p ** group_size - (1.0 - p) ** group_size


def select_uncertain(scored: list[ScreenedTask], keep: int, template_of: dict[str, str] | None = None, *,
                     no_call: frozenset[str] = frozenset(), max_no_call: int | None = None) -> list[ScreenedTask]:
    """Mark the `keep` tasks most likely to give a group with varied rewards (ties: task order).

    With `template_of` (task id -> template) the ranking is taken round-robin over templates: each
    template's most uncertain task first, then each one's second, and so on, so the curriculum covers
    every intent (task_selection=uncertain_by_template). Without it every task is its own template, which
    is the plain global ranking.

    Why per template: the exact probability of a long answer is small even when the model often gets it
    right, so a global ranking keeps mostly short answers. In `make run` (commit c596da5) 63 of the 120
    kept tasks expected no call and 43 were deletes by id; neither rl-only update template was kept, and
    GRPO taught the model to drop `field` and `new_value` on held-out update requests (docs/learning.md).

    `max_no_call` caps how many of the kept tasks are in `no_call` (tasks whose answer is to make no call);
    the ranking goes on past the capped ones. Why: with a third of the pool refusals, an empty answer is the
    cheapest thing to sample right, and in `make run` (commit f97fa52) GRPO learnt to decline actions too.
    """
    template_of = template_of or {}
    by_template: dict[str, list[int]] = defaultdict(list)
    for i in sorted(range(len(scored)), key=lambda i: -scored[i].variance_chance):
        by_template[template_of.get(scored[i].task_id, scored[i].task_id)].append(i)
    order = sorted(by_template.values(), key=lambda ranked: -scored[ranked[0]].variance_chance)
    interleaved = [ranked[r] for r in range(max(map(len, order), default=0)) for ranked in order if r < len(ranked)]
    chosen = set(_take(interleaved, max(keep, 0), lambda i: scored[i].task_id in no_call, max_no_call))
    return [replace(task, selected=i in chosen) for i, task in enumerate(scored)]


def _take(ranked: list[int], keep: int, capped: Callable[[int], bool], cap: int | None) -> list[int]:
    """The first `keep` of `ranked`, taking at most `cap` of those `capped` says are capped."""
    taken: list[int] = []
    capped_left = keep if cap is None else max(cap, 0)
    for index in ranked:
        if len(taken) == keep:
            break
        if capped(index):
            if capped_left == 0:
                continue
            capped_left -= 1
        taken.append(index)
    return taken


def select_uncertain_by_template(scored: list[ScreenedTask], keep: int, template_of: dict[str, str]) -> list[ScreenedTask]:
    """`select_uncertain` taken round-robin over `template_of`'s templates."""
    return select_uncertain(scored, keep, template_of)


def gold_logprobs(pack: Any, model: Any, tokenizer: Any, tasks: list[Any], *, temperature: float = 1.0,
                  on_progress: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """task id -> log-probability of sampling its expected answer exactly (the prompt eval renders).

    Tasks that share a tool list share their whole prompt head, so they are scored together: one prefill each.
    """
    from ..generate.hf import HFGenerator
    from ..prompting import reference_answer
    from .common import prompt_for, tools_shown
    from .rollout import sampling_mode

    by_tools: dict[str, list[Any]] = defaultdict(list)
    for task in tasks:
        by_tools[json.dumps(tools_shown(pack, task), sort_keys=True, default=str)].append(task)
    generator = HFGenerator(model, tokenizer, batch_size=16)
    logprob: dict[str, float] = {}
    with sampling_mode(model):
        for group in by_tools.values():
            values = generator.completion_logprobs([prompt_for(pack, tokenizer, task) for task in group],
                                                   [reference_answer(task) for task in group],
                                                   temperature=temperature)
            logprob.update((task.id, value) for task, value in zip(group, values))
            if on_progress is not None:
                on_progress(len(logprob), len(tasks))
    return logprob


def score_tasks(run: Any, model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> list[ScreenedTask]:
    """Score every row's expected answer under the starting policy."""
    config = run.config
    logprob = gold_logprobs(run.pack, model, tokenizer, [run.pack.task(row["task_id"]) for row in rows],
                            temperature=config.temperature,
                            on_progress=lambda done, total: run.emit(
                                Progress(run_id=run.run_id, stage="screen", done=done, total=total)))
    return [ScreenedTask(row["task_id"], logprob[row["task_id"]],
                         variance_chance(math.exp(logprob[row["task_id"]]), config.num_generations))
            for row in rows]


def screen_rows(run: Any, model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GRPO dataset rows for `config.task_selection`: all of them, or the uncertain ones (globally or per
    template)."""
    config = run.config
    skipped = screening_skipped(run)
    if skipped is not None:
        if skipped:
            run.emit(Log(run_id=run.run_id, message=skipped))
        return rows
    path = Path(run.run_dir) / SCREENING_FILE
    screened = load_screening(path) if path.is_file() else None
    if screened is None:
        tasks = {row["task_id"]: run.pack.task(row["task_id"]) for row in rows}
        # Dynamic sampling draws its fresh prompts from this pool too: room for each round's.
        keep = config.steps * config.prompts_per_step * (1 + config.resample_flat_groups)
        no_call, cap = frozenset(), None
        if config.max_no_call_share is not None:
            no_call = frozenset(task_id for task_id, task in tasks.items() if not task.expected)
            cap = math.floor(config.max_no_call_share * keep)
        # Under a share of 0 no no-call task can be kept: spend no forward pass scoring them.
        to_score = [row for row in rows if row["task_id"] not in no_call] if config.max_no_call_share == 0 else rows
        scored = score_tasks(run, model, tokenizer, screening_sample(to_score, config))
        templates = None
        if config.task_selection == "uncertain_by_template":
            templates = {task_id: str(task.tags.get("template", task_id)) for task_id, task in tasks.items()}
        screened = select_uncertain(scored, keep, templates, no_call=no_call, max_no_call=cap)
        save_screening(path, screened)
        run.emit(screening_event(run.run_id, screened, config.temperature))
    chosen = {task.task_id for task in screened if task.selected}
    run.emit(Log(run_id=run.run_id, message=summary_line(screened, config.num_generations)))
    return [row for row in rows if row["task_id"] in chosen]


def screening_skipped(run: Any) -> str | None:
    """None when the run screens its pool; else why not, as a log line ('' when task_selection=all asked so)."""
    from .multiturn import is_multi_turn

    if run.config.task_selection == "all":
        return ""
    if not run.backend.supports_screening:
        return (f"task_selection=uncertain is not available on the {run.backend.name} backend yet; training on "
                "every train task")
    if is_multi_turn(run.pack):
        return ("task_selection=uncertain screens single-turn packs only (a multi-turn task has no exact expected "
                "episode); training on every train task")
    return None


def screened_pool_or_fail(run: Any, split: str) -> None:
    """Before any model loads: a pool whose every task expects no call leaves nothing under max_no_call_share 0."""
    from ..errors import ApplianceError
    from .common import fail_run

    screens = screening_skipped(run) is None
    if screens and run.config.max_no_call_share == 0 and not any(task.expected for task in run.pack.tasks(split)):
        raise fail_run(run, ApplianceError(
            f"every task in pack '{run.pack.name}' split '{split}' expects no call, and max_no_call_share 0 keeps "
            "only tasks that need one; pass --max-no-call-share 1 to train on them."))


def screening_sample(rows: list[dict[str, Any]], config: Any) -> list[dict[str, Any]]:
    """The rows to score: all of them, or a seeded sample of `screen_limit` in their original order."""
    limit = config.screen_limit
    if limit is None or len(rows) <= limit:
        return rows
    keep = set(random.Random(config.seed).sample(range(len(rows)), limit))
    return [row for i, row in enumerate(rows) if i in keep]


def summary_line(screened: list[ScreenedTask], group_size: int) -> str:
    def mean_chance(tasks: list[ScreenedTask]) -> float:
        return sum(task.variance_chance for task in tasks) / max(len(tasks), 1)

    chosen = [task for task in screened if task.selected]
    return (f"screened {len(screened)} train tasks: training on the {len(chosen)} most uncertain; a group of "
            f"{group_size} varies with chance {mean_chance(chosen):.2f} on them vs {mean_chance(screened):.2f} "
            f"on all tasks")


def screening_event(run_id: str, screened: list[ScreenedTask], temperature: float) -> TasksScreened:
    return TasksScreened(run_id=run_id, temperature=temperature, tasks=[asdict(task) for task in screened])


def save_screening(path: Path, screened: list[ScreenedTask]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(task) for task in screened], indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_screening(path: Path) -> list[ScreenedTask] | None:
    """The saved screening, or None when the file is unreadable (it is then recomputed)."""
    try:
        return [ScreenedTask(**item) for item in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return None
