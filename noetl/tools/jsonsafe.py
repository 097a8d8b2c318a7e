"""Database values as JSON data, and the shape of a query's result.

A tool's result (`this`) is stored in the event log as JSON, so every value a database
driver hands back is turned into a JSON value here (`to_json_safe`):

* `Decimal`: an `int` when its value is integral (exact, any size: NUMERIC keys and counts
  stay exact integers), else the nearest `float` (NUMERIC beyond ~15 significant digits
  loses precision; cast to text in SQL when every digit matters).
* NaN and infinite floats and Decimals: `None`. JSON has no such numbers, and writing them
  as `NaN`/`Infinity` would produce documents other JSON parsers (and PostgreSQL's jsonb)
  refuse.
* `datetime`, `date`, `time`: ISO 8601 strings (with their UTC offset when they have one).
* `timedelta`: seconds, as a float.
* `UUID`: its canonical string. `bytes`, `bytearray`, `memoryview`: standard base64.
* tuples and lists: lists; sets: lists, sorted when their items can be (a set's iteration
  order varies between processes, and a result must be the same in a replay).
* dicts: dicts with string keys (a non-string key becomes what `json.dumps` would write for
  it: `1` -> `"1"`, `True` -> `"true"`).
* anything else JSON cannot hold (ip addresses, ranges, driver-specific objects): `str()`.

`query_result` and `command_result` give the result shape the database tools share:
`{"rows": [...], "rowcount": n, "columns": [...]}`.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

__all__ = [
    "MAX_ROWS",
    "command_result",
    "commands_result",
    "query_result",
    "to_json_safe",
    "unique_columns",
]

MAX_ROWS = 100_000  # rows a query may return into the event log; more is a fatal error


def to_json_safe(value: Any) -> Any:
    """`value` as JSON data (see the module docstring for each type)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, dict):
        return {_key(k): to_json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_safe(v) for v in value]
    if isinstance(value, set | frozenset):
        return [to_json_safe(v) for v in _ordered(value)]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def _decimal(value: Decimal) -> int | float | None:
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    safe = to_json_safe(key)
    return safe if isinstance(safe, str) else json.dumps(safe)


def _ordered(items: Iterable[Any]) -> list[Any]:
    listed = list(items)
    try:
        return sorted(listed)
    except TypeError:  # mixed types: sort by their JSON text instead
        return sorted(listed, key=lambda item: json.dumps(to_json_safe(item), sort_keys=True))


def unique_columns(names: Sequence[str]) -> list[str]:
    """Column names made unique, so each is a key of its own in a row: a repeated name
    gets `_2`, `_3`, ... (`SELECT a.id, b.id` gives `id` and `id_2`)."""
    seen: set[str] = set()
    unique: list[str] = []
    for name in names:
        candidate, n = name, 1
        while candidate in seen:
            n += 1
            candidate = f"{name}_{n}"
        seen.add(candidate)
        unique.append(candidate)
    return unique


def query_result(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> dict[str, Any]:
    """The result of a query that returned rows: a JSON-safe dict per row."""
    columns = unique_columns(names)
    data = [{c: to_json_safe(v) for c, v in zip(columns, row, strict=True)} for row in rows]
    return {"rows": data, "rowcount": len(data), "columns": columns}


def command_result(rowcount: int) -> dict[str, Any]:
    """The result of a statement that returned no rows (a negative count, 'not known',
    is 0)."""
    return {"rows": [], "rowcount": max(rowcount, 0), "columns": []}


def commands_result(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The result of several statements (a `command`), in upstream NoETL's shape: each
    statement's result under `command_<i>` (0-based, in order; with `row_count` and
    `status` as upstream names them), and the last statement's `rows`, `rowcount`,
    `columns` at the top, with `statement_count`."""
    out: dict[str, Any] = {}
    for index, result in enumerate(results):
        out[f"command_{index}"] = {**result, "row_count": result["rowcount"], "status": "success"}
    last = results[-1] if results else command_result(0)
    out.update(last)
    out["row_count"] = last["rowcount"]
    out["statement_count"] = len(results)
    out["status"] = "success"
    return out
