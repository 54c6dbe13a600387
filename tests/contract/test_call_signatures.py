"""Every call our code makes into vLLM and Unsloth fits the pinned source's signature (read with ast),
and the TRL method our GRPO mixin replaces is still the one TRL calls.

The keywords are read from our files (sources.our_calls), so a new argument is
checked without touching this test. A keyword that only a `**kwargs` would
take is a failure, because it would be dropped without a word, except where
vLLM forwards **kwargs to a known class (LLM → EngineArgs).
"""
from __future__ import annotations

import ast

from .sources import (Parameters, check_call_fits, class_fields, find_class, find_function, our_calls, parameters,
                      wheel_tree)

VLLM_FILES = ("appliance/generate/vllm.py", "appliance/gpu_smoke.py")
UNSLOTH_FILES = ("appliance/train/unsloth_backend.py", "appliance/gpu_smoke.py", "appliance/generate/vllm.py")
ENGINE_NAMES = ("engine", "llm", "vllm_engine")  # what we call a vllm.LLM (or Unsloth's copy of its generate)
MODEL_NAMES = ("model", "engine")  # what we call an Unsloth model


def _calls(files: tuple[str, ...], callee: str, receivers: tuple[str, ...] | None = None) -> list:
    calls = [call for path in files for call in our_calls(path, callee, receivers)]
    assert calls, f"found no call to {callee} in {', '.join(files)}: the reader or this test is out of date"
    return calls


def _assert_fit(calls: list, params: Parameters, label: str, **options) -> None:
    problems = [problem for call in calls for problem in check_call_fits(call, params, label, **options)]
    assert not problems, "\n".join(problems)


# --- vLLM ---------------------------------------------------------------------------------------


def _vllm_llm() -> ast.ClassDef:
    return find_class(wheel_tree("vllm", "vllm/entrypoints/llm.py"), "LLM")


def test_llm_constructor_takes_what_we_pass():
    init = parameters(find_function(_vllm_llm(), "__init__"), bound=True)
    assert init.var_keyword, "LLM.__init__ no longer forwards **kwargs to EngineArgs"
    engine_args = frozenset(class_fields(find_class(wheel_tree("vllm", "vllm/engine/arg_utils.py"), "EngineArgs")))
    assert {"enable_lora", "max_lora_rank", "max_model_len"} <= engine_args
    _assert_fit(_calls(VLLM_FILES, "LLM"), init, "vllm.LLM", also_accepted=engine_args)


def test_generate_takes_what_we_pass():
    generate = parameters(find_function(_vllm_llm(), "generate"), bound=True)
    assert generate.positional[:2] == ("prompts", "sampling_params")
    assert {"lora_request", "use_tqdm"} <= generate.keyword
    _assert_fit(_calls(VLLM_FILES, "generate", ENGINE_NAMES), generate, "LLM.generate")
    # Unsloth's fast_generate is the engine's generate (unsloth models/llama.py, the fast_inference branch).
    _assert_fit(_calls(VLLM_FILES, "fast_generate"), generate, "fast_generate (LLM.generate)")


def test_sampling_params_have_the_fields_we_set():
    cls = find_class(wheel_tree("vllm", "vllm/sampling_params.py"), "SamplingParams")
    fields = class_fields(cls)
    _assert_fit(_calls(VLLM_FILES, "SamplingParams"), Parameters(fields, frozenset(fields), False),
                "SamplingParams")


def test_lora_request_takes_name_id_path_in_that_order():
    fields = class_fields(find_class(wheel_tree("vllm", "vllm/lora/request.py"), "LoRARequest"))
    assert fields[:3] == ("lora_name", "lora_int_id", "lora_path"), fields  # we pass these three positionally
    _assert_fit(_calls(VLLM_FILES, "LoRARequest"), Parameters(fields, frozenset(fields), False), "LoRARequest")


def test_outputs_have_the_attributes_we_read():
    tree = wheel_tree("vllm", "vllm/outputs.py")
    request_output = parameters(find_function(find_class(tree, "RequestOutput"), "__init__"), bound=True)
    assert {"prompt_token_ids", "outputs"} <= request_output.keyword
    assert {"text", "token_ids", "finish_reason"} <= set(class_fields(find_class(tree, "CompletionOutput")))


def test_lora_ranks_are_the_ones_vllm_accepts():
    from appliance.train.config import TrainConfig

    tree = wheel_tree("vllm", "vllm/config/lora.py")
    alias = next(node for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "MaxLoRARanks" for t in node.targets))
    accepted = tuple(ast.literal_eval(element) for element in alias.value.slice.elts)  # Literal[1, 8, ...]
    assert TrainConfig().max_lora_rank in accepted
    from appliance.generate import vllm as our_vllm

    ours = tuple(our_vllm.VLLM_LORA_RANKS)
    assert ours == accepted, f"we round max_lora_rank to one of {ours}, vLLM accepts {accepted}"


# --- Unsloth ------------------------------------------------------------------------------------


def _fast_language_model() -> ast.ClassDef:
    return find_class(wheel_tree("unsloth", "unsloth/models/loader.py"), "FastLanguageModel")


def test_from_pretrained_takes_what_we_pass():
    signature = parameters(find_function(_fast_language_model(), "from_pretrained"))
    assert {"fast_inference", "max_lora_rank", "gpu_memory_utilization", "load_in_4bit"} <= signature.keyword
    _assert_fit(_calls(UNSLOTH_FILES, "from_pretrained", ("FastLanguageModel",)), signature,
                "FastLanguageModel.from_pretrained")


def test_get_peft_model_takes_what_we_pass():
    # FastLanguageModel.get_peft_model(model, *args, **kwargs) hands everything to FastLlamaModel's.
    wrapper = find_function(_fast_language_model(), "get_peft_model")
    assert "FastLlamaModel.get_peft_model(model, *args, **kwargs)" in ast.unparse(wrapper)
    llama = find_class(wheel_tree("unsloth", "unsloth/models/llama.py"), "FastLlamaModel")
    signature = parameters(find_function(llama, "get_peft_model"))
    _assert_fit(_calls(UNSLOTH_FILES, "get_peft_model", ("FastLanguageModel",)), signature,
                "FastLlamaModel.get_peft_model")


def test_load_lora_takes_what_we_pass():
    # Unsloth binds unsloth_zoo's load_lora(model, save_directory, load_tensors, ...) to the model.
    signature = parameters(find_function(wheel_tree("unsloth_zoo", "unsloth_zoo/vllm_utils.py"), "load_lora"),
                           bound=True)
    assert signature.positional[:2] == ("save_directory", "load_tensors")
    _assert_fit(_calls(UNSLOTH_FILES, "load_lora", MODEL_NAMES), signature, "model.load_lora")


# --- TRL ----------------------------------------------------------------------------------------


def test_trl_tokenizes_text_prompts_in_the_method_our_mixin_replaces():
    # backends.RenderedPromptIds replaces GRPOTrainer._tokenize_prompts so a text prompt is tokenized
    # without special tokens (no second BOS); that only holds while TRL tokenizes there and nowhere else.
    import inspect

    import trl

    from appliance.train.backends import RenderedPromptIds

    ours = inspect.signature(RenderedPromptIds._tokenize_prompts)
    theirs = inspect.signature(trl.GRPOTrainer._tokenize_prompts)
    assert list(ours.parameters) == list(theirs.parameters) == ["self", "prompts"]
    assert "prompt_ids, images, multimodal_fields = self._tokenize_prompts(prompts)" in \
        inspect.getsource(trl.GRPOTrainer._generate)
    assert 'prompt_ids = self.processing_class(text=prompts)["input_ids"]' in \
        inspect.getsource(trl.GRPOTrainer._tokenize_prompts)  # text prompts: special tokens added
