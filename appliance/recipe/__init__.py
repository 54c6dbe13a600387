"""Beyond one GPU: export a run as a multi-GPU TRL launch (export.py; the script is train_grpo.py)."""
