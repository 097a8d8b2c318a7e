"""Shapes the sinks share: rows for tables, names for SQL, bodies for files and objects."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from typing import Any, TextIO

from noetl.errors import SinkError

CONTENT_TYPES = {
    "json": "application/json",
    "jsonl": "application/x-ndjson",
    "csv": "text/csv",
}


def table_rows(value: Any, kind: str) -> list[dict[str, Any]]:
    """The rows a table sink writes: a list of maps, or one map as one row."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        for index, row in enumerate(value):
            if not isinstance(row, dict):
                raise SinkError(
                    f"the {kind} sink writes maps (rows); item {index} is a {_type(row)}"
                )
        return value
    raise SinkError(f"the {kind} sink writes a map or a list of maps, not a {_type(value)}")


def columns_of(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The union of the rows' keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for name in row:
            seen.setdefault(str(name), None)
    return list(seen)


def key_columns(key: str | list[str] | None) -> list[str]:
    if key is None:
        return []
    return [key] if isinstance(key, str) else list(key)


def check_name(name: str, what: str, *, max_bytes: int | None = None) -> str:
    """A table or column name to quote as an identifier: any text but empty, NUL or
    (for PostgreSQL, which would silently cut it) too long."""
    if not name:
        raise SinkError(f"{what} name is empty")
    if "\x00" in name:
        raise SinkError(f"{what} name {name!r} contains a NUL character")
    if max_bytes is not None and len(name.encode()) > max_bytes:
        raise SinkError(f"{what} name {name!r} is longer than {max_bytes} bytes")
    return name


def table_parts(table: str, *, max_parts: int, max_bytes: int | None = None) -> list[str]:
    """`schema.table` (or `table`) split on dots; each part is quoted on its own."""
    parts = table.split(".")
    if len(parts) > max_parts:
        raise SinkError(
            f"table {table!r} has {len(parts)} dotted parts; at most {max_parts} "
            f"({'catalog.' if max_parts > 2 else ''}schema.table)"
        )
    return [check_name(part, "table", max_bytes=max_bytes) for part in parts]


def write_body(fp: TextIO, value: Any, fmt: str, kind: str) -> int:
    """Write `value` to `fp` as json, jsonl or csv, streaming; the count of records.

    json: the value as one document. jsonl: one line per item of a list (one line for
    anything else). csv: rows (a map or a list of maps), a header of the union of their
    keys in first-seen order; a null is an empty cell, a boolean `true`/`false`, a list
    or map its JSON text."""
    if fmt == "json":
        try:
            for chunk in _ENCODER.iterencode(value):
                fp.write(chunk)
        except (TypeError, ValueError) as exc:
            raise SinkError(f"the value is not JSON: {exc}") from None
        fp.write("\n")
        return len(value) if isinstance(value, list) else 1
    if fmt == "jsonl":
        items = value if isinstance(value, list) else [value]
        for index, item in enumerate(items):
            try:
                fp.write(_ENCODER.encode(item))
            except (TypeError, ValueError) as exc:
                raise SinkError(f"item {index} is not JSON: {exc}") from None
            fp.write("\n")
        return len(items)
    if fmt == "csv":
        return _write_csv(fp, table_rows(value, kind))
    raise SinkError(f"unknown format {fmt!r} (json, jsonl or csv)")


def _write_csv(fp: TextIO, rows: list[dict[str, Any]]) -> int:
    columns = columns_of(rows)
    writer = csv.writer(fp, lineterminator="\n")
    writer.writerow(columns)
    for index, row in enumerate(rows):
        writer.writerow([_cell(row.get(name), index, name) for name in columns])
    return len(rows)


def _cell(value: Any, index: int, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, dict | list):
        try:
            return _COMPACT.encode(value)
        except (TypeError, ValueError) as exc:
            raise SinkError(f"row {index}, column {column!r}: not JSON: {exc}") from None
    raise SinkError(f"row {index}, column {column!r}: a {_type(value)} cannot go in a csv cell")


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_COMPACT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _type(value: Any) -> str:
    names = {dict: "map", list: "list", str: "string", type(None): "null"}
    return names.get(type(value), type(value).__name__)
