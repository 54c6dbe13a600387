"""The help screen (? key): what each screen is for and its keys."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# RL appliance — keys

**1–7** switch screens · **ctrl+p** command palette · **?** this help · **q** quit

| Screen | What it is for | Keys |
|---|---|---|
| 1 Home | pack, model, backend, hardware, recent runs and evals (status, success) | **e** evaluate · **t** train · **r** refresh |
| 2 Evaluate | baseline and checkpoint evals: metrics, failure buckets, recommendation, samples, compare | **r** run · **s** stop · **e** choose the eval shown · **m** metrics · **v** samples · **c** compare · **ctrl+r** refresh |
| 3 Audit | judge the verifier on a fixed sample of a finished eval | **a** agree · **d** disagree · **n** note · **j/k** next/prev · **x** export disagreements |
| 4 Train | SFT or GRPO with live charts, rollouts and alarms; past runs' charts from the store | **r** start · **s** stop (saves a checkpoint) · **u** resume · **c** clear alarms · **v** view a stored run |
| 5 Checkpoints | lineage against the baseline eval; the selected row's gate evidence | **p** promote · **b** roll back · **x** export merged · **y** copy path · **r** refresh |
| 6 SQL | query the run store | **ctrl+r** run · **ctrl+s** save · **ctrl+o** export CSV · **esc** leaves the editor (**tab** indents) |
| 7 Flywheel | failure modes of served and imported trajectories per adapter version, oldest first; the selected one's modes and lightest fix | **r** refresh |

Only one engine job runs at a time (one GPU). Engine errors appear as notifications;
the engine runs in its own process, so a crash there never closes this window.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", key_display="esc")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP)
