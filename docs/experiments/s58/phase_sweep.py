"""Greedy decoding in phases of 16, 24 and 32 new tokens on dev's 120 tasks, in `appliance eval`'s batches
(speed only: every phase length gives the same tokens; a read, session 58).

    .venv/bin/python docs/experiments/s58/phase_sweep.py [ADAPTER]
"""
import sys

sys.path.insert(0, "bench")
from bench_eval_batches import eval_batches, run  # noqa: E402

from appliance.generate import hf  # noqa: E402
from appliance.generate.hf import HFGenerator  # noqa: E402

generator = HFGenerator.load("smollm2-135m", adapter=sys.argv[1] if len(sys.argv) > 1 else None, batch_size=32)
_, batches = eval_batches(generator, "dev", 120)
run(generator, [batches[0][:2]])  # warm-up
for tokens in (16, 24, 32):
    hf.DECODE_PHASE_TOKENS = tokens
    print(f"phase_{tokens}_s: {run(generator, batches)[0]:.1f}", flush=True)
