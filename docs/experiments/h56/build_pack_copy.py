"""Sessions 39 and 44 (docs/learning.md, H56, H57, H77): workplace-single with more core wordings in one split.

    .venv/bin/python docs/experiments/h56/build_pack_copy.py OUT_ROOT [WORDINGS_JSON [train|train_rl]]

Writes the generated packs into OUT_ROOT (use it as `--tasks-root`) with each listed template's wordings added to
its wordings for that split (default `train`, SFT's; `train_rl` is GRPO's), through the generator itself (same
seed, sizes and near-duplicate filter). Each split draws from its own seeded stream, so only the chosen split may
change; the script checks that every other split matches the committed pack byte for byte and stops otherwise.
Without a wordings file it must reproduce the pack.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

from appliance.packs import generate
from appliance.packs.build import SINGLE_PACK, build_workplace_packs

REPO = Path(__file__).resolve().parents[3]
SPLITS = ("val", "dev", "train_rl", "train")


def with_more_wordings(templates_for, extra: dict[str, list[str]], split: str):
    """`templates_for` with `extra[template]` appended to each template's wordings for `split`: SFT's training
    wordings (val's stays last) or GRPO's `rl_phrasings`."""
    def patched(kind: str):
        result = []
        for template in templates_for(kind):
            more = tuple(extra.get(template.id, ())) if kind == "single_step" else ()
            if more and split == "train_rl":
                template = dataclasses.replace(template, rl_phrasings=template.rl_phrasings + more)
            elif more and template.phrasings_for("train"):
                head, last = template.phrasings[:-1], template.phrasings[-1:]
                phrasings = head + more + last if template.in_val else template.phrasings + more
                template = dataclasses.replace(template, phrasings=phrasings)
            result.append(template)
        return result
    return patched


def main() -> None:
    out_root = Path(sys.argv[1])
    extra = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else {}
    into = sys.argv[3] if len(sys.argv) > 3 else "train"
    if into not in ("train", "train_rl"):
        sys.exit(f"the wordings go into train or train_rl, not {into!r}")
    generate.templates_for = with_more_wordings(generate.templates_for, extra, into)
    # WorkBench's requests, which no training request may repeat: from ../shared when present, else the copy's
    # committed test split (the generator's own fallback).
    multi = out_root / "workplace-multi"
    multi.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "tasks/workplace-multi/test.jsonl", multi / "test.jsonl")
    build_workplace_packs(out_root, workbench_src=None, seed=0)
    committed, built = REPO / "tasks" / SINGLE_PACK, out_root / SINGLE_PACK
    for split in SPLITS:
        same = (committed / f"{split}.jsonl").read_bytes() == (built / f"{split}.jsonl").read_bytes()
        print(f"{split}: {'unchanged' if same else 'changed'}")
        if split != into and not same:
            sys.exit(f"{split} changed: the extra wordings reached a split other than {into}")


if __name__ == "__main__":
    main()
