"""The vLLM backend (written against vLLM 0.33's offline API).

Two ways in: build our own `vllm.LLM`, or reuse an engine that already exists,
namely Unsloth's colocated model (`fast_inference=True`), whose `fast_generate`
is vLLM's `generate` and whose `load_lora(dir, load_tensors=True)` turns a saved
adapter into a `LoRARequest` from live tensors. vLLM is imported only here,
inside functions, so nothing else in the engine needs it installed.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.generate.base import Generator, Sample


class VLLMGenerator(Generator):
    """Generation through vLLM; `engine` is a `vllm.LLM` or an Unsloth model with `fast_generate`."""

    name = "vllm"

    def __init__(self, engine: Any, *, adapter: str | Path | None = None, tokenizer: Any = None) -> None:
        self.engine = engine
        self.adapter = Path(adapter) if adapter is not None else None
        self._adapter_ids: dict[str, int] = {}
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Any:
        """The tokenizer prompts are rendered with (its chat template): given, or the engine's own.

        An Unsloth model keeps its vLLM engine as `vllm_engine`; a `vllm.LLM` has `get_tokenizer()`.
        """
        if self._tokenizer is None:
            llm = getattr(self.engine, "vllm_engine", self.engine)
            self._tokenizer = llm.get_tokenizer()
        return self._tokenizer

    @classmethod
    def load(
        cls,
        model_location: str,
        *,
        adapter: str | Path | None = None,
        max_lora_rank: int = 64,
        gpu_memory_utilization: float = 0.6,
        max_model_len: int = 4096,
    ) -> "VLLMGenerator":
        """Start our own engine for a model directory or hub id."""
        vllm = import_vllm()
        engine = vllm.LLM(
            model=model_location,
            enable_lora=adapter is not None,
            max_lora_rank=max_lora_rank,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
        )
        return cls(engine, adapter=adapter)

    def generate(
        self,
        prompts: list[str],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        stop: list[str] | None = None,
        seed: int | None = None,
    ) -> list[list[Sample]]:
        vllm = import_vllm()
        greedy = temperature <= 0
        params = vllm.SamplingParams(
            n=1 if greedy else n,  # greedy samples are identical; decode once and repeat
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens,
            stop=[s for s in stop or () if s] or None,
            seed=seed,
        )
        started = time.perf_counter()
        outputs = self._run(list(prompts), params)
        latency = time.perf_counter() - started
        results = []
        for output in outputs:
            samples = [_sample(choice, len(output.prompt_token_ids or ()), latency) for choice in output.outputs]
            results.append(samples * n if greedy else samples)
        return results

    def _run(self, prompts: list[str], params: Any) -> list[Any]:
        if hasattr(self.engine, "fast_generate"):  # Unsloth's colocated engine
            lora = self.engine.load_lora(str(self.adapter), load_tensors=True) if self.adapter else None
            return self.engine.fast_generate(prompts, sampling_params=params, lora_request=lora)
        return self.engine.generate(prompts, sampling_params=params, lora_request=self._lora_request(), use_tqdm=False)

    def _lora_request(self) -> Any:
        if self.adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        key = str(self.adapter.resolve())
        # vLLM caches adapters by integer id, so a new folder needs a new id.
        adapter_id = self._adapter_ids.setdefault(key, len(self._adapter_ids) + 1)
        return LoRARequest(self.adapter.name, adapter_id, key)


def _sample(choice: Any, prompt_tokens: int, latency: float) -> Sample:
    return Sample(
        text=choice.text,
        completion_tokens=len(choice.token_ids),
        prompt_tokens=prompt_tokens,
        latency_s=latency,
        # vLLM says "abort" for cancelled requests; anything but "length" ended on its own terms.
        finish_reason="length" if choice.finish_reason == "length" else "stop",
    )


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise ApplianceError(
            "vLLM is not installed; install the GPU extra with `pip install 'rl-appliance[gpu]'` or use --backend hf."
        ) from None
    return vllm
