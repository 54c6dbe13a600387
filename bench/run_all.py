"""Run every benchmark in bench/ as its own process and print their `name: value` lines.

    .venv/bin/python bench/run_all.py [--include-learning]

The learning benchmark (baseline → SFT → GRPO on the embedded model, ~1 hour on
2 cores) runs only with --include-learning. Each script prints its own lines;
this runner prefixes them with the script name.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

FAST = ("bench_world.py", "bench_verify.py", "bench_store.py", "bench_generate.py", "bench_eval_batches.py",
        "bench_eval_order.py", "bench_eval_heads.py", "bench_overhead.py", "bench_train_step.py", "bench_sft_heads.py",
        "bench_strict.py", "bench_compaction_reads.py", "bench_omp_wait.py", "bench_sft_order.py",
        "bench_screening.py", "bench_decode_phases.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--include-learning", action="store_true")
    args = parser.parse_args()
    here = Path(__file__).parent
    scripts = list(FAST) + (["bench_learning.py"] if args.include_learning else [])
    failed = 0
    for script in scripts:
        print(f"# {script}", flush=True)
        proc = subprocess.run([sys.executable, str(here / script)], capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            if ": " in line:
                print(f"{script[:-3]}.{line}", flush=True)
        if proc.returncode != 0:
            failed += 1
            print(f"{script[:-3]}.failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
