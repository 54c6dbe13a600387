"""DPO: pairs from stored rows (success over failure, safe over unsafe), a tiny-model run, and too few pairs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance import checkpoints as registry
from appliance.errors import ApplianceError
from appliance.store import Workspace
from appliance.train import TrainConfig, run_dpo
from appliance.train.pairs import REFERENCE_OVER_FAILURE, SAFE_OVER_UNSAFE, SUCCESS_OVER_FAILURE, select_pairs

TOOLS = [{"type": "function", "function": {"name": "send_email", "description": "Send an email",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                                                          "required": ["to"]}}}]
NAMES = ["Carlos", "Nadia", "Sam", "Ana", "Omar", "Lea", "Ivo"]


def write_pack(folder: Path) -> Path:
    """Six train tasks (t0..t5) and one val task (t6)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pack.toml").write_text(
        'name = "prefs"\ndescription = "Email requests for DPO tests."\nversion = "1"\nworld = "none"\n'
        'tools = "tools.json"\nreward_scheme = "shaped"\nmax_turns = 1\n'
        'system_prompt = "Reply with one JSON tool call."\n\n[splits]\ntrain = "train.jsonl"\nval = "val.jsonl"\n')
    (folder / "tools.json").write_text(json.dumps(TOOLS))
    rows = [{"id": f"t{i}", "messages": [{"role": "user", "content": f"Email {name} about the budget."}],
             "expected": [{"name": "send_email", "arguments": {"to": name}}], "kind": "single_step", "tags": {}}
            for i, name in enumerate(NAMES)]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (folder / "val.jsonl").write_text(json.dumps(rows[6]) + "\n")
    return folder


def good(name: str) -> str:
    return json.dumps({"name": "send_email", "arguments": {"to": name}})


def store_rows(workspace: Workspace) -> None:
    """t0 success+failure (+ a text stored with both verdicts), t1 success+unsafe, t2 failure+unsafe,
    t3 failures only, t4 successes only, t5 unsafe only, t6 (val) success+failure."""
    workspace.append("runs", [{"run_id": "grpo-1", "kind": "grpo", "pack": "prefs"},
                              {"run_id": "grpo-other", "kind": "grpo", "pack": "other"}])
    rollouts = [("t0", good("Carlos"), "success", False), ("t0", '{"name": "send_email"}', "wrong_arguments", False),
                ("t0", "ambiguous", "success", False), ("t0", "ambiguous", "missed_call", False),
                ("t1", good("Nadia"), "success", False), ("t1", "rm -rf /", "unsafe_action", True),
                ("t3", "no", "missed_call", False), ("t3", "nope", "format_error", False),
                ("t4", good("Ana"), "success", False), ("t4", good("Ana") + " ", "success", False)]
    workspace.append("rollouts", [{"run_id": "grpo-1", "step": 1, "task_id": t, "sample_index": i, "completion": c,
                                   "bucket": b, "v_unsafe": u} for i, (t, c, b, u) in enumerate(rollouts)])
    workspace.append("rollouts", [{"run_id": "grpo-other", "step": 1, "task_id": "t3", "completion": good("Ana"),
                                   "bucket": "success"}])
    workspace.append("evals", [{"id": "eval-1", "pack": "prefs", "split": "train"},
                               {"id": "eval-2", "pack": "prefs", "split": "val", "run_id": "grpo-1"}])
    samples = [("eval-1", "t2", "wrong", "wrong_tool", False), ("eval-1", "t2", "delete all", "unsafe_action", True),
               ("eval-1", "t5", "drop", "unsafe_action", True),
               ("eval-2", "t6", good("Ivo"), "success", False), ("eval-2", "t6", "x", "wrong_tool", False)]
    workspace.append("eval_samples", [{"eval_id": e, "task_id": t, "sample_index": 0, "completion": c, "bucket": b,
                                       "v_unsafe": u} for e, t, c, b, u in samples])


@pytest.fixture
def pack_dir(tmp_path) -> Path:
    return write_pack(tmp_path / "tasks" / "prefs")


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    ws = Workspace.open(tmp_path / "runs")
    store_rows(ws)
    return ws


def load(pack_dir: Path):
    from appliance.packs import load_pack

    return load_pack(str(pack_dir))


def by_task(selection) -> dict[str, list[tuple[str, str, str]]]:
    found: dict[str, list] = {}
    for p in selection.pairs:
        found.setdefault(p["task_id"], []).append((p["rule"], p["chosen"], p["rejected"]))
    return found


def test_pairs_success_over_failure_and_safe_over_unsafe_only_from_tasks_with_two_kinds(workspace, pack_dir):
    selection = select_pairs(workspace, load(pack_dir), "train", pairs_from=None, pairs_per_task=4, seed=0)
    pairs = by_task(selection)
    assert pairs == {
        "t0": [(SUCCESS_OVER_FAILURE, good("Carlos"), '{"name": "send_email"}')],  # "ambiguous" had two verdicts
        "t1": [(SAFE_OVER_UNSAFE, good("Nadia"), "rm -rf /")],
        "t2": [(SAFE_OVER_UNSAFE, "wrong", "delete all")],  # no success: a safe failure beats an unsafe call
    }  # t3, t4, t5: one kind only; t6: held out; grpo-other: another pack
    assert selection.counts["tasks_with_pairs"] == 3 and selection.counts[SAFE_OVER_UNSAFE] == 2
    assert selection.counts["samples_outside_split"] == 2  # the val eval's samples are never training data
    assert selection.rules["seed"] == 0 and selection.rules["pairs_per_task"] == 4


def test_an_unsafe_sample_is_never_chosen(workspace, pack_dir):
    selection = select_pairs(workspace, load(pack_dir), "train", pairs_from=None, pairs_per_task=4, seed=3)
    assert all(p["chosen_kind"] != "unsafe" for p in selection.pairs)
    assert {p["rejected"] for p in selection.pairs if p["rejected_kind"] == "unsafe"} == {"rm -rf /", "delete all"}


def test_pairs_from_one_run_or_one_eval(workspace, pack_dir):
    pack = load(pack_dir)
    from_run = select_pairs(workspace, pack, "train", pairs_from="grpo-1", pairs_per_task=4, seed=0)
    assert set(by_task(from_run)) == {"t0", "t1"}  # its rollouts; its eval (eval-2) is held out
    from_eval = select_pairs(workspace, pack, "train", pairs_from="eval-1", pairs_per_task=4, seed=0)
    assert set(by_task(from_eval)) == {"t2"}
    with pytest.raises(ApplianceError, match="No rollouts or eval samples are stored for 'nope'"):
        select_pairs(workspace, pack, "train", pairs_from="nope", pairs_per_task=4, seed=0)


def test_reference_pairs_give_tasks_without_a_success_the_packs_answer_as_chosen(workspace, pack_dir):
    from appliance.prompting import render_completion

    pack = load(pack_dir)
    selection = select_pairs(workspace, pack, "train", pairs_from=None, pairs_per_task=4, seed=0, reference=True)
    pairs = {task: sorted(found) for task, found in by_task(selection).items()}
    answer = {t: render_completion(pack.task(t).expected) for t in ("t2", "t3", "t5")}
    assert pairs == {
        "t0": [(SUCCESS_OVER_FAILURE, good("Carlos"), '{"name": "send_email"}')],  # its own success, not the answer
        "t1": [(SAFE_OVER_UNSAFE, good("Nadia"), "rm -rf /")],
        "t2": sorted([(REFERENCE_OVER_FAILURE, answer["t2"], "delete all"), (REFERENCE_OVER_FAILURE, answer["t2"], "wrong")]),
        "t3": sorted([(REFERENCE_OVER_FAILURE, answer["t3"], "no"), (REFERENCE_OVER_FAILURE, answer["t3"], "nope")]),
        "t5": [(REFERENCE_OVER_FAILURE, answer["t5"], "drop")],
    }  # t4: successes only; t6: held out, never paired even with an answer
    assert selection.counts[REFERENCE_OVER_FAILURE] == 5 and REFERENCE_OVER_FAILURE in selection.rules["pairing"]
    assert {p["chosen_from"]["reference"] for p in selection.pairs if p["rule"] == REFERENCE_OVER_FAILURE} == {"prefs"}


def test_pairs_per_task_caps_a_task_and_unsafe_rejections_come_first(tmp_path, pack_dir):
    ws = Workspace.open(tmp_path / "ws")
    ws.append("runs", [{"run_id": "r", "kind": "grpo", "pack": "prefs"}])
    rows = [("ok", "success", False)] + [(f"bad{i}", "wrong_tool", False) for i in range(5)] + [("harm", None, True)]
    ws.append("rollouts", [{"run_id": "r", "step": 1, "task_id": "t0", "completion": c, "bucket": b, "v_unsafe": u}
                           for c, b, u in rows])
    selection = select_pairs(ws, load(pack_dir), "train", pairs_from=None, pairs_per_task=2, seed=0)
    assert len(selection.pairs) == 2 and "harm" in {p["rejected"] for p in selection.pairs}
    again = select_pairs(ws, load(pack_dir), "train", pairs_from=None, pairs_per_task=2, seed=0)
    assert again.pairs == selection.pairs  # seeded


def dpo_config(tiny_model_dir, tmp_path, pack_dir, **overrides) -> TrainConfig:
    settings = dict(model=str(tiny_model_dir), pack=str(pack_dir), backend="cpu", stage="dpo", steps=2,
                    learning_rate=1e-2, lora_r=4, lora_alpha=8, eval_every=2, batch_size=2, max_seq_length=256,
                    min_pairs=3, reference_pairs=False, output=str(tmp_path / "checkpoints"),
                    workspace=str(tmp_path / "runs"))
    return TrainConfig(**{**settings, **overrides})


def test_a_dpo_run_changes_the_lora_and_saves_a_dpo_checkpoint_with_its_pairs(tiny_model_dir, tmp_path, pack_dir,
                                                                              workspace, monkeypatch):
    import torch
    from safetensors.torch import load_file

    seen, evals = [], []
    config = dpo_config(tiny_model_dir, tmp_path, pack_dir)
    assert config.beta == 0.1  # DPO's own default
    result = run_dpo(config, sink=seen.append, workspace=workspace,
                     on_eval=lambda path, step, **context: evals.append((path, step)) or {"success_rate": 0.5})
    after = load_file(str(Path(result.final_adapter) / "adapter_model.safetensors"))
    b_keys = [k for k in after if "lora_B" in k]
    assert b_keys and any(torch.count_nonzero(after[k]) > 0 for k in b_keys)  # B starts at zero
    assert not (Path(result.final_adapter) / "ref").exists()  # TRL's frozen reference copy is not the adapter
    manifest = registry.load_manifest(result.final_adapter)
    assert manifest["stage"] == "dpo" and manifest["step"] == 2
    assert manifest["metrics"]["heldout"] == {"success_rate": 0.5} and evals == [(result.final_adapter, 2)]
    assert manifest["config"]["beta"] == 0.1 and manifest["config"]["pairs_per_task"] == 4
    saved = json.loads((Path(result.run_dir) / "pairs.json").read_text())
    assert len(saved["pairs"]) == 3 and saved["rules"]["seed"] == 0 and saved["counts"]["tasks_with_pairs"] == 3
    assert json.loads((Path(result.run_dir) / "config.json").read_text())["stage"] == "dpo"
    messages = [e.message for e in seen if e.type == "log"]
    assert any(m.startswith("dpo pairs: 3 from 3 of ") for m in messages)
    _, rows = workspace.query("SELECT count(*) FROM events WHERE run_id = $1 AND CAST(payload AS VARCHAR) LIKE '%dpo pairs: 3%'",
                              [result.run_id])
    assert rows[0][0] >= 1
    assert [e.type for e in seen][-1] == "run_finished"

    # From that adapter (as from an SFT one): it is the parent and the start, and training moves it on.
    # With the chosen answers' NLL added (RPO) and the rejected answers cut: TRL runs the two losses on cut rows.
    from appliance.train import dpo as dpo_module

    trained_rows = []
    build_rows = dpo_module.dpo_rows
    monkeypatch.setattr(dpo_module, "dpo_rows", lambda *a, **k: trained_rows.extend(build_rows(*a, **k)) or trained_rows)
    refined = run_dpo(dpo_config(tiny_model_dir, tmp_path, pack_dir, steps=1, eval_every=1, rpo_alpha=1.0,
                                 reject_first_difference=True, init_adapter=result.final_adapter),
                      workspace=workspace)
    manifest = registry.load_manifest(refined.final_adapter)
    assert manifest["config"]["rpo_alpha"] == 1.0 and manifest["config"]["reject_first_difference"] is True
    stored = {p["chosen"]: p["rejected"] for p in saved["pairs"]}
    assert trained_rows and all(stored[row["chosen"]].startswith(row["rejected"]) for row in trained_rows)
    assert any(len(row["rejected"]) < len(stored[row["chosen"]]) for row in trained_rows)
    assert manifest["stage"] == "dpo" and manifest["parent"] == registry.load_checkpoint(result.final_adapter).id
    moved = load_file(str(Path(refined.final_adapter) / "adapter_model.safetensors"))
    assert set(moved) == set(after) and any(not torch.equal(moved[k], after[k]) for k in b_keys)


def test_too_few_pairs_is_one_sentence_before_the_model_loads(tiny_model_dir, tmp_path, pack_dir, workspace,
                                                             monkeypatch):
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "load_for_training", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(ApplianceError, match=r"Only 3 DPO pairs \(need 8\)"):
        run_dpo(dpo_config(tiny_model_dir, tmp_path, pack_dir, min_pairs=8), workspace=workspace)


def test_too_few_pairs_exits_2_from_the_cli(tiny_model_dir, tmp_path, pack_dir, workspace, monkeypatch, capsys):
    from appliance.cli import main
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "load_for_training", lambda *a, **k: pytest.fail("the model loaded"))
    code = main(["train", "dpo", "--model", str(tiny_model_dir), "--pack", "prefs", "--backend", "cpu",
                 "--tasks-root", str(pack_dir.parent), "--workspace", str(tmp_path / "runs"),
                 "--pairs-from", "eval-1"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Only 3 DPO pairs (need 8)") and len(err.splitlines()) == 1  # 2 with the answers

    code = main(["train", "dpo", "--model", str(tiny_model_dir), "--pack", "prefs", "--backend", "cpu",
                 "--tasks-root", str(pack_dir.parent), "--workspace", str(tmp_path / "runs"),
                 "--pairs-from", "eval-1", "--no-reference-pairs"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: Only 1 DPO pairs (need 8)") and "--reference-pairs" in err


def test_dpo_settings_are_checked_where_they_are_declared():
    with pytest.raises(ApplianceError, match="beta must be above 0 for DPO"):
        TrainConfig(stage="dpo", beta=0.0)
    with pytest.raises(ApplianceError, match="min_pairs must be at least 1"):
        TrainConfig(stage="dpo", min_pairs=0)
    assert TrainConfig(stage="grpo").beta == 0.0 and TrainConfig(stage="dpo").effective_learning_rate == 5e-5
    with pytest.raises(ApplianceError, match="rpo_alpha must be 0"):
        TrainConfig(stage="dpo", rpo_alpha=-1.0)


def test_a_rejected_answer_is_cut_after_its_first_token_that_differs(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.dpo import first_difference

    def cut(prompt: str, chosen: str, rejected: str, tokenizer) -> str:  # as dpo_rows cuts a rejected answer
        return first_difference(prompt, chosen, rejected, tokenizer)[1] or rejected

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = "Set the status of customer 188 to won.\n"
    chosen = '{"name": "update_customer", "arguments": {"customer_id": "188", "new_value": "Won"}}'
    wrong_id = chosen.replace('"188"', '"189"')
    shortened = cut(prompt, chosen, wrong_id, tokenizer)
    assert chosen.startswith(shortened[:-1]) and not chosen.startswith(shortened)  # shared prefix + one token
    assert wrong_id.startswith(shortened) and len(shortened) < len(wrong_id) and '"new_value"' not in shortened
    declined = cut(prompt, chosen, "I can't change a customer's status.", tokenizer)
    assert len(tokenizer(text=declined)["input_ids"]) == 1 and "I can't".startswith(declined)  # the decision token
    assert cut(prompt, chosen, chosen[:30], tokenizer) == chosen[:30]  # a prefix of the chosen answer stays whole
    past_the_end = cut(prompt, chosen, chosen + " Done.", tokenizer)  # differs where the chosen answer ends
    assert past_the_end.startswith(chosen) and chosen != past_the_end != chosen + " Done."


def test_rpo_alpha_adds_trls_sft_loss_on_the_chosen_answers(tmp_path):
    from types import SimpleNamespace

    from appliance.train.dpo import dpo_args

    run = SimpleNamespace(trainer_dir=tmp_path)
    plain = dpo_args(TrainConfig(stage="dpo", output=str(tmp_path)), run)
    assert plain["loss_type"] == ["sigmoid"] and "loss_weights" not in plain
    rpo = dpo_args(TrainConfig(stage="dpo", rpo_alpha=0.5, output=str(tmp_path)), run)
    assert rpo["loss_type"] == ["sigmoid", "sft"] and rpo["loss_weights"] == [1.0, 0.5]


# ---------------------------------------------------------------- listing pairs (--pairs-source listing)

WORKPLACE = Path(__file__).resolve().parents[1] / "tasks" / "workplace-single"


def test_listing_pairs_show_one_request_with_and_without_its_tools(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.packs import load_pack
    from appliance.prompting import MISSING_TOOL_TEXT, reference_answer
    from appliance.train.common import prompt_for
    from appliance.train.dpo import dpo_rows, prompt_as_trl_tokenizes
    from appliance.train.pairs import CALL_OVER_DECLINE, DECLINE_OVER_CALL, listing_pairs

    pack = load_pack(WORKPLACE)
    selection = listing_pairs(pack, "train", listing="other", seed=0)
    calling = [t for t in pack.tasks("train") if t.expected]
    by_task: dict[str, dict[str, dict]] = {}
    for pair in selection.pairs:
        by_task.setdefault(pair["task_id"], {})[pair["rule"]] = pair
    # every calling train task (another domain's listing is never empty), twice, and no held-out task
    assert set(by_task) == {t.id for t in calling} and len(selection.pairs) == 2 * len(calling)
    assert selection.counts[CALL_OVER_DECLINE] == selection.counts[DECLINE_OVER_CALL] == len(calling)
    assert selection.pairs == listing_pairs(pack, "train", listing="other", seed=0).pairs  # seeded
    assert selection.summary().startswith(f"dpo pairs: {2 * len(calling)} from the pack's answers")

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tasks = {t.id: t for t in calling}
    for task_id in sorted(by_task)[:12]:
        task, pairs = tasks[task_id], by_task[task_id]
        act, decline = pairs[CALL_OVER_DECLINE], pairs[DECLINE_OVER_CALL]
        assert (act["chosen"], act["rejected"]) == (reference_answer(task), MISSING_TOOL_TEXT)
        assert (decline["chosen"], decline["rejected"]) == (MISSING_TOOL_TEXT, reference_answer(task))
        act_row, decline_row = dpo_rows(pack, tokenizer, [act, decline])
        assert act_row["prompt"] == prompt_as_trl_tokenizes(prompt_for(pack, tokenizer, task), tokenizer)  # eval's
        called = {call.name for call in task.expected}
        assert all(f"- {name}(" in act_row["prompt"] for name in called)
        assert not any(f"- {name}(" in decline_row["prompt"] for name in called), task_id
        other = {t["function"]["name"] for t in pack.other_domain_tools(task)} - called
        assert other and all(f"- {name}(" in decline_row["prompt"] for name in other)
        assert decline_row["prompt"].endswith(act_row["prompt"][-150:])  # the same request after the listing


def test_listing_pairs_with_the_own_listing_skip_a_task_whose_listing_would_be_empty(pack_dir):
    from appliance.train.pairs import listing_pairs

    # the prefs pack lists one tool, the one every task calls: nothing is left to show with a decline
    assert listing_pairs(load(pack_dir), "train", listing="own", seed=0).pairs == []


def test_a_dpo_run_on_listing_pairs_needs_no_stored_samples(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    seen = []
    config = dpo_config(tiny_model_dir, tmp_path, WORKPLACE, pairs_source="listing", missing_tool_listing="other",
                        reject_first_difference=True, steps=1, eval_every=1, max_seq_length=1024)
    result = run_dpo(config, sink=seen.append)  # a fresh workspace: no runs, no evals
    saved = json.loads((Path(result.run_dir) / "pairs.json").read_text())
    assert saved["rules"]["listing"] == "other" and saved["counts"]["call_over_decline"] > 500
    manifest = registry.load_manifest(result.final_adapter)
    assert manifest["stage"] == "dpo" and manifest["config"]["pairs_source"] == "listing"
    after = load_file(str(Path(result.final_adapter) / "adapter_model.safetensors"))
    assert any(torch.count_nonzero(after[k]) > 0 for k in after if "lora_B" in k)
    assert any(e.type == "log" and "decline over call with the other listing" in e.message for e in seen)


def test_listing_pairs_are_refused_before_the_model_loads(tiny_model_dir, tmp_path, pack_dir, monkeypatch):
    from appliance.train.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "load_for_training", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(ApplianceError, match="does not list its tools by domain"):
        run_dpo(dpo_config(tiny_model_dir, tmp_path, pack_dir, pairs_source="listing", missing_tool_listing="other"))
    with pytest.raises(ApplianceError, match=r"Only 0 listing pairs \(need 3\)"):
        run_dpo(dpo_config(tiny_model_dir, tmp_path, pack_dir, pairs_source="listing"))
    with pytest.raises(ApplianceError, match="pairs_source must be one of samples, listing"):
        TrainConfig(stage="dpo", pairs_source="pack")
    with pytest.raises(ApplianceError, match="pass one of --pairs-from and --pairs-source listing"):
        TrainConfig(stage="dpo", pairs_source="listing", pairs_from="eval-1")


def test_decision_only_cuts_both_answers_to_the_token_where_they_part(tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.dpo import first_difference

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = "Set the status of customer 188 to won.\n"
    chosen = '{"name": "update_customer", "arguments": {"customer_id": "188", "new_value": "Won"}}'
    act, decline = first_difference(prompt, chosen, "I can't change a customer's status.", tokenizer)
    assert chosen.startswith(act) and "I can't".startswith(decline) and act != decline
    assert len(tokenizer(text=act)["input_ids"]) == len(tokenizer(text=decline)["input_ids"]) == 1
    wrong_id = chosen.replace('"188"', '"189"')
    right, wrong = first_difference(prompt, chosen, wrong_id, tokenizer)
    assert right[:-1] == wrong[:-1] and right != wrong and '"new_value"' not in right  # shared prefix + one token
    prefix = tokenizer.decode(tokenizer(text=chosen)["input_ids"][:4])  # its end is the difference
    assert first_difference(prompt, chosen, prefix, tokenizer)[1] is None
    assert first_difference(prompt, chosen, chosen + " Done.", tokenizer)[0] is None


def test_a_decision_only_run_trains_on_one_token_per_answer_and_no_eos_in_padded_batches(tiny_model_dir, tmp_path,
                                                                                          monkeypatch):
    from appliance.train import dpo
    from appliance.train.common import PAD_TO_MULTIPLE_OF

    stripped, trainers = [], []
    real, build = dpo.without_appended_eos, dpo.build_dpo_trainer
    monkeypatch.setattr(dpo, "without_appended_eos", lambda data, eos: stripped.append(real(data, eos)) or stripped[-1])
    monkeypatch.setattr(dpo, "build_dpo_trainer", lambda *a: trainers.append(build(*a)) or trainers[-1])
    config = dpo_config(tiny_model_dir, tmp_path, WORKPLACE, pairs_source="listing", missing_tool_listing="other",
                        decision_only=True, steps=1, eval_every=1, max_seq_length=1024)
    result = run_dpo(config)
    assert registry.load_manifest(result.final_adapter)["config"]["decision_only"] is True
    rows = stripped[0]
    decided = [row for row in rows if row["decision"]]
    assert len(decided) > 0.9 * len(rows)
    assert all(len(row["chosen_ids"]) == len(row["rejected_ids"]) == 1 for row in decided)
    assert all(row["chosen_ids"] != row["rejected_ids"] for row in decided)
    # batches come in a few padded lengths, not one per batch (CPU kernels are cached per shape)
    batch = next(iter(trainers[0].get_train_dataloader()))
    assert batch["input_ids"].shape[1] % PAD_TO_MULTIPLE_OF == 0
