"""`make docs-check`: run the README's tour for real, in a scratch folder, as a new user would.

Each `$A …` line of the tour runs with `A` = this checkout's `appliance`; a `<placeholder>` is filled from
what the earlier lines made (the newest SFT/GRPO run folder, the held-out eval each one stored). The last
line (the cockpit) is interactive; the TUI tests drive it. Exit 0 when every line exits 0.

    .venv/bin/python tests/readme_tour.py [--keep]
"""
from __future__ import annotations

import csv
import io
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from readme_commands import argv, tour

from appliance.cli import EXIT_NOT_PROMOTED

ROOT = Path(__file__).resolve().parent.parent
APPLIANCE = str(Path(sys.executable).parent / "appliance")


def _newest_run(scratch: Path, stage: str) -> str:
    runs = sorted((scratch / "checkpoints").glob(f"{stage}-*"))
    if not runs:
        raise SystemExit(f"docs-check: the tour made no {stage} run before it needed one")
    return runs[-1].name


def _heldout_eval(scratch: Path, run: str) -> str:
    query = f"SELECT id FROM evals WHERE adapter LIKE '%{run}%' AND status = 'finished' ORDER BY started_at DESC"
    out = subprocess.run([APPLIANCE, "sql", query, "--format", "csv"], cwd=scratch, check=True, text=True,
                         capture_output=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows:
        raise SystemExit(f"docs-check: run {run} stored no finished held-out eval")
    return rows[0]["id"]


def _values(scratch: Path, line: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for stage in ("sft", "grpo"):
        if f"<{stage}-" in line:
            run = _newest_run(scratch, stage)
            values[f"{stage}-run"] = run
            if f"<{stage}-eval-id>" in line:
                values[f"{stage}-eval-id"] = _heldout_eval(scratch, run)
    return values


def main() -> int:
    keep = "--keep" in sys.argv[1:]
    scratch = Path(tempfile.mkdtemp(prefix="docs-check-"))
    (scratch / "tasks").symlink_to(ROOT / "tasks")
    env = {**os.environ, "A": APPLIANCE}
    failures = 0
    for line in tour():
        words = argv("appliance" + line[2:], _values(scratch, line))
        if not words:
            print(f"skip  {line}  (the cockpit is interactive; tests/test_tui_*.py drive it)")
            continue
        started = time.perf_counter()
        done = subprocess.run([APPLIANCE, *words], cwd=scratch, env=env, text=True, capture_output=True)
        took = time.perf_counter() - started
        # The gate refusing a tour-sized adapter is an answer, not a broken command.
        refused = words[0] == "promote" and done.returncode == EXIT_NOT_PROMOTED
        status = "ok  " if done.returncode == 0 else "ok (not promoted)" if refused else f"FAIL({done.returncode})"
        print(f"{status}  {took:6.0f}s  $A {shlex.join(words)}", flush=True)
        if done.returncode != 0 and not refused:
            failures += 1
            print(done.stderr[-2000:], file=sys.stderr)
    print(f"docs-check: {len(tour()) - failures} of {len(tour())} tour lines ok; scratch {scratch}"
          + ("" if keep else " (removed)"))
    if not keep:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
