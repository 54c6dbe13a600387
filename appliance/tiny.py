"""A tiny randomly initialised Llama model with a real tokenizer, built offline.

Used by the tests (isolated, fast) and by the GPU self-check (no hub access
needed). ChatML template and special tokens placed like SmolLM2's:
<|endoftext|>=0 (pad), <|im_start|>=1, <|im_end|>=2 (EOS).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = [
    'You are a helpful assistant. Reply with a JSON object {"name": "send_email", "arguments": {}}.',
    "Schedule a meeting with Carlos on Friday at 10:00 about the quarterly budget review.",
    "Delete the task named update the dashboard; then reply to the email from Nadia.",
    "No action is needed. The customer record was created, the deal was closed and the plot drawn.",
    "Find the average visitors per day over the last two weeks and plot it as a line chart.",
    'Tools: [{"name":"calendar.create_event","description":"Create an event","parameters":{}}]',
] * 4


def build_tiny_tokenizer(vocab_size: int = 400) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(vocab_size: int, *, hidden_size: int = 32, layers: int = 2, heads: int = 4,
                     kv_heads: int = 2) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads,  # grouped-query attention, as in SmolLM2 (9 query heads, 3 KV heads)
        max_position_embeddings=1024,
        # A wide init makes logits decisive, so greedy decoding is stable under tiny float noise.
        initializer_range=0.3, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 2
    return model


def save_tiny_model(directory: str | Path, **model_kwargs: Any) -> Path:
    """Build and save model + tokenizer into `directory`; returns it."""
    directory = Path(directory)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer), **model_kwargs)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
