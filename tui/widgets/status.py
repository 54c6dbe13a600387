"""How an eval or a run reads wherever it is listed: its status in colour and its success rate.

One place, so Home, Evaluate, Audit and Checkpoints agree, and an eval that
failed or is still running never reads like a finished one: only a finished
eval shows a success rate.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from tui.data import eval_success, pick

STATUS_STYLES = {"finished": "green", "promoted": "bold green", "failed": "bold red", "refused": "red",
                 "running": "yellow", "interrupted": "yellow", "stopped": "yellow"}
# Wide enough for every status the store writes ("interrupted", "rolled_back", "superseded").
STATUS_WIDTH = 11
SUCCESS_WIDTH = 6  # "100.0%"
NOT_FINISHED = {"running": "…"}


def status_text(status: Any) -> Text:
    label = str(status or "?")
    return Text(label, style=STATUS_STYLES.get(label, ""))


def success_text(row: dict[str, Any]) -> Text:
    """`50.0%` for a finished eval; `…` while running, `—` otherwise (no number to trust)."""
    value = eval_success(row)
    if value is not None:
        return Text(f"{value:.1%}")
    return Text(NOT_FINISHED.get(str(row.get("status")), "—"), style="dim")


def adapter_name(adapter: Any) -> str:
    """`base` or the adapter's run and step (`sft-1/step-20`): the folder's last two parts."""
    if not adapter:
        return "base"
    return "/".join(Path(str(adapter)).parts[-2:])


def eval_option(row: dict[str, Any], id_width: int = 0) -> Text:
    """One line for an eval in a picker: id, status, success, split and adapter, in aligned columns."""
    eval_id = str(pick(row, "eval_id", default="?"))
    status, success = status_text(row.get("status")), success_text(row)
    status.pad_right(STATUS_WIDTH - status.cell_len)
    success.pad_left(SUCCESS_WIDTH - success.cell_len)
    return Text.assemble(eval_id.ljust(id_width), "  ", status, " ", success,
                         f"  {row.get('split') or ''} · {adapter_name(row.get('adapter'))}")


def eval_options(rows: list[dict[str, Any]]) -> list[tuple[Text, str]]:
    """(label, eval id) for a Select, newest first as given."""
    width = max((len(str(pick(row, "eval_id", default="?"))) for row in rows), default=0)
    return [(eval_option(row, width), str(pick(row, "eval_id", default="?"))) for row in rows]
