"""Shared fixtures: a tiny Llama-architecture model and tokenizer built offline.

`tiny_model_dir` is a randomly initialised LlamaForCausalLM (2 layers, hidden
32, 4 query heads sharing 2 KV heads) with a byte-level BPE tokenizer trained in memory on a few sentences, a
ChatML template like SmolLM2's, and the same special tokens in the same
places (<|endoftext|>=0 pad, <|im_start|>=1, <|im_end|>=2 EOS). It is saved
with save_pretrained, so anything that loads a model directory can use it.
Nothing is downloaded; building it takes well under a second.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from appliance.tiny import build_tiny_model, build_tiny_tokenizer  # shared with the GPU smoke


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a tiny random Llama model and its tokenizer (a few hundred KB)."""
    directory = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def shared_dir() -> Path:
    """The project's read-only shared/ folder: beside the clone (CI), else the workplace's copy."""
    beside = Path(__file__).resolve().parents[2] / "shared"
    return beside if beside.is_dir() else Path("/work/shared")
