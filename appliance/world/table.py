"""An immutable table with pandas-like row labels, and WorkBench's state comparison.

WorkBench keeps each database as a pandas DataFrame and scores a run with
`DataFrame.equals` after lower-casing text. That comparison looks at columns,
row labels (the index) and cells, so we keep all three:

* `columns`: column names in order;
* `rows`: a list of tuples, one per row, aligned with `columns`;
* `labels`: the pandas index label of each row (deletes keep labels, some
  appends relabel, see the `append_*` methods); a `range` while the labels are
  0..n-1 (so look-ups and comparisons are O(1)), otherwise a list;
* `ids`: the first column of every row, kept so ID lookups run at C speed.

Tables are never changed in place. Every operation returns a new Table that
shares untouched row tuples (and, where possible, the label and ID lists) with
the old one. A fresh world is therefore a handful of references, and comparing
a world with the base is mostly identity checks.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

# WorkBench lower-cases every column before comparing, except these three.
CASE_SENSITIVE_COLUMNS = frozenset({"status", "list_name", "board"})


class Table:
    """One database table. Treat every attribute as read-only."""

    __slots__ = ("columns", "rows", "labels", "ids", "_max_id", "_index")

    def __init__(
        self,
        columns: tuple[str, ...],
        rows: list[tuple],
        labels: range | list[int],
        ids: list[Any] | None = None,
    ) -> None:
        self.columns = columns
        self.rows = rows
        self.labels = labels
        self.ids = ids if ids is not None else [row[0] if row else None for row in rows]
        self._max_id: Any = None
        self._index: dict[Any, tuple[int, ...]] | None = None  # built only for shared base tables

    @classmethod
    def from_rows(cls, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> "Table":
        row_list = [tuple(r) for r in rows]
        return cls(tuple(columns), row_list, range(len(row_list)))

    def __len__(self) -> int:
        return len(self.rows)

    # ---- reading -------------------------------------------------------------------

    def build_index(self) -> None:
        """Precompute ID -> positions; worth it only for tables that are looked up many times."""
        index: dict[Any, list[int]] = {}
        for position, id_value in enumerate(self.ids):
            index.setdefault(id_value, []).append(position)
        self._index = {k: tuple(v) for k, v in index.items()}

    def positions_of(self, id_value: Any) -> list[int]:
        """Positions of every row whose first column equals `id_value` (usually one)."""
        if self._index is not None:
            try:
                return list(self._index.get(id_value, ()))
            except TypeError:  # unhashable value: nothing can match it
                return []
        ids, found, start = self.ids, [], 0
        try:
            while True:
                start = ids.index(id_value, start)
                found.append(start)
                start += 1
        except ValueError:
            return found

    def positions_of_column(self, column: str, value: Any) -> list[int]:
        """Positions of every row whose `column` equals `value`."""
        index = self.columns.index(column)
        return [i for i, row in enumerate(self.rows) if row[index] == value]

    def has_id(self, id_value: Any) -> bool:
        if self._index is not None:
            return bool(self.positions_of(id_value))
        return id_value in self.ids

    def max_id(self) -> Any:
        """The largest ID compared as text, as pandas' `Series.max()` does for text IDs."""
        if self._max_id is None:
            self._max_id = max(self.ids)
        return self._max_id

    def record(self, position: int) -> dict[str, Any]:
        return dict(zip(self.columns, self.rows[position]))

    def records(self, positions: Iterable[int] | None = None) -> list[dict[str, Any]]:
        columns = self.columns
        if positions is None:
            return [dict(zip(columns, row)) for row in self.rows]
        return [dict(zip(columns, self.rows[p])) for p in positions]

    def column_values(self, column: str) -> list[Any]:
        index = self.columns.index(column)
        return [row[index] for row in self.rows]

    # ---- changing (each returns a new Table) ------------------------------------

    def without_id(self, id_value: Any) -> "Table":
        """Drop every row with this ID; the remaining rows keep their labels (boolean mask)."""
        rows, labels, ids = list(self.rows), list(self.labels), list(self.ids)
        for p in reversed(self.positions_of(id_value)):  # list copies + del run at C speed
            del rows[p], labels[p], ids[p]
        new = Table(self.columns, rows, labels, ids)
        if self._max_id is not None and id_value != self._max_id:
            new._max_id = self._max_id
        return new

    def with_cell(self, positions: Sequence[int], column: str, value: Any) -> "Table":
        """Set `column` to `value` in the given rows; an unknown column is added (filled with None)."""
        table = self if column in self.columns else self._with_new_column(column)
        index = table.columns.index(column)
        rows = list(table.rows)
        for p in positions:
            row = rows[p]
            rows[p] = row[:index] + (value,) + row[index + 1 :]
        ids = table.ids
        if index == 0:
            ids = list(ids)
            for p in positions:
                ids[p] = value
        return Table(table.columns, rows, table.labels, ids)

    def updated(self, positions: Sequence[int], column: str, value: Any) -> "Table":
        """`with_cell`, but returns this very table when every target cell already holds `value`.

        Keeping the object lets "write the same value" cost nothing and compare by identity.
        """
        if column in self.columns:
            index = self.columns.index(column)
            if all(self.rows[p][index] == value for p in positions):
                return self
        return self.with_cell(positions, column, value)

    def _with_new_column(self, column: str) -> "Table":
        rows = [row + (None,) for row in self.rows]
        return Table(self.columns + (column,), rows, self.labels, self.ids)

    def append_concat(self, values: dict[str, Any], ignore_index: bool) -> "Table":
        """pandas `concat([table, one_row_frame])`: columns align by name, missing cells are None.

        With `ignore_index` the result is relabelled 0..n; without it the new row
        keeps the label 0 of its own one-row frame (what calendar.create_event does).
        """
        columns = self.columns
        extra = tuple(c for c in values if c not in columns)
        table = self
        for column in extra:
            table = table._with_new_column(column)
        columns = table.columns
        row = tuple(values.get(c) for c in columns)
        labels = range(len(table.rows) + 1) if ignore_index else list(table.labels) + [0]
        new = Table(columns, table.rows + [row], labels, table.ids + [row[0]])
        new._max_id = _larger(table._max_id, row[0])
        return new

    def set_row_at_label(self, label: int, row: tuple) -> "Table":
        """pandas `df.loc[label] = row`: overwrite the row with that label, or append it."""
        rows, ids = list(self.rows), list(self.ids)
        try:
            position = self.labels.index(label)
        except ValueError:
            rows.append(row)
            ids.append(row[0])
            if isinstance(self.labels, range) and label == len(self.labels):
                labels: range | list[int] = range(label + 1)
            else:
                labels = list(self.labels) + [label]
            appended = Table(self.columns, rows, labels, ids)
            appended._max_id = _larger(self._max_id, row[0])
            return appended
        rows[position] = row
        ids[position] = row[0]
        return Table(self.columns, rows, self.labels, ids)


def _larger(cached_max: Any, new_id: Any) -> Any:
    if cached_max is None:
        return None  # unknown; computed lazily
    return new_id if new_id > cached_max else cached_max


# ---- WorkBench's comparison -------------------------------------------------------


def _fold_cell(value: Any, keep_case: bool) -> Any:
    if not isinstance(value, str):
        return None  # `.str.lower()` turns every non-text cell (dates, missing) into missing
    return value if keep_case else value.lower()


def _fold_row(row: tuple, keep_case: tuple[bool, ...]) -> tuple:
    return tuple(_fold_cell(v, k) for v, k in zip(row, keep_case))


def _same_labels(a: range | list[int], b: range | list[int]) -> bool:
    if type(a) is type(b):
        return a == b
    return list(a) == list(b)


def tables_equal(a: Table, b: Table) -> bool:
    """WorkBench's `convert_strs_to_lowercase` followed by `DataFrame.equals`.

    Same columns in order, same row labels in order, and cells equal after
    lower-casing every column except status/list_name/board.
    """
    if a is b:
        return True
    if a.columns != b.columns or len(a.rows) != len(b.rows) or not _same_labels(a.labels, b.labels):
        return False
    if a.rows == b.rows:  # C-speed: identical row objects short-circuit
        return True
    keep_case = tuple(c in CASE_SENSITIVE_COLUMNS for c in a.columns)
    for row_a, row_b in zip(a.rows, b.rows):
        if row_a is not row_b and row_a != row_b:
            if _fold_row(row_a, keep_case) != _fold_row(row_b, keep_case):
                return False
    return True
