"""`appliance verify`: score a JSONL of outputs against a pack split and store the verdicts.

Each line is {"task_id": ..., "output": "..."} ("completion" is accepted too). The
verdicts are stored as an eval (backend "file") so the same SQL and audit work.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.evaluate.decision import recommend
from appliance.evaluate.metrics import ScoredSample, summarize
from appliance.evaluate.scoring import declining_everything, make_scorer
from appliance.evaluate.storage import EvalWriter


@dataclass
class _FileSettings:
    model: str
    adapter: str | None
    split: str
    k: int
    backend: str = "file"


def _read_outputs(path: str) -> list[tuple[str, str]]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ApplianceError(f"cannot read {path}: {err.strerror}.") from err
    except UnicodeDecodeError as err:
        raise ApplianceError(f"{path} is not UTF-8 text (invalid byte at offset {err.start}); pass a JSONL file of "
                             "outputs.") from err
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            output = obj["output"] if "output" in obj else obj["completion"]
            rows.append((str(obj["task_id"]), output if isinstance(output, str) else json.dumps(output)))
        except (ValueError, KeyError, TypeError) as err:
            raise ApplianceError(f"{path} line {number}: expected a JSON object with task_id and output "
                                 f"({type(err).__name__}).") from err
    if not rows:
        raise ApplianceError(f"{path} holds no outputs; write one JSON object with task_id and output per line.")
    return rows


def verify_outputs_file(path: str, *, pack_name: str, split: str, scheme: str | None, tasks_root: str,
                        workspace: Any) -> dict[str, Any]:
    from appliance.packs import load_pack

    pack = load_pack(pack_name, root=tasks_root)
    tasks = {t.id: t for t in pack.tasks(split)}
    scorer = make_scorer(pack)
    if scheme:
        scorer.scheme = scheme
    started = time.perf_counter()
    samples, seen = [], Counter()
    for task_id, output in _read_outputs(path):
        if task_id not in tasks:
            raise ApplianceError(f"{path}: task {task_id!r} is not in {pack.name}/{split}.")
        verdict = scorer.score_text(tasks[task_id], output)
        reward = scorer.reward(verdict)
        samples.append(ScoredSample(task_id, seen[task_id], output, verdict, reward.total, reward.components,
                                    0.0, 0, 0))
        seen[task_id] += 1
    k = max(seen.values(), default=1)
    answered = [tasks[t] for t in seen]
    metrics = summarize(samples, answered, k, time.perf_counter() - started,
                        declining_everything(pack, answered, scorer))
    eval_id = workspace.new_id("verify")
    writer = EvalWriter(workspace, _FileSettings(model=f"file:{Path(path).name}", adapter=None, split=split, k=k),
                        pack)
    writer.write_samples(eval_id, samples, {})
    writer.write_eval(eval_id, metrics, recommend(metrics), "scored from a file", False)
    return {"eval_id": eval_id, "pack": pack.name, "split": split, "n_outputs": len(samples),
            "execution_success_rate": metrics["execution_success_rate"], "buckets": metrics["buckets"]}
