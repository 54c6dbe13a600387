"""DataTable filling with column widths fixed from the data.

An auto-width DataTable column settles one refresh after its rows land, so the
first frame after new data showed columns cut to their headers (and snapshot
tests caught that frame on a loaded machine). Sizing the columns from the cells
up front makes the first frame the final one.
"""
from __future__ import annotations

from typing import Any, Sequence

from textual.widgets import DataTable

MAX_COLUMN_WIDTH = 40  # wider cells are cut in the grid (exports keep them whole)
CELL_PADDING = 1  # DataTable's default, each side of a cell
SCROLLBAR = 2  # room kept for the vertical scrollbar, so a long table does not push a column out


def fill_table(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               max_width: int = MAX_COLUMN_WIDTH, keys: Sequence[str] | None = None, required: int = 0) -> None:
    """Replace the table's columns and rows; each column as wide as its widest cell (capped).

    With `required`, the first `required` columns always stay and the later ones are left out, last
    first, until the table fits its width: a narrow terminal loses details, never the key columns."""
    widths = [min(max([len(str(name))] + [_width(row[index]) for row in rows if index < len(row)]), max_width)
              for index, name in enumerate(columns)]
    shown = len(columns) if not required else fitting(widths, table.size.width - SCROLLBAR, required)
    table.clear(columns=True)
    for name, width in zip(columns[:shown], widths):
        table.add_column(str(name), width=width)
    for index, row in enumerate(rows):
        table.add_row(*tuple(row)[:shown], key=keys[index] if keys else None)


def fitting(widths: Sequence[int], available: int, required: int) -> int:
    """How many leading columns fit in `available` cells (each has a cell of padding on both sides)."""
    used, count = 0, 0
    for width in widths:
        used += width + 2 * CELL_PADDING
        if used > available and count >= required:
            break
        count += 1
    return count


def _width(cell: Any) -> int:
    return getattr(cell, "cell_len", None) or len(str(cell))
