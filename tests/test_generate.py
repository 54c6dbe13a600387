"""Generation: batching, ordering, stop strings, adapters, backend choice, and the vLLM adapter layer."""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

from appliance.errors import ApplianceError
from appliance.generate import choose_backend, make_generator, trim_at_stop
from appliance.generate.hf import HFGenerator
from appliance.generate.vllm import VLLMGenerator
from appliance.models import load_model
from appliance.prompting import render_prompt

REQUESTS = [
    "Schedule a meeting with Carlos on Friday at 10:00 about the quarterly budget review and invite Nadia.",
    "Delete the task.",
    "Find the average visitors per day over the last two weeks.",
    "Reply to the email from Nadia about the dashboard.",
    "Plot it.",
]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(loaded):
    _, tokenizer = loaded
    return [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": r}], []) for r in REQUESTS]


def prompts_with_tools(tokenizer):
    """REQUESTS after a system prompt and four tools: every prompt shares a long head."""
    tools = [{"name": f"tool_{i}", "description": "Does one workplace thing.", "parameters": {}} for i in range(4)]
    return [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": r}], tools) for r in REQUESTS]


def texts(results):
    return [[sample.text for sample in samples] for samples in results]


def assert_decodes_like_one_row_at_a_time(model, generator, rows, got, max_new_tokens):
    """Each row's greedy tokens are those of transformers' own generate on that row alone."""
    import torch

    for ids, samples in zip(rows, got):
        with torch.inference_mode():
            out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                                 eos_token_id=generator.eos_ids, pad_token_id=generator.pad_id)
        vanilla = out[0, len(ids):].tolist()
        assert list(samples[0].token_ids) == vanilla[:len(samples[0].token_ids)]


def test_batched_greedy_matches_one_at_a_time(loaded, prompts):
    model, tokenizer = loaded
    batched = HFGenerator(model, tokenizer, batch_size=8).generate(prompts, max_new_tokens=16)
    single = HFGenerator(model, tokenizer, batch_size=1).generate(prompts, max_new_tokens=16)
    assert texts(batched) == texts(single)
    assert [s[0].prompt_tokens for s in batched] == [len(tokenizer(p)["input_ids"]) for p in prompts]
    assert len({s[0].prompt_tokens for s in batched}) == len(prompts)  # lengths differ, so padding was exercised


@pytest.mark.parametrize("shrink", [1.0, 0.0])  # shed ended rows at every phase; never (step them on)
def test_greedy_decoding_in_phases_gives_the_tokens_of_one_call(loaded, prompts, monkeypatch, shrink):
    from appliance.generate import hf

    model, tokenizer = loaded
    generator = HFGenerator(model, tokenizer, batch_size=8)
    assert generator.static_cache  # the phased path is the CPU's
    monkeypatch.setattr(hf, "DECODE_PHASE_TOKENS", 10 ** 6)
    free = generator.generate(prompts, max_new_tokens=11)
    # The random model never ends on its own: make a token it emits at different steps in different rows EOS.
    firsts = {}
    for row, samples in enumerate(free):
        for step, token in enumerate(samples[0].token_ids):
            firsts.setdefault(token, {}).setdefault(row, step)
    eos = max(firsts, key=lambda token: (len(set(firsts[token].values())), len(firsts[token])))
    assert len(set(firsts[eos].values())) >= 2  # rows end at different steps
    generator.eos_ids = [eos]
    one_call = generator.generate(prompts, max_new_tokens=11)
    calls = []
    generate = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(kw["input_ids"].shape[0]) or generate(**kw))
    monkeypatch.setattr(hf, "DECODE_PHASE_TOKENS", 3)
    monkeypatch.setattr(hf, "SHRINK_SHARE", shrink)
    phased = generator.generate(prompts, max_new_tokens=11)  # 11 = 3 + 3 + 3 + 2: the last phase is short
    assert len(calls) > 1 and (calls[-1] < len(prompts) if shrink else set(calls) == {len(prompts)})
    assert [s[0].token_ids for s in phased] == [s[0].token_ids for s in one_call]
    assert [(s[0].completion_tokens, s[0].finish_reason) for s in phased] == \
        [(s[0].completion_tokens, s[0].finish_reason) for s in one_call]
    assert {s[0].finish_reason for s in one_call} == {"stop", "length"}


def test_n_samples_per_prompt_come_back_in_prompt_order(loaded, prompts):
    model, tokenizer = loaded
    generator = HFGenerator(model, tokenizer, batch_size=6)
    greedy = generator.generate(prompts, max_new_tokens=12)
    # A near-zero temperature samples the greedy answer, through the num_return_sequences path.
    cold = generator.generate(prompts, n=3, temperature=1e-4, max_new_tokens=12, seed=0)
    assert texts(cold) == [[samples[0].text] * 3 for samples in greedy]
    repeated = generator.generate(prompts[:2], n=4, temperature=0, max_new_tokens=12)
    assert [len(samples) for samples in repeated] == [4, 4]


def test_sampling_is_reproducible_with_a_seed_and_varied_within_a_prompt(loaded, prompts):
    model, tokenizer = loaded
    generator = HFGenerator(model, tokenizer, batch_size=8)
    first = generator.generate(prompts[:2], n=4, temperature=1.5, max_new_tokens=12, seed=7)
    again = generator.generate(prompts[:2], n=4, temperature=1.5, max_new_tokens=12, seed=7)
    assert texts(first) == texts(again)
    assert all(len(set(samples)) > 1 for samples in texts(first))


def test_stop_strings_end_and_trim_the_text(loaded, prompts):
    model, tokenizer = loaded
    generator = HFGenerator(model, tokenizer, batch_size=8)
    [[full]] = generator.generate(prompts[:1], max_new_tokens=40)
    stop = next(full.text[i : i + 2] for i in range(3, len(full.text)) if full.text[i : i + 2].isascii() and full.text[i : i + 2].strip())
    [[cut]] = generator.generate(prompts[:1], max_new_tokens=40, stop=["@@never@@", stop])
    assert cut.text == full.text[: full.text.find(stop)]
    assert cut.finish_reason == "stop" and cut.completion_tokens <= full.completion_tokens


def test_finish_reason_and_token_counts(loaded, prompts):
    model, tokenizer = loaded
    results = HFGenerator(model, tokenizer).generate(prompts, max_new_tokens=6)
    for [sample] in results:
        assert 1 <= sample.completion_tokens <= 6 and sample.latency_s > 0
        assert sample.finish_reason == ("length" if sample.completion_tokens == 6 else "stop")


def test_trim_at_stop_uses_the_earliest_stop():
    assert trim_at_stop('{"a": 1}\n\nmore', ["more", "\n\n"]) == ('{"a": 1}', True)
    assert trim_at_stop("plain", None) == ("plain", False)
    assert trim_at_stop("plain", [""]) == ("plain", False)


def test_lora_adapter_changes_the_outputs(tiny_model_dir, tmp_path, prompts):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")

    plain = HFGenerator.load(str(tiny_model_dir)).generate(prompts, max_new_tokens=12)
    adapted = HFGenerator.load(str(tiny_model_dir), adapter=tmp_path / "adapter").generate(prompts, max_new_tokens=12)
    assert texts(adapted) != texts(plain)

    trainable, _ = load_model(tiny_model_dir, adapter=tmp_path / "adapter", for_training=True)
    assert isinstance(trainable, PeftModel)
    assert any(p.requires_grad for name, p in trainable.named_parameters() if "lora_" in name)


def test_make_generator_on_a_cpu_picks_transformers_and_says_why(tiny_model_dir):
    generator, reason = make_generator("auto", model=str(tiny_model_dir), batch_size=4)
    assert isinstance(generator, HFGenerator) and generator.batch_size == 4
    assert "CPU" in reason or "not installed" in reason
    assert choose_backend("hf") == ("hf", "transformers backend, as requested")


def test_a_loaded_generator_sits_on_the_gpu_when_there_is_one(tiny_model_dir, monkeypatch):
    """transformers loads onto the CPU; on a GPU machine without vLLM the eval must still run on the GPU
    (an H200 run in session 26 failed on mixed devices inside an Unsloth SFT run without this)."""
    import torch

    from appliance.generate import hf

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert hf.generation_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hf.generation_device() == "cpu"
    monkeypatch.setattr(hf, "generation_device", lambda: "meta")  # a device a CPU machine has, other than cpu
    assert next(HFGenerator.load(str(tiny_model_dir)).model.parameters()).device.type == "meta"
    assert next(HFGenerator.load(str(tiny_model_dir), device="cpu").model.parameters()).device.type == "cpu"


def test_a_gpu_generates_in_bfloat16_and_the_cpu_in_float32(monkeypatch, tiny_model_dir):
    import torch
    from appliance.generate import hf

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert hf.generation_dtype("cuda") == "bfloat16"
    assert hf.generation_dtype("cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a T4: float32, not float16
    assert hf.generation_dtype("cuda:0") == "float32"
    monkeypatch.setattr(hf, "generation_dtype", lambda device: "bfloat16")
    assert next(HFGenerator.load(str(tiny_model_dir), device="cpu").model.parameters()).dtype == torch.bfloat16
    assert next(HFGenerator.load(str(tiny_model_dir), device="cpu", dtype="float32").model.parameters()).dtype == torch.float32


def test_asking_for_vllm_without_it_is_one_sentence(monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(ApplianceError, match="vLLM is not installed"):
        choose_backend("vllm")
    with pytest.raises(ApplianceError, match="Unknown generation backend"):
        choose_backend("tgi")


# --- the vLLM layer, against a stand-in for vllm's types ---------------------------


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class FakeRequestOutput:
    prompt_token_ids: list[int]
    outputs: list[FakeCompletion]


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class CharTokenizer:
    """One id per character: enough to see which token ids reach the engine."""

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) for c in text] for text in texts]}


class FakeUnslothModel:
    """Unsloth's colocated model: `vllm_engine` is the engine, fast_generate its generate; load_lora a LoRARequest."""

    def __init__(self):
        self.calls = []
        self.vllm_engine = self

    def get_tokenizer(self):
        return CharTokenizer()

    def load_lora(self, path, load_tensors=False):
        return ("lora", path, load_tensors)

    def fast_generate(self, prompts, sampling_params=None, lora_request=None, use_tqdm=True):
        self.calls.append((prompts, sampling_params, lora_request))
        # vLLM takes one SamplingParams for all prompts or a list of one per prompt (entrypoints/llm.py:417).
        per_prompt = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        return [
            FakeRequestOutput(
                prompt_token_ids=prompt["prompt_token_ids"],
                outputs=[FakeCompletion(f"{''.join(map(chr, prompt['prompt_token_ids']))}-{i}", [5] * (i + 1),
                                        "length" if i else "stop") for i in range(params.n)],
            )
            for prompt, params in zip(prompts, per_prompt)
        ]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_generator_reuses_an_unsloth_engine_with_its_adapter(fake_vllm, tmp_path):
    engine = FakeUnslothModel()
    generator, reason = make_generator("auto", engine=engine, adapter=tmp_path / "step-10")
    assert isinstance(generator, VLLMGenerator) and "reusing" in reason
    results = generator.generate(["ab", "cde"], n=2, temperature=0.8, top_p=0.9, max_new_tokens=32, stop=["\n\n"], seed=3)
    [(prompts, params, lora)] = engine.calls
    # Token ids, not text (vLLM would add special tokens); the checkpoint's own files, not live tensors.
    assert prompts == [{"prompt_token_ids": [97, 98]}, {"prompt_token_ids": [99, 100, 101]}]
    assert lora == ("lora", str(tmp_path / "step-10"), False)
    assert (params.n, params.temperature, params.top_p, params.max_tokens, params.stop, params.seed) == (2, 0.8, 0.9, 32, ["\n\n"], 3)
    assert texts(results) == [["ab-0", "ab-1"], ["cde-0", "cde-1"]]
    assert [s.finish_reason for s in results[1]] == ["stop", "length"]
    assert (results[1][1].completion_tokens, results[1][1].prompt_tokens) == (2, 3)


def test_vllm_greedy_decodes_once_and_repeats(fake_vllm):
    engine = FakeUnslothModel()
    results = VLLMGenerator(engine).generate(["ab"], n=3, temperature=0, max_new_tokens=8)
    [(_, params, lora)] = engine.calls
    assert params.n == 1 and params.temperature == 0.0 and lora is None
    assert texts(results) == [["ab-0"] * 3]


def test_vllm_strict_holds_each_prompt_to_its_own_tools(fake_vllm, monkeypatch):
    from appliance.generate.strict import answer_grammar

    @dataclass
    class FakeStructuredOutputsParams:  # vllm/sampling_params.py:101 (vllm 0.33.0): one constraint per request
        grammar: str | None = None

    sampling = types.ModuleType("vllm.sampling_params")
    sampling.StructuredOutputsParams = FakeStructuredOutputsParams
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    tools = [[{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}]
             for name in ("first_tool", "second_tool")]
    engine = FakeUnslothModel()
    results = VLLMGenerator(engine).generate(["ab", "cde"], n=2, temperature=0.8, max_new_tokens=8,
                                             strict_tools=tools)
    [(_, params, _)] = engine.calls
    assert [p.structured_outputs.grammar for p in params] == [answer_grammar(tools[0]), answer_grammar(tools[1])]
    first, second = (p.structured_outputs.grammar for p in params)
    assert "first_tool" in first and "first_tool" not in second
    assert all(p.n == 2 and p.temperature == 0.8 for p in params)
    assert texts(results) == [["ab-0", "ab-1"], ["cde-0", "cde-1"]]


def test_shared_prompt_head_is_prefilled_once_without_changing_outputs(loaded, monkeypatch):
    from appliance.generate import hf

    model, tokenizer = loaded
    prompts = prompts_with_tools(tokenizer)
    generator = HFGenerator(model, tokenizer, batch_size=8)
    encoded = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    limits = [len(ids) - 1 for ids in encoded]
    assert min(generator._head_lengths(encoded, limits)) > 50
    shared = generator.generate(prompts, max_new_tokens=16)
    sampled = generator.generate(prompts, n=3, temperature=1e-4, max_new_tokens=16, seed=0)
    monkeypatch.setattr(hf, "MIN_SHARED_PREFIX_TOKENS", 10_000)
    assert generator._head_lengths(encoded, limits) == [0] * len(encoded)
    plain = generator.generate(prompts, max_new_tokens=16)
    assert texts(shared) == texts(plain)
    assert texts(sampled) == [[samples[0].text] * 3 for samples in plain]
    assert [s[0].prompt_tokens for s in shared] == [len(ids) for ids in encoded]


def test_a_batch_of_several_tool_lists_decodes_like_one_prompt_at_a_time(loaded):
    """Each tool list's head is cached once and right-aligned; the answers match unbatched vanilla generate."""
    model, tokenizer = loaded
    lists = [[{"name": f"{domain}_{i}", "description": f"Does one {domain} thing.", "parameters": {}} for i in range(4)]
             for domain in ("email", "calendar_and_more")]
    prompts = [render_prompt(tokenizer, "You are helpful.", [{"role": "user", "content": r}], tools)
               for tools in lists for r in REQUESTS[:3]]
    generator = HFGenerator(model, tokenizer, batch_size=8)
    encoded = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    heads = generator._head_lengths(encoded, [len(ids) - 1 for ids in encoded])
    assert len(set(heads[:3])) == 1 and len(set(heads[3:])) == 1 and heads[0] != heads[3]  # two groups
    got = generator.generate(prompts, max_new_tokens=12)
    assert_decodes_like_one_row_at_a_time(model, generator, encoded, got, 12)


def _rows_under_one_system_prompt() -> list[list[int]]:
    """Token rows like a fit check's batch: one system prompt, then three tool lists (two share their first
    tools), then a request each. Grouped on shared leading tokens alone, the rows chain down to the system
    prompt (every row's tool list then falls in its padded tail); each list is a head of its own instead."""
    system, first = list(range(10, 50)), list(range(100, 130))
    second, third = first[:10] + list(range(200, 220)), list(range(300, 330))
    return [system + first + [5, 6], system + second + [7, 8], system + second + [9, 11],
            system + third + [12, 13], system + third + [14, 15]]


def test_rows_under_one_system_prompt_keep_their_tool_lists_as_heads():
    from appliance.generate.heads import branching_root, head_groups

    rows = _rows_under_one_system_prompt()
    limits = [len(row) - 1 for row in rows]
    assert head_groups(rows, limits) == [([0, 1, 2, 3, 4], 40)]  # the chain, counting the root as a saving
    assert branching_root(rows) == 40
    assert head_groups(rows, limits, root=40) == [([0], 71), ([1, 2], 70), ([3, 4], 70)]
    one_list = [*rows[3:], rows[3][:-1] + [16]]
    assert branching_root(one_list) == 0  # below one list the rows branch into requests: tails, not heads
    assert branching_root(rows[:1]) == 0


def test_logprob_chunks_keep_a_head_together_and_its_rows_by_length():
    from appliance.generate.heads import logprob_chunks

    head_a, head_b = list(range(100, 140)), list(range(200, 240))
    prompts = [head_a + [1] * 9, head_b + [2], head_a + [3], head_b + [4] * 5, head_a + [5] * 4, head_a + [6]]
    answers = [[7], [7] * 3, [7] * 2, [7], [7], [7] * 6]
    chunks = logprob_chunks(prompts, answers, 2)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(prompts)))  # every row once
    assert [len(chunk) for chunk in chunks] == [2, 2, 2]
    order = [i for chunk in chunks for i in chunk]
    assert order == [2, 4, 5, 0, 1, 3]  # head_a's rows shortest first (3, 6, 7, 10 tokens past it), then head_b's


def test_tool_list_heads_under_one_system_prompt_decode_like_one_row_at_a_time(loaded):
    model, tokenizer = loaded
    rows = _rows_under_one_system_prompt()
    generator = HFGenerator(model, tokenizer, batch_size=8)
    assert generator._head_lengths(rows, [len(row) - 1 for row in rows]) == [71, 70, 70, 70, 70]
    got = generator._generate_chunk(rows, 1, 0.0, 1.0, 12, None)
    assert_decodes_like_one_row_at_a_time(model, generator, rows, got, 12)


def test_grouped_query_attention_on_cpu_gives_identical_logits(tiny_model_dir, prompts):
    import torch

    from appliance.generate.hf import GROUPED_SDPA

    grouped_model, tokenizer = load_model(tiny_model_dir)
    HFGenerator(grouped_model, tokenizer)  # switches the model to grouped SDPA
    assert grouped_model.config._attn_implementation == GROUPED_SDPA
    plain_model, _ = load_model(tiny_model_dir)
    assert plain_model.config._attn_implementation == "sdpa"
    inputs = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    assert not bool(inputs["attention_mask"].all())  # padding, so the mask path is the one compared
    with torch.inference_mode():
        assert torch.equal(plain_model(**inputs).logits, grouped_model(**inputs).logits)


@pytest.mark.parametrize("shared_head", [True, False])
def test_groups_of_samples_prefill_each_prompt_once_without_changing_outputs(loaded, monkeypatch, shared_head):
    from appliance.generate import hf

    model, tokenizer = loaded
    prompts = prompts_with_tools(tokenizer)
    if not shared_head:
        monkeypatch.setattr(hf, "MIN_SHARED_PREFIX_TOKENS", 10_000)
    generator = HFGenerator(model, tokenizer, batch_size=16)
    greedy = generator.generate(prompts, max_new_tokens=12)
    calls = []
    grouped = generator._grouped_inputs
    monkeypatch.setattr(generator, "_grouped_inputs", lambda *a: calls.append(a) or grouped(*a))
    near_greedy = generator.generate(prompts, n=3, temperature=1e-4, max_new_tokens=12, seed=0)
    assert calls  # the grouped path ran
    assert texts(near_greedy) == [[samples[0].text] * 3 for samples in greedy]
    assert [s[0].token_ids for s in near_greedy] == [s[0].token_ids for s in greedy]


@pytest.mark.parametrize("shared_head", [True, False])
def test_completion_logprobs_match_one_unpadded_forward_per_row(loaded, monkeypatch, shared_head):
    import torch

    from appliance.generate import hf

    model, tokenizer = loaded
    prompts = prompts_with_tools(tokenizer)
    answers = ['{"name": "tool_1", "arguments": {}}', "No action is needed.", "ok", '{"a": 1}', "Plot"]
    if not shared_head:
        monkeypatch.setattr(hf, "MIN_SHARED_PREFIX_TOKENS", 10_000)
    generator = HFGenerator(model, tokenizer, batch_size=3)  # batches of uneven lengths, padded
    got = generator.completion_logprobs(prompts, answers, temperature=0.7)
    for prompt, answer, value in zip(prompts, answers, got):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt_ids + answer_ids])).logits[0].float()
        logprobs = torch.log_softmax(logits / 0.7, dim=-1)
        expected = sum(float(logprobs[len(prompt_ids) - 1 + i, token]) for i, token in enumerate(answer_ids))
        assert value == pytest.approx(expected, abs=1e-3)
    assert generator.completion_logprobs([], []) == []


@pytest.mark.parametrize("shared_head", [True, False])
def test_the_gpu_decode_cache_gives_the_cpu_answers(loaded, monkeypatch, shared_head):
    """On a GPU the generator decodes into a DynamicCache (a StaticCache makes transformers recompile the
    forward): the same greedy answers, single rows and groups, with or without a cached head."""
    from appliance.generate import hf

    model, tokenizer = loaded
    prompts = prompts_with_tools(tokenizer)
    if not shared_head:
        monkeypatch.setattr(hf, "MIN_SHARED_PREFIX_TOKENS", 10_000)
    on_cpu = HFGenerator(model, tokenizer, batch_size=16)
    as_on_gpu = HFGenerator(model, tokenizer, batch_size=16)
    as_on_gpu.static_cache = False
    assert on_cpu.static_cache
    made, decode_cache = [], HFGenerator._with_decode_cache
    monkeypatch.setattr(HFGenerator, "_with_decode_cache",
                        lambda self, *a: made.append(self.static_cache) or decode_cache(self, *a))

    def answers(generator):
        """Greedy answers, then near-greedy groups of 3, each decoded through `generator`'s own cache."""
        made.clear()
        greedy = generator.generate(prompts, max_new_tokens=12)
        grouped = generator.generate(prompts, n=3, temperature=1e-4, max_new_tokens=12, seed=0)
        assert made and set(made) == {generator.static_cache}
        return texts(greedy), texts(grouped)

    expected, grouped = answers(on_cpu)
    assert grouped == [[answer[0]] * 3 for answer in expected]
    assert answers(as_on_gpu) == (expected, grouped)
