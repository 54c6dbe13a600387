"""DPO of a LoRA on preference pairs built from the store (success over failure, safe over unsafe), or from the
pack's answers in two listings (call over decline where the tools are listed, the other way where they are not).

The flywheel's cheapest learning step after SFT: the samples that evals and GRPO runs already stored
are paired per task (pairs.py) and TRL's DPOTrainer fits the LoRA with its sigmoid loss (the paper's
DPO), beta = TrainConfig.beta. The prompt of a pair is exactly what eval renders for the task
(common.prompt_for), the two completions are the stored texts; TRL appends the EOS to both.

The reference is the starting policy on both backends: TRL copies the LoRA it is given (--init-adapter's,
or a fresh one, which equals the base model at step 0) into a frozen "ref" adapter (trl 1.15
dpo_trainer.py:655-683, 1.16 :666-690), and Unsloth's patched trainer keeps that copy (it removes it for
GRPO only; appliance.train.unsloth_backend). The backend resolves as for SFT (backends.pick_backend):
`auto` is unsloth (4-bit LoRA) where CUDA and unsloth are available, else cpu (fp32, on a CUDA GPU when
one is visible). Simplifications: one pass of pair selection at the start (the pairs are saved in
runs/<run_id>/pairs.json, and a resumed run trains on those); single-turn packs only (a multi-turn
sample's stored completion is only its last turn).
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable

from ..errors import ApplianceError
from ..events import EventSink, null_sink
from .backends import pick_backend
from .callbacks import build_callback
from .common import (PAD_TO_MULTIPLE_OF, TrainResult, _load_pack, _open_workspace, finish_run, kept_selection,
                     listing_without_called, prompt_for, refuse_other_listing_without_domains, resumed_config,
                     start_run, train_with_guard, trainer_args)
from .config import TrainConfig
from .pairs import PAIRS_FILE, PairSelection, listing_pairs, select_pairs, single_turn_split_or_fail

# Backends with a DPO trainer (`make_dpo_trainer`); the first is the one every machine has.
DPO_BACKENDS = ("cpu", "unsloth")


def dpo_backend(config: TrainConfig) -> TrainConfig:
    """The config, once its backend is known to run DPO here, or one sentence saying which to choose.

    Resolved as start_run will (`auto` as for SFT), but before the pairs are selected, so a missing GPU
    or unsloth is what the sentence names.
    """
    name, _ = pick_backend(config.backend)
    if name not in DPO_BACKENDS:
        raise ApplianceError(f"DPO runs on the {' or '.join(DPO_BACKENDS)} backend, not {name}; pass "
                             f"--backend {DPO_BACKENDS[0]}.")
    return config


def pairs_or_fail(config: TrainConfig, pack: Any, workspace: Any) -> PairSelection:
    """Select the pairs and refuse, before any model loads, a pack or store that cannot give enough."""
    refuse_other_listing_without_domains(config, pack)
    split = single_turn_split_or_fail(config, pack, "DPO")
    if config.pairs_source == "listing":
        selection = listing_pairs(pack, split, listing=config.missing_tool_listing, seed=config.seed)
        if len(selection.pairs) < config.min_pairs:
            raise ApplianceError(f"Only {len(selection.pairs)} listing pairs (need {config.min_pairs}): pack "
                                 f"'{pack.name}' has {selection.counts['tasks_with_pairs']} {split} tasks that call "
                                 f"a tool and whose listing keeps another without it; lower --min-pairs or use "
                                 f"--pairs-source samples.")
        return selection
    selection = select_pairs(workspace, pack, split, pairs_from=config.pairs_from,
                             pairs_per_task=config.pairs_per_task, seed=config.seed, reference=config.reference_pairs)
    if len(selection.pairs) < config.min_pairs:
        where = f"the samples of {config.pairs_from}" if config.pairs_from else f"the store's samples of {pack.name}"
        raise ApplianceError(
            f"Only {len(selection.pairs)} DPO pairs (need {config.min_pairs}) in {where}: "
            f"{selection.counts['tasks_with_samples']} {split} tasks have samples, "
            f"{selection.counts['tasks_with_pairs']} have both a success and a failure or a safe and an unsafe one"
            f"{'' if config.reference_pairs else ' (--reference-pairs would pair failures with the pack answers)'}; "
            f"run `appliance eval` on the {split} split with --k above 1 (or a GRPO run) to store more, "
            f"or lower --min-pairs.")
    return selection


def saved_pairs(run_dir: Any) -> PairSelection:
    data = json.loads((run_dir / PAIRS_FILE).read_text(encoding="utf-8"))
    return PairSelection(pairs=data["pairs"], rules=data["rules"], counts=data.get("counts", {}))


def prompt_as_trl_tokenizes(prompt: str, tokenizer: Any) -> str:
    """The prompt text whose TRL tokenization equals eval's ids.

    TRL's DPO tokenizes text with the tokenizer's special tokens (trl data_utils.py `_tokenize`:
    `processing_class(text=...)`), while our rendered prompts already begin with the BOS where the
    template puts one and eval tokenizes them with add_special_tokens=False. For a tokenizer that adds a
    BOS itself, leave the rendered one out so the ids are the same rather than a doubled BOS.
    """
    bos = getattr(tokenizer, "bos_token", None)
    adds_bos = bos is not None and tokenizer("")["input_ids"][:1] == [tokenizer.bos_token_id]
    return prompt[len(bos):] if adds_bos and prompt.startswith(bos) else prompt


def first_difference(prompt: str, chosen: str, rejected: str, tokenizer: Any) -> tuple[str | None, str | None]:
    """Each answer up to and including its first token that differs from the other's, tokenized as TRL tokenizes a
    pair (prompt + completion as one text; the completion starts where that parts from the prompt alone).

    None for an answer that ends where the two part (it is a prefix of the other: its end is the difference, and
    TRL's EOS marks it), and for one whose cut text would not tokenize back to those tokens (a token merged across
    the prompt's end, a character split between tokens): cutting there would train another text than the one
    sampled."""
    from trl.data_utils import common_prefix_length

    prompt_ids = tokenizer(text=prompt)["input_ids"]
    chosen_ids = tokenizer(text=prompt + chosen)["input_ids"]
    rejected_ids = tokenizer(text=prompt + rejected)["input_ids"]
    start = min(common_prefix_length(prompt_ids, chosen_ids), common_prefix_length(prompt_ids, rejected_ids))
    if start < len(prompt_ids):
        return None, None
    shared = start + common_prefix_length(chosen_ids[start:], rejected_ids[start:])

    def cut(text: str, ids: list[int]) -> str | None:
        if shared >= len(ids):
            return None
        piece = tokenizer.decode(ids[start:shared + 1])
        if not text.startswith(piece) or tokenizer(text=prompt + piece)["input_ids"] != ids[:shared + 1]:
            return None
        return piece

    return cut(chosen, chosen_ids), cut(rejected, rejected_ids)


def dpo_rows(pack: Any, tokenizer: Any, pairs: list[dict[str, Any]], reject_first_difference: bool = False,
             decision_only: bool = False) -> list[dict[str, Any]]:
    """TRL's prompt/chosen/rejected rows; with `decision_only`, each row also says whether both answers were cut to
    their first differing token (`decision`), for `without_appended_eos` once TRL has tokenized them."""
    tasks = {task.id: task for split in pack.splits for task in pack.tasks(split)}
    rows = []
    for pair in pairs:
        task = tasks[pair["task_id"]]
        # A listing pair's decline is shown a listing without the tools the task calls; any other pair, eval's.
        tools = listing_without_called(pack, task, pair["listing"]) if pair.get("listing") else None
        prompt = prompt_as_trl_tokenizes(prompt_for(pack, tokenizer, task, tools), tokenizer)
        row = {"prompt": prompt, "chosen": pair["chosen"], "rejected": pair["rejected"]}
        if reject_first_difference or decision_only:
            chosen_cut, rejected_cut = first_difference(prompt, pair["chosen"], pair["rejected"], tokenizer)
            row["rejected"] = rejected_cut or pair["rejected"]
            if decision_only:
                row["decision"] = chosen_cut is not None and rejected_cut is not None
                row["chosen"] = chosen_cut if row["decision"] else pair["chosen"]
        rows.append(row)
    return rows


def without_appended_eos(dataset: Any, eos_token_id: int) -> Any:
    """TRL's tokenized rows with the EOS it appended to both answers of each `decision` row taken off again, so
    that row's loss reads the one token where its answers part and nothing after it (trl 1.15
    dpo_trainer.py:1062-1069 appends the EOS to every non-conversational answer)."""
    def strip(row: dict[str, Any]) -> dict[str, Any]:
        if row["decision"]:
            for key in ("chosen_ids", "rejected_ids"):
                if row[key][-1:] == [eos_token_id] and len(row[key]) > 1:
                    row[key] = row[key][:-1]
        return row

    return dataset.map(strip)


def dpo_args(config: TrainConfig, run: Any) -> dict[str, Any]:
    # RPO is TRL's multi-loss form: its `sft` loss is the chosen half's mean token NLL (trl 1.15 dpo_trainer.py:1471,
    # 1.16 :1495).
    losses = {"loss_type": ["sigmoid"]} if not config.rpo_alpha else {
        "loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, float(config.rpo_alpha)]}
    return {**trainer_args(config, run), "per_device_train_batch_size": config.batch_size,
            "max_length": config.max_seq_length, "beta": float(config.beta), **losses,
            "precompute_ref_log_probs": False, "pad_to_multiple_of": PAD_TO_MULTIPLE_OF}


def build_dpo_trainer(model: Any, tokenizer: Any, dataset: Any, args: dict[str, Any], callbacks: list[Any]) -> Any:
    """TRL's DPOTrainer from DPOConfig kwargs; with a PeftModel and no ref_model, the reference is the starting adapter."""
    from trl import DPOConfig, DPOTrainer

    return DPOTrainer(model=model, args=DPOConfig(**args), train_dataset=dataset, processing_class=tokenizer,
                      callbacks=callbacks)


def run_dpo(config: TrainConfig, *, sink: EventSink = null_sink, on_eval: Callable[..., dict] | None = None,
            pack: Any = None, workspace: Any = None) -> TrainResult:
    """Train a LoRA with DPO on pairs of stored samples of `config.pack`; checkpoints every eval_every steps and at the end."""
    from datasets import Dataset

    started = time.perf_counter()
    resuming = bool(config.resume_from)
    effective = dpo_backend(resumed_config(config) if resuming else dataclasses.replace(config, stage="dpo"))
    pack = pack if pack is not None else _load_pack(effective.pack)
    workspace = workspace or _open_workspace(effective.workspace)
    selection = None if resuming else pairs_or_fail(effective, pack, workspace)  # before any model loads
    run = start_run(effective if not resuming else config, "dpo", sink, pack=pack, workspace=workspace)
    selection = kept_selection(run, PAIRS_FILE, selection, saved_pairs,
                               lambda: pairs_or_fail(run.config, run.pack, run.workspace))
    model, tokenizer = run.backend.load_for_training(run.config)
    dataset = Dataset.from_list(dpo_rows(run.pack, tokenizer, selection.pairs, run.config.reject_first_difference,
                                         run.config.decision_only))
    callback = build_callback(run, recorder=None, on_eval=on_eval)
    trainer = run.backend.make_dpo_trainer(model, tokenizer, dataset, run.config, dpo_args(run.config, run), [callback])
    if run.config.decision_only:
        trainer.train_dataset = without_appended_eos(trainer.train_dataset, tokenizer.eos_token_id)
    train_with_guard(run, trainer)
    return finish_run(run, started)
