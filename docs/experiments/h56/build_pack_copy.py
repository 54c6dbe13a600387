"""Session 39's H56 and H57 (docs/learning.md): workplace-single with more core wordings in `train` only.

    .venv/bin/python docs/experiments/h56/build_pack_copy.py OUT_ROOT [docs/experiments/h56/train_wordings.json]

Writes the generated packs into OUT_ROOT (use it as `--tasks-root`) with each listed template's wordings added to
its training wordings, through the generator itself (same seed, sizes and near-duplicate filter). Each split
draws from its own seeded stream, so only `train` may change; the script checks that dev, val and `train_rl`
match the committed pack byte for byte and stops otherwise. Without a wordings file it must reproduce the pack.
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
HELD_OUT_AND_RL = ("val", "dev", "train_rl")


def with_train_wordings(templates_for, extra: dict[str, list[str]]):
    """`templates_for` with `extra[template]` appended to each template's training wordings (val's stays last)."""
    def patched(kind: str):
        result = []
        for template in templates_for(kind):
            more = tuple(extra.get(template.id, ())) if kind == "single_step" else ()
            if more and template.phrasings_for("train"):
                head, last = template.phrasings[:-1], template.phrasings[-1:]
                phrasings = head + more + last if template.in_val else template.phrasings + more
                template = dataclasses.replace(template, phrasings=phrasings)
            result.append(template)
        return result
    return patched


def main() -> None:
    out_root = Path(sys.argv[1])
    extra = json.loads(Path(sys.argv[2]).read_text()) if len(sys.argv) > 2 else {}
    generate.templates_for = with_train_wordings(generate.templates_for, extra)
    # WorkBench's requests, which no training request may repeat: from ../shared when present, else the copy's
    # committed test split (the generator's own fallback).
    multi = out_root / "workplace-multi"
    multi.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "tasks/workplace-multi/test.jsonl", multi / "test.jsonl")
    build_workplace_packs(out_root, workbench_src=None, seed=0)
    committed, built = REPO / "tasks" / SINGLE_PACK, out_root / SINGLE_PACK
    for split in HELD_OUT_AND_RL + ("train",):
        same = (committed / f"{split}.jsonl").read_bytes() == (built / f"{split}.jsonl").read_bytes()
        print(f"{split}: {'unchanged' if same else 'changed'}")
        if split in HELD_OUT_AND_RL and not same:
            sys.exit(f"{split} changed: the extra wordings reached a held-out or RL split")


if __name__ == "__main__":
    main()
