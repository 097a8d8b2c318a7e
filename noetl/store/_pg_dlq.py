"""PostgreSQL side of the dead-letter queue (`dlq`): functions over a connection, run by
`PostgresStore` (in the commit's transaction for the writes of an append)."""

from __future__ import annotations

from typing import Any

import psycopg

from noetl.store import _pg_sql as sql
from noetl.store._pg_nul import json_out, text_in, text_out
from noetl.store._rows import (
    DLQ_COLUMNS,
    DLQ_JSON_COLUMNS,
    PreparedAppend,
    dead_letter_filter,
    dead_letter_from_row,
)
from noetl.store.base import DeadLetter, DeadLetterStatus, NotFoundError

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


def _entry(row: tuple[Any, ...]) -> DeadLetter:
    values = list(row)
    for index in _TEXT:
        if isinstance(values[index], str):
            values[index] = text_out(values[index])
    for index in _JSON:
        if isinstance(values[index], str):
            values[index] = json_out(values[index])
    return dead_letter_from_row(values)


def write(cur: psycopg.Cursor[Any], item: PreparedAppend) -> None:
    """Queue the dead-letter writes of one append (rare: failures only)."""
    if item.dead_letters:
        cur.executemany(sql.UPSERT_DLQ, [_row_in(row) for row in item.dead_letters])
    if item.dead_letter_status:
        cur.executemany(
            sql.SET_DLQ_STATUS, [(status, mid) for mid, status in item.dead_letter_status]
        )


def select(
    conn: Conn,
    status: DeadLetterStatus | None,
    execution_id: str | None,
    limit: int,
    offset: int,
) -> list[DeadLetter]:
    clause, params = dead_letter_filter(status, execution_id, "%s")
    query = f"{sql.SELECT_DLQ}{clause} ORDER BY last_seen DESC, message_id DESC LIMIT %s OFFSET %s"
    rows = conn.execute(query.encode(), (*params, limit, offset)).fetchall()
    return [_entry(row) for row in rows]


def get(conn: Conn, message_id: str) -> DeadLetter | None:
    row = conn.execute(f"{sql.SELECT_DLQ} WHERE message_id = %s".encode(), (message_id,)).fetchone()
    return None if row is None else _entry(row)


def counts(conn: Conn) -> dict[str, int]:
    found = {status.value: 0 for status in DeadLetterStatus}
    for status, count in conn.execute(sql.DLQ_COUNTS).fetchall():
        found[status] = int(count)
    return found


def _exists(conn: Conn, message_id: str) -> None:
    if conn.execute(sql.DLQ_STATUS, (message_id,)).fetchone() is None:
        raise NotFoundError(f"no dead-letter entry {message_id}")


def post_replay(conn: Conn, message_id: str, payload: str) -> bool:
    """Mark a pending entry replayed and post its REPLAY input (one statement)."""
    if conn.execute(sql.POST_REPLAY, (message_id, payload)).fetchone() is not None:
        return True
    _exists(conn, message_id)
    return False


def discard(conn: Conn, message_id: str, reason: str) -> bool:
    if conn.execute(sql.DISCARD_DLQ, (text_in(reason), message_id)).fetchone() is not None:
        return True
    _exists(conn, message_id)
    return False
