"""Multi-turn GRPO episodes: exact tokens, a loss mask over tool output, trajectory scoring, a real TRL step."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from appliance.generate.base import Sample
from appliance.packs import load_pack
from appliance.rewards import make_reward_funcs
from appliance.train import TrainConfig, run_grpo
from appliance.train.grpo import grpo_rows, make_verify
from appliance.train.multiturn import MultiTurnRollout, agent_episodes

SEARCH = {"name": "email_search_emails", "arguments": {"query": "jinsoo"}}
FORWARD = {"name": "email_forward_email", "arguments": {"email_id": "00000204", "recipient": "sofia.santos@atlas.com"}}


class ScriptedGenerator:
    """Answers turn k of every episode with script[k], as the model would: tokens ending with <|im_end|>."""

    def __init__(self, tokenizer, script: list[str]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.turn = 0
        self.held_to: list = []

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, strict_tools=None):
        self.held_to.append(strict_tools)
        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + (self.tokenizer.eos_token_id,)
        return [[Sample(text=text, completion_tokens=len(ids), prompt_tokens=0, latency_s=0.0,
                        finish_reason="stop", token_ids=ids)] for _ in prompts]


@pytest.fixture(scope="module")
def pack():
    return load_pack("workplace-multi")


@pytest.fixture(scope="module")
def tokenizer():
    from appliance.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()


def episode(pack, tokenizer, script: list[str], copies: int = 2, generators: list | None = None, strict=False):
    rows = [row for row in grpo_rows(pack, tokenizer) if row["task_id"] == "wm-train-0000"]
    episodes = agent_episodes(pack, tokenizer, rows)
    generators = [] if generators is None else generators  # the caller's list sees each generator made

    def make_generator(model, tok, size):
        generators.append(ScriptedGenerator(tok, script))
        return generators[-1]

    rollout = MultiTurnRollout(tokenizer, TrainConfig(temperature=1.0, max_completion_tokens=64, strict=strict),
                               episodes, make_generator=make_generator)
    trainer = SimpleNamespace(model=SimpleNamespace(training=True, eval=lambda: None, train=lambda mode=True: None))
    return rows[0], episodes, rollout([rows[0]["prompt"]] * copies, trainer)


def test_episode_tokens_are_the_rendered_conversation_with_tool_output_masked(pack, tokenizer):
    script = [json.dumps(SEARCH), json.dumps(FORWARD), "Done: I forwarded it to Sofia."]
    row, episodes, out = episode(pack, tokenizer, script)
    assert len(out["completion_ids"]) == 2 and out["logprobs"] is None
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert len(ids) == len(mask) and mask[0] == 1 and mask[-1] == 1 and 0 in mask
    assert out["prompt_ids"][0] == tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
    # The whole completion is exactly what the chat template renders after the prompt.
    task = pack.task("wm-train-0000")
    trajectory = out["agent_trajectory"][0]
    assert [c["name"] for c in trajectory["calls"]] == [SEARCH["name"], FORWARD["name"]]
    eos = tokenizer.eos_token
    full = tokenizer.decode(out["prompt_ids"][0] + ids, skip_special_tokens=False)
    assert full.startswith(row["prompt"]) and full.endswith(script[-1] + eos)
    assert out["transcript"][0] == full[len(row["prompt"]):]
    # Model tokens (mask 1) are exactly the three turns, each closed by its end-of-turn token.
    model_text = tokenizer.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert model_text == "".join(text + eos for text in script)
    # Tool output (mask 0) holds the world's search result: the email the model then forwards.
    tool_text = tokenizer.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=False)
    assert "00000204" in tool_text and "jinsoo" in tool_text.lower()
    assert episodes.tasks_by_prompt[row["prompt"]].id == task.id


def test_strict_episodes_hold_every_turn_to_the_tasks_tools(pack, tokenizer):
    script = [json.dumps(SEARCH), json.dumps(FORWARD), "Done: I forwarded it to Sofia."]
    for strict in (False, True):
        generators = []
        row, _, _ = episode(pack, tokenizer, script, generators=generators, strict=strict)
        tools = pack.tools_for(pack.task(row["task_id"]))
        [generator] = generators
        assert len(generator.held_to) == 3  # one call per turn
        assert generator.held_to == ([[tools, tools]] * 3 if strict else [None] * 3)


def test_episode_rewards_score_the_trajectory_like_eval(pack, tokenizer):
    funcs = make_reward_funcs(pack, "binary")
    good = episode(pack, tokenizer, [json.dumps(SEARCH), json.dumps(FORWARD), "Done."])[2]
    wrong = episode(pack, tokenizer, [json.dumps(SEARCH), json.dumps({**FORWARD, "arguments": {
        **FORWARD["arguments"], "recipient": "omar.khan@atlas.com"}}), "Done."])[2]
    for out, expected in ((good, 1.0), (wrong, 0.0)):
        kwargs = {"task_id": ["wm-train-0000"] * 2, "agent_trajectory": out["agent_trajectory"]}
        completed = funcs[0](prompts=None, completions=out["transcript"], **kwargs)
        assert completed == [expected, expected]
    verify = make_verify(pack)
    assert verify("wm-train-0000", "", good["agent_trajectory"][0]).bucket == "success"


def test_an_unparsable_first_turn_ends_the_episode_on_the_model_token(pack, tokenizer):
    out = episode(pack, tokenizer, ['{"name": "email_search_emails", "arguments": '])[2]
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert all(mask) and ids[-1] == tokenizer.eos_token_id
    assert out["agent_trajectory"][0]["parse_ok"] is False


@pytest.fixture
def multi_config(tiny_model_dir, tmp_path) -> TrainConfig:
    return TrainConfig(model=str(tiny_model_dir), pack="workplace-multi", backend="cpu", steps=1, learning_rate=1e-2,
                       lora_r=4, lora_alpha=8, num_generations=2, prompts_per_step=2, max_completion_tokens=8,
                       temperature=1.0, eval_every=1, max_seq_length=4096,
                       output=str(tmp_path / "checkpoints"), workspace=str(tmp_path / "runs"))


def test_grpo_on_a_multi_turn_pack_trains_on_episodes_through_trl(multi_config, monkeypatch):
    """Scripted three-turn episodes with tool output between turns go through TRL's loss and land in the store."""
    from appliance.store import Workspace
    from appliance.train import multiturn

    script = [json.dumps(SEARCH), json.dumps(FORWARD), "Done."]
    monkeypatch.setattr(multiturn, "_hf_generator", lambda model, tok, size: ScriptedGenerator(tok, script))

    def rank_reward(prompts, completions, **kwargs):
        assert len(kwargs["agent_trajectory"]) == len(completions)  # TRL passed the episodes on
        return [float(i % 2) for i in range(len(completions))]  # variance in every group

    result = run_grpo(multi_config, reward_funcs=[rank_reward], reward_weights=[1.0])
    _, rows = Workspace.open(multi_config.workspace).query(
        "SELECT task_id, v_bucket, completion, completion_tokens FROM rollouts ORDER BY sample_index")
    assert len(rows) == 4 and all(r[0].startswith("wm-train-") and r[1] for r in rows)
    assert all(r[2].count("<|im_start|>assistant") == 2 and r[2].endswith("Done.<|im_end|>") for r in rows)
    assert result.final_adapter and result.metrics_history


def test_multi_turn_grpo_refuses_the_gpu_backend_with_advice(multi_config, monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.train import common

    class FakeGpu:
        name = "unsloth"
        supports_multi_turn = False

    monkeypatch.setattr(common, "get_backend", lambda name, config=None: FakeGpu())
    monkeypatch.setattr(common, "pick_backend", lambda requested: ("unsloth", "test"))
    with pytest.raises(ApplianceError, match="--backend cpu"):
        run_grpo(dataclasses.replace(multi_config, backend="unsloth"))


def test_a_turn_cut_off_by_the_budget_keeps_its_end_of_turn_marker_masked(pack, tokenizer):
    """The sampled turn has no <|im_end|>; the template's one belongs to the masked tool text."""

    class CutGenerator(ScriptedGenerator):
        def generate(self, prompts, **kwargs):
            samples = super().generate(prompts, **kwargs)
            if self.turn == 1:  # the first turn parses but ran out of tokens before its end-of-turn token
                samples = [[Sample(text=s[0].text, completion_tokens=len(s[0].token_ids) - 1, prompt_tokens=0,
                                   latency_s=0.0, finish_reason="length", token_ids=s[0].token_ids[:-1])]
                           for s in samples]
            return samples

    rows = [row for row in grpo_rows(pack, tokenizer) if row["task_id"] == "wm-train-0000"]
    script = [json.dumps(SEARCH), "Done."]
    rollout = MultiTurnRollout(tokenizer, TrainConfig(temperature=1.0), agent_episodes(pack, tokenizer, rows),
                               make_generator=lambda model, tok, size: CutGenerator(tok, script))
    trainer = SimpleNamespace(model=SimpleNamespace(training=True, eval=lambda: None, train=lambda mode=True: None))
    out = rollout([rows[0]["prompt"]], trainer)
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    first_turn = len(tokenizer(script[0], add_special_tokens=False)["input_ids"])
    assert mask[:first_turn] == [1] * first_turn
    assert ids[first_turn] == tokenizer.eos_token_id and mask[first_turn] == 0  # the template's <|im_end|>
    assert out["model_tokens"] == [sum(mask)] and ids[-1] == tokenizer.eos_token_id


def test_a_template_that_rewrites_turns_is_refused_before_training(pack, tokenizer, monkeypatch):
    import appliance.prompting as prompting
    from appliance.errors import ApplianceError

    real = prompting.render_prompt

    def stripping(tokenizer, system_prompt, messages, tools=()):  # a template that strips braces from turns
        return real(tokenizer, system_prompt, [{**m, "content": str(m.get("content", "")).strip("{}")}
                                               for m in messages], tools)

    monkeypatch.setattr(prompting, "render_prompt", stripping)
    with pytest.raises(ApplianceError, match="rewrites the model's own turns"):
        agent_episodes(pack, tokenizer, grpo_rows(pack, tokenizer)[:1])
