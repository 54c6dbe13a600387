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


def fill_table(table: DataTable, columns: Sequence[str], rows: Sequence[Sequence[Any]],
               max_width: int = MAX_COLUMN_WIDTH) -> None:
    """Replace the table's columns and rows; each column as wide as its widest cell (capped)."""
    table.clear(columns=True)
    for index, name in enumerate(columns):
        widest = max([len(str(name))] + [_width(row[index]) for row in rows if index < len(row)])
        table.add_column(str(name), width=min(widest, max_width))
    table.add_rows([tuple(row) for row in rows])


def _width(cell: Any) -> int:
    return getattr(cell, "cell_len", None) or len(str(cell))
