"""Turn a batch of row dicts into an Arrow table of one store table, checking them on the way.

Conversion is one C++ pass (`pa.array(rows, type=struct)`) so a batch of
rollouts costs about a microsecond or two per row; Python touches a row only
when it has a JSON or timestamp value that needs encoding.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from appliance.errors import StoreError
from appliance.store.schema import NOW_DEFAULT_COLUMNS, Table


def to_arrow(table: Table, rows: Sequence[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """Validate `rows` against `table` and convert them; missing columns become NULL (or their default).

    `rows` may already be an Arrow table (the fast path for bulk imports): its columns are cast to the schema.
    """
    if isinstance(rows, pa.Table):
        return _complete(table, _cast_columns(table, rows), len(rows))
    present = _present_columns(table, rows)
    rows = _encode_values(table, rows, present)
    fields = [pa.field(c.name, c.arrow_type) for c in table.columns if c.name in present]
    try:
        struct = pa.array(rows, type=pa.struct(fields))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as err:
        raise StoreError(_explain_conversion_error(table, rows, fields, err)) from None
    return _complete(table, {field.name: struct.field(i) for i, field in enumerate(struct.type)}, len(struct))


def _present_columns(table: Table, rows: Sequence[Mapping[str, Any]]) -> set[str]:
    try:
        first = rows[0].keys()
        same_keys = all(row.keys() == first for row in rows)
        present = set(first) if same_keys else set().union(*(row.keys() for row in rows))
    except AttributeError:
        raise StoreError(f"Rows for {table.name} must be dicts of column name to value.") from None
    unknown = sorted(present - set(table.column_names))
    if unknown:
        raise StoreError(f"Table {table.name} has no column(s) {', '.join(unknown)}; "
                         "see appliance/store/schema.py for its columns.")
    return present


def _cast_columns(table: Table, data: pa.Table) -> dict[str, pa.Array]:
    unknown = sorted(set(data.column_names) - set(table.column_names))
    if unknown:
        raise StoreError(f"Table {table.name} has no column(s) {', '.join(unknown)}; "
                         "see appliance/store/schema.py for its columns.")
    given = {}
    for name in data.column_names:
        column = table.column(name)
        try:
            given[name] = data[name].combine_chunks().cast(column.arrow_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
            raise StoreError(f"Column {table.name}.{name} expects {column.kind} values "
                             f"({str(err).splitlines()[0]}).") from None
    return given


def _check_required(table: Table, given: dict[str, pa.Array]) -> None:
    for column in (c for c in table.columns if c.required):
        array = given.get(column.name)
        if array is None or array.null_count:
            row = 0 if array is None else pc.index(pc.is_null(array), True).as_py()
            raise StoreError(f"Every {table.name} row needs a value for {column.name} (row {row} has none).")


def _encode_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _encode_timestamp(value: Any) -> Any:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, timezone.utc)
    if isinstance(value, str):
        return _encode_timestamp(datetime.fromisoformat(value))
    return value  # let Arrow report the type error


_ENCODERS = {"json": _encode_json, "ts": _encode_timestamp}


def _encode_values(table: Table, rows: Sequence[Mapping[str, Any]], present: set[str]) -> Sequence[Mapping]:
    """JSON-encode json columns and normalise timestamps, copying only the rows that change."""
    encoders = {c.name: _ENCODERS[c.kind] for c in table.columns if c.name in present and c.kind in _ENCODERS}
    if not encoders:
        return rows
    encoded = []
    for row in rows:
        changed: dict[str, Any] | None = None
        for name, encode in encoders.items():
            value = row.get(name)
            if value is None:
                continue
            try:
                new_value = encode(value)
            except (TypeError, ValueError, OverflowError) as err:
                raise StoreError(f"Column {table.name}.{name} cannot store {value!r} ({err}).") from None
            if new_value is not value:
                changed = changed if changed is not None else dict(row)
                changed[name] = new_value
        encoded.append(row if changed is None else changed)
    return encoded


def _explain_conversion_error(table: Table, rows, fields: list[pa.Field], err: Exception) -> str:
    for field in fields:
        try:
            pa.array([row.get(field.name) for row in rows], type=field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as column_err:
            kind = table.column(field.name).kind
            return f"Column {table.name}.{field.name} expects {kind} values ({str(column_err).splitlines()[0]})."
    return f"Rows for {table.name} cannot be stored ({str(err).splitlines()[0]})."


def _complete(table: Table, given: dict[str, pa.Array], n: int) -> pa.Table:
    """Every schema column in order: given ones, defaults, and NULLs for the rest."""
    _check_required(table, given)
    now = pa.scalar(datetime.now(timezone.utc), type=pa.timestamp("us", tz="UTC"))
    columns = []
    for column in table.columns:
        array = given.get(column.name)
        if column.name in NOW_DEFAULT_COLUMNS:
            array = pc.fill_null(pa.nulls(n, now.type) if array is None else array, now)
        elif column.name == "bucket" and "v_bucket" in given:
            array = given["v_bucket"] if array is None else pc.coalesce(array, given["v_bucket"])
        columns.append(array if array is not None else pa.nulls(n, column.arrow_type))
    if table.versioned:
        # Rows later in one batch are newer versions than rows before them.
        first_version = time.time_ns()
        columns.append(pa.array(range(first_version, first_version + n), pa.int64()))
    return pa.Table.from_arrays(columns, schema=table.arrow_schema())
