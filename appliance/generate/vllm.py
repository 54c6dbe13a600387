"""The vLLM backend (written against vLLM 0.33's offline API).

Two ways in: build our own `vllm.LLM`, or reuse an engine that already exists,
namely Unsloth's colocated model (`fast_inference=True`), which keeps the engine
as `vllm_engine` and whose `fast_generate` is that engine's `generate`. vLLM is
imported only here, inside functions, so nothing else in the engine needs it
installed.

Two rules every path follows:
- Prompts go in as token ids, `tokenizer(text, add_special_tokens=False)`, the
  rule of the transformers path (hf.py) and of training: the rendered chat
  template already holds the BOS, and vLLM tokenizes a text prompt with special
  tokens (vllm/renderers/base.py:524, `add_special_tokens=True`), which doubles
  it for tokenizers that add one (Llama 3's).
- An adapter is served from its folder (a path-based `LoRARequest`). Unsloth's
  `load_lora(dir, load_tensors=True)` would serve the live training tensors
  instead and write the live adapter_config.json into `dir` (unsloth_zoo
  vllm_utils.py:7215-7218 and :5562), so evaluating a saved checkpoint would
  measure the wrong weights and touch a sealed folder; its `load_tensors=False`
  builds a path-based request from the folder (vllm_utils.py:7266).
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from appliance.errors import ApplianceError
from appliance.generate.base import Generator, Sample

# The only max_lora_rank values vLLM accepts (vllm/config/lora.py:27, `MaxLoRARanks`).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds `rank` (Unsloth rounds up the same way:
    unsloth_zoo vllm_utils.py:2765 determine_max_lora_rank)."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ApplianceError(f"LoRA rank {rank} is larger than vLLM serves (at most {VLLM_LORA_RANKS[-1]}); "
                         f"train with a smaller lora_r.")


def colocated_engine(model: Any) -> Any:
    """The vLLM engine an Unsloth model shares its weights with, or None.

    `fast_generate` is no sign of one: Unsloth sets it with `fast_inference=False` too, to the
    transformers generate (unsloth models/llama.py:4222), and sets `vllm_engine` only when it
    starts vLLM (llama.py:4295); `load_lora` exists only then (models/_utils.py:8080-8089).
    """
    return getattr(model, "vllm_engine", None)


def encode_prompts(tokenizer: Any, prompts: list[str]) -> list[list[int]]:
    """Prompt token ids by the one rule: the rendered text as is, no special tokens added."""
    return [list(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]


class VLLMGenerator(Generator):
    """Generation through vLLM; `engine` is a `vllm.LLM` or an Unsloth model with a colocated engine."""

    name = "vllm"

    def __init__(self, engine: Any, *, adapter: str | Path | None = None, tokenizer: Any = None) -> None:
        if hasattr(engine, "fast_generate") and colocated_engine(engine) is None:
            raise ApplianceError("This Unsloth model was loaded without fast_inference, so it has no vLLM engine to "
                                 "sample with; evaluate it with the hf backend.")
        self.engine = engine
        self.adapter = Path(adapter) if adapter is not None else None
        self._adapter_ids: dict[str, int] = {}
        self._tokenizer = tokenizer

    @property
    def tokenizer(self) -> Any:
        """The tokenizer prompts are rendered and encoded with: given, or the engine's own (`get_tokenizer()`)."""
        if self._tokenizer is None:
            llm = colocated_engine(self.engine)
            self._tokenizer = (self.engine if llm is None else llm).get_tokenizer()
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
        rank = max(max_lora_rank, adapter_rank(adapter)) if adapter is not None else max_lora_rank
        engine = vllm.LLM(
            model=model_location,
            enable_lora=adapter is not None,
            max_lora_rank=vllm_lora_rank(rank),
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
        strict_tools: Sequence[Sequence[dict[str, Any]]] | None = None,
    ) -> list[list[Sample]]:
        vllm = import_vllm()
        greedy = temperature <= 0
        common = dict(
            n=1 if greedy else n,  # greedy samples are identical; decode once and repeat
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens,
            stop=[s for s in stop or () if s] or None,
            seed=seed,
        )
        params: Any = vllm.SamplingParams(**common)
        if strict_tools is not None:
            params = [vllm.SamplingParams(**common, structured_outputs=structured_outputs_for(tools))
                      for tools in strict_tools]
        # A TokensPrompt (vllm/inputs/llm.py:111) is taken as is: no second BOS.
        token_prompts = [{"prompt_token_ids": ids} for ids in encode_prompts(self.tokenizer, prompts)]
        started = time.perf_counter()
        outputs = self._run(token_prompts, params)
        latency = time.perf_counter() - started
        results = []
        for output in outputs:
            samples = [_sample(choice, len(output.prompt_token_ids or ()), latency) for choice in output.outputs]
            results.append(samples * n if greedy else samples)
        return results

    def _run(self, prompts: list[dict[str, list[int]]], params: Any) -> list[Any]:
        llm = colocated_engine(self.engine)
        if llm is not None:  # Unsloth's model: its engine, its LoRA request ids
            lora = self.engine.load_lora(str(self.adapter), load_tensors=False) if self.adapter else None
            with _awake(llm):
                return self.engine.fast_generate(prompts, sampling_params=params, lora_request=lora, use_tqdm=False)
        return self.engine.generate(prompts, sampling_params=params, lora_request=self._lora_request(), use_tqdm=False)

    def _lora_request(self) -> Any:
        if self.adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        key = str(self.adapter.resolve())
        # vLLM caches adapters by integer id, so a new folder needs a new id.
        adapter_id = self._adapter_ids.setdefault(key, len(self._adapter_ids) + 1)
        return LoRARequest(self.adapter.name, adapter_id, key)


@contextlib.contextmanager
def _awake(llm: Any) -> Iterator[None]:
    """Wake a colocated engine that training put to sleep, and put it back to sleep afterwards.

    Under standby TRL sleeps the engine after each generation (trl 1.15 vllm_generation.py:750-752,
    level 2) and wakes it only inside its own generate, through Unsloth's patched sync_weights
    (unsloth models/rl_replacements.py:5523, `wake_up()` with no tags); a held-out eval at a
    checkpoint comes between the two. `is_sleeping` is vllm v1/engine/llm_engine.py:443.
    """
    is_sleeping = getattr(getattr(llm, "llm_engine", None), "is_sleeping", None)
    if is_sleeping is None or not is_sleeping():
        yield
        return
    llm.wake_up()
    try:
        yield
    finally:
        llm.sleep(level=2)  # as TRL left it, so training gets its memory back


def structured_outputs_for(tools: Sequence[dict[str, Any]]) -> Any:
    """vLLM's structured outputs for one prompt: the strict answer grammar of its tools (EBNF, xgrammar's dialect).

    `StructuredOutputsParams` lives in vllm/sampling_params.py (vllm 0.33.0, :101) and takes exactly one
    constraint; an EBNF `grammar` (a line with `::=`) goes to the xgrammar backend, as on the hf backend.
    """
    from vllm.sampling_params import StructuredOutputsParams

    from appliance.generate.strict import answer_grammar

    return StructuredOutputsParams(grammar=answer_grammar(tools))


def adapter_rank(adapter: str | Path) -> int:
    """The LoRA rank a PEFT adapter folder declares (1 when it does not say)."""
    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        return 1
    return int(json.loads(config.read_text(encoding="utf-8")).get("r") or 1)


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
