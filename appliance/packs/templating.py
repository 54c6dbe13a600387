"""The shape of a task template: phrasings plus a sampler that returns slots and the answer.

A template is one intent (for example "delete an email by id"). Its sampler
draws real entities and returns the words to fill the phrasings with and the
expected calls, computed from the same draw so request and answer agree.

Which split sees which phrasing (`Template.phrasings_for`):

* `val`: the last of `phrasings` (or all of them for a template `only_in="val"`);
  never trained on, never used to choose settings.
* `dev`: `dev_phrasings`, hand-written and seen by no training split (or all
  `phrasings` of a template `only_in="dev"`); settings are chosen here.
* `train` (SFT): the other `phrasings`, unless the template is `rl_only`.
* `train_rl` (GRPO): `rl_phrasings`, plus every training phrasing of an
  `rl_only` template: wordings and intents SFT never saw, where RL is reported
  to generalise and SFT to memorise (Chu et al. 2025, "SFT Memorizes, RL
  Generalizes").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from random import Random
from typing import Any, Callable, Literal

TRAIN_SPLITS = ("train", "train_rl")  # SFT's pool and GRPO's pool

from appliance.packs.entities import Entities
from appliance.task import ToolCall


@dataclass(frozen=True)
class Draft:
    """One sampled instance: the phrasing slots and the ground-truth calls."""

    slots: dict[str, str]
    expected: tuple[ToolCall, ...] = ()


Sampler = Callable[[Random, Entities], "Draft | None"]  # None: this draw does not fit, draw again


@dataclass(frozen=True)
class Template:
    """One intent with several phrasings. A template with `only_in` set appears in that held-out split alone
    (val's or dev's own intents); `in_val=False` ones (extra policy and argument coverage) appear
    only in training splits and dev."""

    id: str
    domain: str
    phrasings: tuple[str, ...]
    sample: Sampler
    policy: str | None = None  # "refuse": the right answer declines
    difficulty: str = "easy"
    base_template: str | None = None  # the WorkBench template family this one is modelled on
    extra_tags: dict[str, Any] = field(default_factory=dict)
    rl_phrasings: tuple[str, ...] = ()  # wordings only GRPO trains on
    dev_phrasings: tuple[str, ...] = ()  # wordings only the dev split uses
    rl_only: bool = False  # SFT never sees this intent; GRPO trains on all its training phrasings
    in_val: bool = True  # False: no val phrasing (every phrasing is a training one)
    only_in: Literal["val", "dev"] | None = None  # an intent no training split and no other held-out split has

    def phrasings_for(self, split: str) -> tuple[str, ...]:
        """The phrasings a split may use (see the module docstring); () when the split has none."""
        if self.only_in:
            return self.phrasings if split == self.only_in else ()
        training = self.phrasings[:-1] if self.in_val else self.phrasings
        by_split = {
            "val": self.phrasings[-1:] if self.in_val else (),
            "dev": self.dev_phrasings,
            "train": () if self.rl_only else training,
            "train_rl": self.rl_phrasings + (training if self.rl_only else ()),
        }
        return by_split.get(split, ())


def call(tool: str, /, **arguments: str) -> ToolCall:
    return ToolCall(tool, dict(arguments))
