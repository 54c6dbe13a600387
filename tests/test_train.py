"""Tiny-model CPU runs: SFT and GRPO change the LoRA, land rows and checkpoints, and resume cleanly."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from appliance.task import BUCKETS
from appliance.train import TrainConfig, run_grpo, run_sft
from appliance import checkpoints as registry

TOOLS = [{"type": "function", "function": {"name": "send_email", "description": "Send an email",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                                                          "required": ["to"]}}}]


NAMES = ["Carlos", "Nadia", "Sam", "Ana", "Omar"]


def write_mini_pack(folder: Path) -> Path:
    """A real on-disk pack (loaded by appliance.packs.load_pack): one tool, four train tasks, no world."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pack.toml").write_text(
        'name = "mini"\ndescription = "Email requests for training tests."\nversion = "1"\nworld = "none"\n'
        'tools = "tools.json"\nreward_scheme = "shaped"\nmax_turns = 1\n'
        'system_prompt = "Reply with one JSON tool call."\n\n[splits]\ntrain = "train.jsonl"\nval = "val.jsonl"\n')
    (folder / "tools.json").write_text(json.dumps(TOOLS))
    rows = [{"id": f"m{i}", "messages": [{"role": "user", "content": f"Email {name} about the budget."}],
             "expected": [{"name": "send_email", "arguments": {"to": name}}], "kind": "single_step", "tags": {}}
            for i, name in enumerate(NAMES)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (folder / "val.jsonl").write_text(json.dumps(rows[4]) + "\n")
    return folder


def length_reward(prompts, completions, **kwargs):
    """Varies across a group even for a random model, so advantages are non-zero."""
    return [min(len(c), 40) / 40 for c in completions]


def exact_reward(prompts, completions, **kwargs):
    return [1.0 if c.strip().startswith('{"name": "send_email"') else 0.0 for c in completions]


def lora_tensors(adapter_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))


def changed(before: dict, after: dict) -> bool:
    """LoRA B starts at zero, so only training can move it (A is random at init)."""
    import torch

    b_keys = [k for k in before if "lora_B" in k]
    assert b_keys and all(torch.count_nonzero(before[k]) == 0 for k in b_keys)
    return any(not torch.equal(before[k], after[k]) for k in b_keys)


@pytest.fixture
def config(tiny_model_dir, tmp_path) -> TrainConfig:
    # preset grpo: the random tiny model never stops within 12 tokens, and dapo (the default) masks truncated
    # completions out of the loss, so a step would move nothing (test_dapo_preset_runs... runs dapo).
    return TrainConfig(model=str(tiny_model_dir), pack=str(write_mini_pack(tmp_path / "mini")), backend="cpu",
                       preset="grpo", steps=1, learning_rate=1e-2,
                       lora_r=4, lora_alpha=8, num_generations=4, prompts_per_step=2, max_completion_tokens=12,
                       temperature=1.0, eval_every=1, batch_size=4, max_seq_length=256,
                       output=str(tmp_path / "checkpoints"), workspace=str(tmp_path / "runs"))


def grpo(config, **kwargs):
    """GRPO with the real pack and verifier; the length reward gives a random model's groups variance."""
    return run_grpo(config, reward_funcs=[length_reward, exact_reward], reward_weights=[1.0, 1.0], **kwargs)


def sft_trainer(config, rows=None, **changes):
    """TRL's SFT trainer as the cpu backend builds it, on `rows` or four email rows (`changes` replace config
    fields)."""
    from datasets import Dataset

    from appliance.train.cpu import CpuBackend
    from appliance.train.sft import sft_args

    config = dataclasses.replace(config, stage="sft", **changes)
    backend = CpuBackend()
    model, tokenizer = backend.load_for_training(config)
    rows = rows or [{"prompt": f"Email {name}.", "completion": f'{{"name": "send_email", "to": "{name}"}}'}
                    for name in ("Carlos", "Nadia", "Sam", "Ana")]

    class Run:  # what trainer_args reads of a run
        trainer_dir = config.output

    args = sft_args(config, Run, len(rows))
    return backend.make_sft_trainer(model, tokenizer, Dataset.from_list(rows), config, args, [])


def test_sft_batches_by_head_hold_one_tool_list_each(config):
    # Two heads of one length; requests of many lengths, so length grouping (the default order) mixes them.
    heads = ["Tools: send_email, read_email, delete_email. " * 6, "Tools: make_event, move_event, drop_event. " * 6]
    rows = [{"prompt": heads[i % 2] + "Please " + "really " * (i % 5) + "do it.", "completion": f" answer {i}"}
            for i in range(16)]

    def batches(order: str) -> list[set[int]]:
        trainer = sft_trainer(config, rows, batch_order=order)
        tokenizer = trainer.processing_class
        return [{next(h for h, head in enumerate(heads) if text.startswith(head))
                 for text in tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True)}
                for batch in trainer.get_train_dataloader()]

    assert any(len(heads_in) > 1 for heads_in in batches("shuffled"))
    by_head = batches("by_head")
    assert len(by_head) == 4 and all(len(heads_in) == 1 for heads_in in by_head)


def initial_adapter(config, tmp_path) -> Path:
    """The LoRA a run starts from, saved with the same seed (B is zero, A is seeded)."""
    from appliance.train.cpu import CpuBackend

    model, _ = CpuBackend().load_for_training(config)
    out = tmp_path / "init"
    model.save_pretrained(str(out))
    return out


def test_sft_step_changes_lora_and_saves_checkpoint(config, tmp_path):
    seen = []
    evals = []
    result = run_sft(config, sink=seen.append,
                     on_eval=lambda path, step, **context: evals.append((path, step)) or {"success_rate": 0.25})
    before = lora_tensors(initial_adapter(dataclasses.replace(config, stage="sft"), tmp_path))
    after = lora_tensors(result.final_adapter)
    assert changed(before, after)
    manifest = registry.load_manifest(result.final_adapter)
    assert manifest["stage"] == "sft" and manifest["step"] == 1
    assert manifest["metrics"]["heldout"] == {"success_rate": 0.25}
    assert manifest["base_model"]["hash"].startswith("sha256:")
    assert manifest["pack"]["name"] == "mini" and len(manifest["pack"]["data_hash"]) >= 32
    assert evals == [(result.final_adapter, 1)]
    types = [e.type for e in seen]
    assert types[0] == "run_started" and "step_metrics" in types and "checkpoint_saved" in types
    assert types[-1] == "run_finished"
    assert json.loads((Path(result.run_dir) / "config.json").read_text())["stage"] == "sft"


def test_the_fit_on_its_own_training_tasks_is_kept_apart_from_the_held_out_numbers(config):
    fit = {"split": "train", "n_tasks": 4, "success": 0.5, "eval_id": "eval-fit"}
    seen = []
    result = run_sft(config, sink=seen.append,
                     on_eval=lambda path, step, **context: {"heldout_success": 0.25, "fit": dict(fit)})
    metrics = registry.load_manifest(result.final_adapter)["metrics"]
    assert metrics["heldout"] == {"heldout_success": 0.25} and metrics["fit"] == fit
    saved = next(e for e in seen if e.type == "checkpoint_saved").metrics
    assert saved["heldout/heldout_success"] == 0.25 and saved["fit/success"] == 0.5 and saved["fit/n_tasks"] == 4
    assert not any(key.startswith("heldout/fit") for key in saved)


def test_cpu_lora_adapts_the_last_third_of_layers_unless_told(config):
    names = list(lora_tensors(run_sft(config).final_adapter))  # 2 layers: the last one
    assert names and all(".layers.1." in name for name in names)
    names = list(lora_tensors(run_sft(dataclasses.replace(config, lora_layers=0)).final_adapter))
    assert any(".layers.0." in name for name in names) and any(".layers.1." in name for name in names)


def test_continuing_an_adapter_with_lora_layers_trains_only_its_last_layers(config):
    import torch

    start = run_sft(dataclasses.replace(config, lora_layers=0)).final_adapter  # both layers of the tiny model
    after = lora_tensors(grpo(dataclasses.replace(config, init_adapter=str(start), lora_layers=1)).final_adapter)
    before = lora_tensors(start)
    assert set(after) == set(before)  # the adapter keeps every layer
    moved = {name for name in before if not torch.equal(before[name], after[name])}
    assert moved and all(".layers.1." in name for name in moved)


def test_continuing_an_adapter_with_lora_targets_trains_only_those_modules(config):
    import torch

    start = run_sft(config).final_adapter  # every linear module of the last layer
    mlp = dataclasses.replace(config, init_adapter=str(start), lora_targets="gate_proj,up_proj,down_proj")
    after = lora_tensors(grpo(mlp).final_adapter)
    before = lora_tensors(start)
    assert set(after) == set(before)  # the adapter keeps its attention LoRA, as loaded
    moved = {name for name in before if not torch.equal(before[name], after[name])}
    assert moved and all(name.split(".lora_")[0].endswith(("gate_proj", "up_proj", "down_proj")) for name in moved)


def test_grpo_step_changes_lora_writes_rollouts_and_checkpoint(config, tmp_path):
    from appliance.store import Workspace

    seen = []
    result = grpo(config, sink=seen.append)
    before = lora_tensors(initial_adapter(config, tmp_path))
    assert changed(before, lora_tensors(result.final_adapter))
    ws = Workspace.open(config.workspace)
    _, rows = ws.query("SELECT step, task_id, sample_index, reward, components['length_reward'], v_bucket, "
                       "advantage, completion_tokens, prompt_tokens, components['exact_reward'] "
                       "FROM rollouts WHERE run_id = ?", [result.run_id])
    assert len(rows) == 8  # 2 prompts x 4 generations
    assert {r[0] for r in rows} == {1}
    assert sorted(r[2] for r in rows) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(r[5] in BUCKETS and r[5] != "success" for r in rows)  # the real verifier judged them
    assert all(r[6] is not None and r[7] is not None and r[8] > 0 for r in rows)
    assert all(abs(r[3] - (r[4] + r[9])) < 1e-9 for r in rows)  # total = weighted sum of components
    _, ck = ws.query("SELECT id, step FROM checkpoints WHERE run_id = ?", [result.run_id])
    assert ck == [(f"{result.run_id}/step-00001", 1)]
    metrics = next(e for e in seen if e.type == "step_metrics").metrics
    for key in ("reward/mean", "reward/std", "reward/length_reward/mean", "frac_reward_zero_std",
                "completion/mean_tokens", "completion/clipped_ratio", "entropy", "time/step_s",
                "time/generate_s", "time/update_s", "train/success_rate", "memory/peak_gb"):
        assert key in metrics, key
    assert sum(e.type == "rollout_scored" for e in seen) == 8


def test_an_eval_between_steps_leaves_the_rest_of_the_run_as_it_was(config, tmp_path):
    """`eval_every` never changes what a run trains: a checkpoint's eval loads its adapter and seeds its own
    sampling, and the steps after it still draw the samples they would have drawn without it."""
    import torch

    from appliance.evaluate.heldout import make_heldout_eval
    from appliance.store import Workspace

    def trained(eval_every: int) -> dict:
        folder = tmp_path / f"every-{eval_every}"
        run = dataclasses.replace(config, steps=2, eval_every=eval_every, output=str(folder / "checkpoints"),
                                  workspace=str(folder / "runs"))
        workspace = Workspace.open(run.workspace)
        on_eval = make_heldout_eval(model=run.model, pack=run.pack, workspace=workspace, k=2, limit=1)
        return lora_tensors(grpo(run, on_eval=on_eval, workspace=workspace).final_adapter)

    at_the_end, after_each_step = trained(2), trained(1)
    assert at_the_end.keys() == after_each_step.keys()
    assert all(torch.equal(at_the_end[key], after_each_step[key]) for key in at_the_end)


def test_guided_grpo_trains_on_the_reference_answer_where_no_sample_succeeded(config):
    from appliance.store import Workspace

    result = grpo(dataclasses.replace(config, guide_failed_groups=True))
    _, rows = Workspace.open(config.workspace).query(
        "SELECT task_id, sample_index, completion, v_bucket, advantage FROM rollouts WHERE run_id = ? AND guided",
        [result.run_id])
    # The random tiny model never writes the call: in each of the 2 groups its last sample is the pack's answer.
    assert sorted(r[1] for r in rows) == [3, 3] and len({r[0] for r in rows}) == 2
    assert all(r[3] == "success" and r[2].startswith('{"name": "send_email"') for r in rows)
    assert all(r[4] > 0 for r in rows)  # the exact reward ranks it first in its group


def test_dynamic_sampling_trains_and_records_the_refilled_prompts_tasks(config, monkeypatch):
    """Every group ties under a constant reward, so each round refills both slots from the unused train tasks;
    the stored rollouts must name the tasks of the prompts finally sampled, not the ones TRL's sampler drew."""
    from appliance.generate.hf import HFGenerator
    from appliance.models import load_model
    from appliance.packs import load_pack
    from appliance.store import Workspace
    from appliance.train.grpo import grpo_rows

    calls = []
    generate = HFGenerator.generate

    def spy(self, prompts, **kwargs):
        calls.append(list(prompts))
        return generate(self, prompts, **kwargs)

    monkeypatch.setattr(HFGenerator, "generate", spy)
    seen = []
    result = run_grpo(dataclasses.replace(config, resample_flat_groups=3), reward_funcs=[constant_reward],
                      reward_weights=[1.0], sink=seen.append)
    assert next(e for e in seen if e.type == "step_metrics").metrics["groups_refilled"] == 2
    pack, (_, tokenizer) = load_pack(config.pack), load_model(config.model)
    task_of = {row["prompt"]: row["task_id"] for row in grpo_rows(pack, tokenizer, "train")}
    assert [len(c) for c in calls] == [2, 2]  # 4 train tasks: TRL's 2, then the 2 unused; then none are left
    assert not set(calls[0]) & set(calls[1])
    _, rows = Workspace.open(config.workspace).query(
        "SELECT task_id, count(*), any_value(prompt) FROM rollouts WHERE run_id = ? GROUP BY 1 ORDER BY 1",
        [result.run_id])
    assert rows == sorted((task_of[p], 4, p) for p in calls[1])


def test_strict_grpo_holds_each_rollout_to_its_prompts_tools(config, monkeypatch):
    from appliance.generate.hf import HFGenerator
    from appliance.models import load_model
    from appliance.packs import load_pack
    from appliance.train.grpo import grpo_rows

    calls = []
    generate = HFGenerator.generate

    def spy(self, prompts, **kwargs):
        calls.append((list(prompts), kwargs.get("strict_tools")))
        return generate(self, prompts, **kwargs)

    monkeypatch.setattr(HFGenerator, "generate", spy)
    grpo(dataclasses.replace(config, strict=True))
    pack, (_, tokenizer) = load_pack(config.pack), load_model(config.model)
    by_prompt = {row["prompt"]: pack.tools_for(pack.task(row["task_id"]))
                 for split in pack.splits for row in grpo_rows(pack, tokenizer, split)}
    assert calls and all(tools == [by_prompt[p] for p in prompts] for prompts, tools in calls)
    calls.clear()
    grpo(config)
    assert calls and all(tools is None for _, tools in calls)


def constant_reward(prompts, completions, **kwargs):
    return [1.0] * len(completions)


def test_the_sft_anchor_is_the_only_thing_that_moves_grpo_when_every_group_ties(config, tmp_path):
    """A constant reward gives every sample advantage 0, so only the anchor's SFT loss can change the LoRA."""
    before = lora_tensors(initial_adapter(config, tmp_path))
    plain = run_grpo(config, reward_funcs=[constant_reward], reward_weights=[1.0])
    assert not changed(before, lora_tensors(plain.final_adapter))
    seen = []
    anchored = run_grpo(dataclasses.replace(config, sft_anchor=1.0, sft_anchor_batch=2), sink=seen.append,
                        reward_funcs=[constant_reward], reward_weights=[1.0])
    assert changed(before, lora_tensors(anchored.final_adapter))
    metrics = next(e for e in seen if e.type == "step_metrics").metrics
    assert metrics["anchor/nll"] > 0


def test_the_sft_anchor_is_refused_where_the_backend_cannot_add_it(config, monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "supports_sft_anchor", False)
    with pytest.raises(ApplianceError, match="sft_anchor is not available"):
        grpo(dataclasses.replace(config, sft_anchor=1.0))


def test_keep_decisions_leaves_declines_out_of_the_loss_and_still_trains_the_calls(config, monkeypatch):
    """Every other rollout counts as a decline: its stored advantage is 0, the other rows still move the LoRA."""
    from appliance.store import Workspace
    from appliance.train import callbacks

    monkeypatch.setattr(callbacks, "declined", lambda row: row["sample_index"] % 2 == 0)
    seen = []
    result = grpo(dataclasses.replace(config, keep_decisions=True), sink=seen.append)
    _, rows = Workspace.open(config.workspace).query(
        "SELECT sample_index, advantage FROM rollouts WHERE run_id = ?", [result.run_id])
    assert len(rows) == 8 and all(a == 0 for i, a in rows if i % 2 == 0)
    assert any(a != 0 for i, a in rows if i % 2 == 1)
    metrics = next(e for e in seen if e.type == "step_metrics").metrics
    assert metrics["frac_declines_left_out"] == pytest.approx(0.5)


def test_keep_decisions_is_refused_on_a_multi_turn_pack_before_the_model_loads(tiny_model_dir, tmp_path):
    from appliance.errors import ApplianceError

    config = TrainConfig(model=str(tiny_model_dir), pack="workplace-multi", backend="cpu", steps=1,
                         keep_decisions=True, output=str(tmp_path / "ck"), workspace=str(tmp_path / "runs"))
    with pytest.raises(ApplianceError, match="keep_decisions needs a single-turn pack"):
        run_grpo(config)


def test_guidance_is_refused_on_a_multi_turn_pack_before_the_model_loads(tiny_model_dir, tmp_path):
    from appliance.errors import ApplianceError

    config = TrainConfig(model=str(tiny_model_dir), pack="workplace-multi", backend="cpu", steps=1,
                         guide_failed_groups=True, output=str(tmp_path / "ck"), workspace=str(tmp_path / "runs"))
    with pytest.raises(ApplianceError, match="single-turn pack"):
        run_grpo(config)


class SimulatedKill(Exception):
    pass


def test_grpo_resume_after_kill_has_no_duplicate_rollouts(config, monkeypatch):
    from appliance.store import Workspace
    from appliance.train import screen

    config = dataclasses.replace(config, steps=3, eval_every=1)

    def die_at_step_2(event):  # after step 2's rollouts are stored, before its checkpoint
        if event.type == "step_metrics" and event.step == 2:
            raise SimulatedKill()

    with pytest.raises(SimulatedKill):
        grpo(config, sink=die_at_step_2)
    run_id = next(p.name for p in Path(config.workspace).iterdir() if p.name.startswith("grpo-"))
    ws = Workspace.open(config.workspace)
    _, rows = ws.query("SELECT step, count(*) FROM rollouts WHERE run_id = ? GROUP BY step ORDER BY step", [run_id])
    assert rows == [(1, 8), (2, 8)]
    _, first_start = ws.query("SELECT started_at FROM runs WHERE run_id = ?", [run_id])

    def rescored(*args):
        raise AssertionError("a resumed run reuses its screening")

    monkeypatch.setattr(screen, "score_tasks", rescored)
    result = grpo(dataclasses.replace(config, resume_from=run_id))
    assert result.run_id == run_id and result.resumed_from_step == 1
    assert ws.query("SELECT started_at FROM runs WHERE run_id = ?", [run_id])[1] == first_start
    _, rows = ws.query("SELECT step, count(*), count(DISTINCT task_id || '/' || sample_index) FROM rollouts "
                       "WHERE run_id = ? GROUP BY step ORDER BY step", [run_id])
    assert rows == [(1, 8, 8), (2, 8, 8), (3, 8, 8)]
    assert [c.step for c in registry.list_checkpoints(config.output, run_id)] == [1, 2, 3]
    state = json.loads((Path(result.run_dir) / "trainer" / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    parent = registry.load_manifest(Path(config.output) / run_id / "step-00003")["parent"]
    assert parent == f"{run_id}/step-00002"


def test_uncertain_task_selection_trains_on_the_screened_tasks(config):
    from appliance.store import Workspace

    result = grpo(config)  # 1 step x 2 prompts: keeps 2 of the 4 train tasks
    screened = json.loads((Path(result.run_dir) / "screening.json").read_text())
    assert len(screened) == 4 and all(item["gold_logprob"] < 0 for item in screened)
    kept = [item for item in screened if item["selected"]]
    dropped = [item for item in screened if not item["selected"]]
    assert len(kept) == 2
    assert min(i["variance_chance"] for i in kept) >= max(i["variance_chance"] for i in dropped)
    ws = Workspace.open(config.workspace)
    _, rows = ws.query("SELECT DISTINCT task_id FROM rollouts WHERE run_id = ?", [result.run_id])
    assert {r[0] for r in rows} == {item["task_id"] for item in kept}
    _, events = ws.query("SELECT json_array_length(payload->'tasks') FROM events "
                         "WHERE run_id = ? AND type = 'tasks_screened'", [result.run_id])
    assert events == [(4,)]


def expect_no_call(pack_dir: Path, task_ids: set[str]) -> None:
    """Turn some of the mini pack's train tasks into ones whose answer is to make no call."""
    path = pack_dir / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        if row["id"] in task_ids:
            row["expected"] = []
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_no_call_cap_of_0_screens_and_trains_only_tasks_that_need_a_call(config):
    from appliance.store import Workspace

    assert TrainConfig().max_no_call_share == 0.3  # the default (chosen on dev, session 13)
    config = dataclasses.replace(config, max_no_call_share=0.0)
    expect_no_call(Path(config.pack), {"m0", "m1"})
    result = grpo(config)
    screened = json.loads((Path(result.run_dir) / "screening.json").read_text())
    assert sorted(item["task_id"] for item in screened) == ["m2", "m3"]  # the no-call tasks were not even scored
    _, rows = Workspace.open(config.workspace).query("SELECT DISTINCT task_id FROM rollouts WHERE run_id = ?",
                                                     [result.run_id])
    assert {r[0] for r in rows} <= {"m2", "m3"}


def test_a_pool_of_only_no_call_tasks_is_refused_before_the_model_loads(config, monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.train.cpu import CpuBackend

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(CpuBackend, "load_for_training", never)
    expect_no_call(Path(config.pack), {"m0", "m1", "m2", "m3"})
    with pytest.raises(ApplianceError, match="expects no call.*--max-no-call-share 1"):
        grpo(dataclasses.replace(config, max_no_call_share=0.0))


def test_task_selection_all_keeps_every_task(config):
    result = grpo(dataclasses.replace(config, task_selection="all"))
    assert not (Path(result.run_dir) / "screening.json").exists()


def test_a_backend_that_cannot_screen_trains_on_every_task(config, monkeypatch):
    from appliance.train import common
    from appliance.train.cpu import CpuBackend

    class NoScreening(CpuBackend):
        supports_screening = False

    monkeypatch.setattr(common, "get_backend", lambda name, config=None: NoScreening(config))
    seen = []
    result = grpo(config, sink=seen.append)
    assert not (Path(result.run_dir) / "screening.json").exists()
    assert any(e.type == "log" and "not available on the cpu backend" in e.message for e in seen)


def test_dapo_preset_runs_and_reports_dropped_groups(config):
    seen = []
    grpo(dataclasses.replace(config, preset="dapo"), sink=seen.append)
    metrics = next(e for e in seen if e.type == "step_metrics").metrics
    assert 0.0 <= metrics["frac_groups_dropped"] <= 1.0


def test_grpo_default_rewards_store_every_component(config):
    from appliance.rewards import COMPONENTS
    from appliance.store import Workspace

    result = run_grpo(config)  # the pack's own scheme (shaped), reward functions and verifier
    _, rows = Workspace.open(config.workspace).query(
        "SELECT map_keys(components), reward, v_reason FROM rollouts WHERE run_id = ?", [result.run_id])
    assert len(rows) == 8
    assert all(sorted(r[0]) == sorted(COMPONENTS) and r[2] for r in rows)


def with_rl_split(pack_dir: Path) -> Path:
    """The mini pack plus a `train_rl` split of requests SFT never sees (GRPO's pool)."""
    rows = [{"id": f"rl{i}", "messages": [{"role": "user", "content": f"Could you write to {name} about lunch?"}],
             "expected": [{"name": "send_email", "arguments": {"to": name}}], "kind": "single_step", "tags": {}}
            for i, name in enumerate(("Lena", "Raj", "Ines"))]
    (pack_dir / "train_rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = pack_dir / "pack.toml"
    manifest.write_text(manifest.read_text().replace('train = "train.jsonl"\n',
                                                     'train = "train.jsonl"\ntrain_rl = "train_rl.jsonl"\n'))
    return pack_dir


def test_grpo_draws_only_from_the_rl_split_and_sft_only_from_train(config):
    from appliance.store import Workspace

    config = dataclasses.replace(config, pack=str(with_rl_split(Path(config.pack))), task_selection="all", steps=2)
    result = grpo(config)
    ws = Workspace.open(config.workspace)
    _, rows = ws.query("SELECT DISTINCT task_id FROM rollouts WHERE run_id = ?", [result.run_id])
    assert rows and {r[0] for r in rows} <= {"rl0", "rl1", "rl2"}
    assert json.loads((Path(result.run_dir) / "config.json").read_text())["train_split"] is None
    from appliance.packs import load_pack
    from appliance.train.sft import sft_rows

    pack = load_pack(config.pack)
    assert config.training_split(pack) == "train_rl"
    sft = dataclasses.replace(config, stage="sft")
    assert sft.training_split(pack) == "train"
    assert dataclasses.replace(config, train_split="train").training_split(pack) == "train"
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model)
    assert {r["task_id"] for r in sft_rows(pack, tokenizer, sft.training_split(pack))} == {"m0", "m1", "m2", "m3"}


def test_a_missing_training_split_is_one_sentence_before_the_model_loads(config, monkeypatch):
    from appliance.errors import ApplianceError
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "load_for_training", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(ApplianceError, match="no tasks in a 'train_rl' split"):
        grpo(dataclasses.replace(config, train_split="train_rl"))



@pytest.mark.parametrize("stage", ["sft", "grpo"])
def test_training_forwards_reuse_the_prompts_frozen_heads(config, monkeypatch, stage):
    """TRL's real batches (SFT right-padded, GRPO left-padded prompts) take the frozen-head path."""
    from appliance.train import frozen_heads

    installed = []
    install = frozen_heads.install_frozen_heads

    def spy(model, prompts):
        installed.append(install(model, prompts))
        return installed[-1]

    monkeypatch.setattr(frozen_heads, "install_frozen_heads", spy)
    run_sft(config) if stage == "sft" else grpo(config)
    assert len(installed) == 1 and installed[0] is not None and installed[0].split == 1
    assert installed[0].stats.forwards >= 1 and installed[0].stats.tokens_skipped > 0
