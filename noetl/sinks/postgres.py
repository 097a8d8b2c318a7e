"""The postgres sink: rows into an existing table, in one transaction.

Rows are `out` when it is a list of maps, or `[out]` when it is a map; the columns are the
union of their keys (a key missing from a row writes NULL). The table (`table` or
`schema.table`) and the columns are always quoted identifiers (`psycopg.sql.Identifier`),
never formatted into the SQL, so a name such as `t; DROP TABLE x` names a table that does
not exist rather than running anything. Maps and lists are written as `jsonb`.

`mode: insert` inserts every row (a re-run inserts them again); `mode: upsert` is
`INSERT ... ON CONFLICT (key) DO UPDATE SET <the other columns>`, so the table needs a
unique constraint on the key columns, and a re-run writes nothing twice.

The connection comes from the credential named by `spec.credential` (an upstream
`{type: postgres, data: {db_host, ...}}` record, or a map with a `dsn` or libpq keywords
such as host, dbname, user, password; see `noetl.credentials.records`), else from
`spec.dsn`. A lost or refused
connection, a serialization failure and a deadlock are retryable; the rest is final.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from noetl.credentials.records import postgres_conninfo
from noetl.credentials.scope import current_scope
from noetl.dsl.kinds import PostgresSink
from noetl.errors import RetryableError, SinkError
from noetl.sinks._data import check_name, columns_of, key_columns, table_parts, table_rows

CONNECT_TIMEOUT_S = 10
MAX_NAME_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL cuts longer names short
_FINAL_CONNECT = ("authentication failed", "password", "does not exist", "role ")


class PostgresWriter:
    kind = "postgres"

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        config = PostgresSink.model_validate(dict(spec))
        rows = table_rows(value, "postgres")
        table = sql.Identifier(*table_parts(config.table, max_parts=2, max_bytes=MAX_NAME_BYTES))
        summary: dict[str, Any] = {"table": config.table, "mode": config.mode, "rows": len(rows)}
        if not rows:
            return summary
        columns = [check_name(c, "column", max_bytes=MAX_NAME_BYTES) for c in columns_of(rows)]
        keys = key_columns(config.key) if config.mode == "upsert" else []
        missing = [k for k in keys if k not in columns]
        if missing:
            raise SinkError(f"upsert key column(s) {missing} are not in the rows")
        statement = insert_statement(table, columns, keys)
        params = [[_adapt(row.get(c)) for c in columns] for row in rows]
        dsn = _dsn(config)
        try:
            with (
                psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn,
                conn.cursor() as cursor,
            ):
                cursor.executemany(statement, params)
        except psycopg.Error as exc:
            raise _classify(exc, config.table) from None
        return summary


def insert_statement(table: sql.Identifier, columns: list[str], keys: list[str]) -> sql.Composed:
    """`INSERT INTO table (columns) VALUES (...)`, with `ON CONFLICT (keys) DO UPDATE`
    of the other columns (or `DO NOTHING` when every column is a key) when keys are given."""
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    values = sql.SQL(", ").join(sql.Placeholder() * len(columns))
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(table, names, values)
    if not keys:
        return statement
    conflict = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
    others = [c for c in columns if c not in keys]
    if not others:
        return sql.SQL("{} ON CONFLICT ({}) DO NOTHING").format(statement, conflict)
    updates = sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in others
    )
    return sql.SQL("{} ON CONFLICT ({}) DO UPDATE SET {}").format(statement, conflict, updates)


def _adapt(value: Any) -> Any:
    return Jsonb(value) if isinstance(value, dict | list) else value


def _dsn(config: PostgresSink) -> str:
    scope = current_scope()
    if config.credential:
        dsn = postgres_conninfo(scope.record(config.credential))
        scope.remember(dsn)
    elif config.dsn:
        dsn = config.dsn
    else:
        raise SinkError("the postgres sink needs spec.credential or spec.dsn")
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError as exc:
        raise SinkError(f"invalid postgres dsn: {exc}") from None
    if isinstance(password, str):
        scope.remember(password)  # masked if an error message quotes it
    return dsn


def _classify(exc: psycopg.Error, table: str) -> Exception:
    text = " ".join(str(exc).split()) or type(exc).__name__
    message = f"postgres table {table!r}: {text}"
    if isinstance(exc, errors.SerializationFailure | errors.DeadlockDetected):
        return RetryableError(message)
    if isinstance(exc, psycopg.OperationalError):
        if exc.sqlstate is None and any(word in text.lower() for word in _FINAL_CONNECT):
            return SinkError(message)  # wrong credentials or database: retrying cannot help
        return RetryableError(message)
    return SinkError(message)
