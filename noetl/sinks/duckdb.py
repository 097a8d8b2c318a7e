"""The duckdb sink: rows into a table of a DuckDB database file, in one transaction.

Rows and columns as for the postgres sink. A table that does not exist is created, with
column types taken from the first non-null value of each column (BOOLEAN, BIGINT, DOUBLE,
VARCHAR, JSON for maps and lists) and, for `mode: upsert`, a primary key on the key
columns. Modes: `insert` appends; `replace` empties the table first (same transaction);
`upsert` is `INSERT ... ON CONFLICT (key) DO UPDATE`. Names are always quoted identifiers.
A database file locked by another process or a write conflict is retryable.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import duckdb

from noetl.dsl.kinds import DuckdbSink
from noetl.errors import RetryableError, SinkError
from noetl.sinks._data import check_name, columns_of, key_columns, table_parts, table_rows


class DuckdbWriter:
    kind = "duckdb"

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        config = DuckdbSink.model_validate(dict(spec))
        if config.database == ":memory:":
            raise SinkError(
                "the duckdb sink needs spec.database (a file): an in-memory database is "
                "gone as soon as the write ends"
            )
        rows = table_rows(value, "duckdb")
        table = ".".join(quote(p) for p in table_parts(config.table, max_parts=3))
        summary: dict[str, Any] = {
            "database": config.database,
            "table": config.table,
            "mode": config.mode,
            "rows": len(rows),
        }
        keys = key_columns(config.key) if config.mode == "upsert" else []
        if config.mode == "upsert" and not keys:
            raise SinkError("the duckdb sink with mode: upsert needs a key")
        if not rows and config.mode != "replace":
            return summary
        columns = [check_name(c, "column") for c in columns_of(rows)]
        missing = [k for k in keys if k not in columns]
        if missing:
            raise SinkError(f"upsert key column(s) {missing} are not in the rows")
        try:
            with contextlib.closing(duckdb.connect(config.database)) as conn:
                _write(conn, table, rows, columns, keys, replace=config.mode == "replace")
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            raise RetryableError(f"duckdb {config.database}: {exc}") from None
        except duckdb.Error as exc:
            raise SinkError(f"duckdb table {config.table!r}: {exc}") from None
        return summary


def quote(name: str) -> str:
    """A DuckDB identifier: double quotes, inner quotes doubled."""
    return '"' + name.replace('"', '""') + '"'


def _write(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    rows: list[dict[str, Any]],
    columns: list[str],
    keys: list[str],
    *,
    replace: bool,
) -> None:
    conn.execute("BEGIN TRANSACTION")
    try:
        if columns:
            conn.execute(_create(table, rows, columns, keys))
        if replace:
            conn.execute(f"DELETE FROM {table}")
        if rows:
            conn.executemany(
                _insert(table, columns, keys),
                [[_adapt(row.get(c)) for c in columns] for row in rows],
            )
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            conn.execute("ROLLBACK")
        raise


def _create(table: str, rows: list[dict[str, Any]], columns: list[str], keys: list[str]) -> str:
    defs = [f"{quote(c)} {_column_type(rows, c)}" for c in columns]
    if keys:
        defs.append(f"PRIMARY KEY ({', '.join(quote(k) for k in keys)})")
    return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(defs)})"


def _insert(table: str, columns: list[str], keys: list[str]) -> str:
    names = ", ".join(quote(c) for c in columns)
    statement = f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' for _ in columns)})"
    if not keys:
        return statement
    others = [c for c in columns if c not in keys]
    conflict = ", ".join(quote(k) for k in keys)
    if not others:
        return f"{statement} ON CONFLICT ({conflict}) DO NOTHING"
    updates = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in others)
    return f"{statement} ON CONFLICT ({conflict}) DO UPDATE SET {updates}"


def _column_type(rows: list[dict[str, Any]], column: str) -> str:
    for row in rows:
        value = row.get(column)
        if value is None:
            continue
        if isinstance(value, bool):
            return "BOOLEAN"
        if isinstance(value, int):
            return "BIGINT"
        if isinstance(value, float):
            return "DOUBLE"
        if isinstance(value, dict | list):
            return "JSON"
        return "VARCHAR"
    return "VARCHAR"


def _adapt(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return value
