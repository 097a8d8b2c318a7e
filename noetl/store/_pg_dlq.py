"""PostgreSQL side of the dead-letter queue (`dlq`): functions over a connection, run by
`PostgresStore` (in the commit's transaction for the writes of an append)."""

from __future__ import annotations

from typing import Any

import psycopg

from noetl.store._pg_nul import text_in
from noetl.store._rows import (
    DLQ_COLUMNS,
    DLQ_JSON_COLUMNS,
    PreparedAppend,
)
from noetl.store.queries import QUERIES

SQL = QUERIES["postgres"]

Conn = psycopg.Connection[Any]

# Free text that may quote what a task returned or raised (a NUL included): escaped as
# `noetl.store._pg_nul` says. The JSON columns were encoded by `pg_dumps` already.
_TEXT_COLUMNS = frozenset(
    {"reason", "error_type", "last_error", "last_stack", "context_excerpt", "discard_reason"}
)
_TEXT = tuple(index for index, column in enumerate(DLQ_COLUMNS) if column in _TEXT_COLUMNS)
_JSON = tuple(index for index, column in enumerate(DLQ_COLUMNS) if column in DLQ_JSON_COLUMNS)


def _row_in(row: tuple[Any, ...]) -> tuple[Any, ...]:
    values = list(row)
    for index in _TEXT:
        if isinstance(values[index], str):
            values[index] = text_in(values[index])
    return tuple(values)


def write(cur: psycopg.Cursor[Any], item: PreparedAppend) -> None:
    """Queue the dead-letter writes of one append (rare: failures only)."""
    if item.dead_letters:
        cur.executemany(SQL["upsert_dlq"], [_row_in(row) for row in item.dead_letters])
    if item.dead_letter_status:
        cur.executemany(
            SQL["set_dlq_status"], [(status, mid) for mid, status in item.dead_letter_status]
        )
