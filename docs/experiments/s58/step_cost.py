"""One greedy decode step's seconds by the rows it carries, over a ~750-token cache (a read, session 58).

    .venv/bin/python docs/experiments/s58/step_cost.py [ADAPTER]
"""
import sys
import time

import torch
from transformers import StaticCache

from appliance.generate.hf import HFGenerator

model = HFGenerator.load("smollm2-135m", adapter=sys.argv[1] if len(sys.argv) > 1 else None, batch_size=32).model
for rows in (32, 16, 8, 4, 2):
    cache, prompt = StaticCache(config=model.config, max_cache_len=900), 750
    ids = torch.randint(100, 1000, (rows, prompt))
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(prompt))
        started = time.time()
        for step in range(20):
            model(input_ids=ids[:, :1], past_key_values=cache, use_cache=True,
                  cache_position=torch.tensor([prompt + step]), attention_mask=torch.ones(rows, 900, dtype=torch.long))
        print(f"step_s_{rows}_rows: {(time.time() - started) / 20:.3f}")
