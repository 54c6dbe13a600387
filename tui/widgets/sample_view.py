"""One scored sample in full: prompt, output, verdict, reward components, reason."""
from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from tui.data import as_mapping, pick


def reward_components(sample: dict[str, Any]) -> dict[str, Any]:
    """Reward components from a JSON column or from flat `r_<name>` columns."""
    components = as_mapping(sample.get("reward_components") or sample.get("components"))
    if components:
        return components
    return {k[2:]: v for k, v in sample.items() if k.startswith("r_") and v is not None}


def prompt_text(sample: dict[str, Any]) -> str:
    prompt = pick(sample, "prompt", "request", default="")
    if isinstance(prompt, str) and prompt.startswith("["):
        try:
            messages = json.loads(prompt)
            prompt = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in messages)
        except (ValueError, AttributeError):
            pass
    return str(prompt)


def render_sample(sample: dict[str, Any]) -> Group:
    bucket = pick(sample, "bucket", "v_bucket", default="?")
    style = "green" if bucket == "success" else "red"
    header = Text.assemble(
        (f"{pick(sample, 'task_id', default='?')} #{pick(sample, 'sample_index', default=0)}  ", "bold"),
        (bucket, f"bold {style}"),
        (f"  reward {pick(sample, 'reward', default=0.0):.3g}", ""),
    )
    components = Table.grid(padding=(0, 2))
    for name, value in reward_components(sample).items():
        components.add_row(name, f"{value:.3g}" if isinstance(value, (int, float)) else str(value))
    return Group(
        header,
        Text(str(pick(sample, "reason", "v_reason", default="")), style="italic"),
        Panel(Text(prompt_text(sample)), title="prompt", title_align="left", border_style="dim"),
        Panel(Text(str(pick(sample, "completion", "output", default=""))), title="output",
              title_align="left", border_style=style),
        components,
    )


class SampleView(VerticalScroll):
    """Scrollable detail of one sample; `show(None)` shows the empty state."""

    def compose(self):
        yield Static("select a sample", id="sample-body", classes="empty")

    def show(self, sample: dict[str, Any] | None) -> None:
        body = self.query_one("#sample-body", Static)
        body.set_class(sample is None, "empty")
        body.update(render_sample(sample) if sample else "select a sample")
        self.scroll_home(animate=False)
