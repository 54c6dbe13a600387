"""Generation behind one interface: `Generator.generate(prompts, n=..., ...)`.

`make_generator` picks the backend and says why in words, so the CLI and the
TUI can show the choice. Backend modules are imported only when chosen.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from appliance.errors import ApplianceError
from appliance.generate.base import Generator, Sample, trim_at_stop

Backend = Literal["auto", "hf", "vllm"]

__all__ = ["Backend", "Generator", "Sample", "make_generator", "trim_at_stop"]


def make_generator(
    backend: Backend = "auto",
    *,
    model: Any = "smollm2-135m",
    adapter: str | Path | None = None,
    dtype: str | None = None,
    batch_size: int = 16,
    engine: Any = None,
    tokenizer: Any = None,
) -> tuple[Generator, str]:
    """Build a generator for `model` (a spec or ModelRef) and return it with the reason for the backend.

    `engine` is an existing vLLM engine (a `vllm.LLM`, or an Unsloth model with
    `fast_generate`); when given, it is reused instead of loading another copy.
    """
    chosen, reason = choose_backend(backend, engine)
    if chosen == "vllm":
        from appliance.generate.vllm import VLLMGenerator

        if engine is not None:
            return VLLMGenerator(engine, adapter=adapter, tokenizer=tokenizer), reason
        from appliance.models import local_model_dir, resolve_model

        return VLLMGenerator.load(local_model_dir(resolve_model(model)), adapter=adapter), reason
    from appliance.generate.hf import HFGenerator

    return HFGenerator.load(model, adapter=adapter, dtype=dtype, batch_size=batch_size), reason


def choose_backend(backend: Backend = "auto", engine: Any = None) -> tuple[str, str]:
    """('hf' | 'vllm', why) for a requested backend, without loading anything heavy but torch."""
    from appliance.generate.vllm import vllm_available

    if backend not in ("auto", "hf", "vllm"):
        raise ApplianceError(f"Unknown generation backend '{backend}': use auto, hf or vllm.")
    if backend == "hf":
        return "hf", "transformers backend, as requested"
    if engine is not None:
        return "vllm", "reusing the vLLM engine already loaded in this process"
    if backend == "vllm":
        if not vllm_available():
            raise ApplianceError(
                "vLLM is not installed; install the GPU extra with `pip install 'rl-appliance[gpu]'` or use --backend hf."
            )
        return "vllm", "vLLM backend, as requested"
    import torch

    if not torch.cuda.is_available():
        return "hf", "no CUDA GPU found, so generation uses transformers on the CPU"
    if not vllm_available():
        return "hf", "a CUDA GPU is present but vLLM is not installed, so generation uses transformers"
    return "vllm", "a CUDA GPU and vLLM are available, so generation uses vLLM"
