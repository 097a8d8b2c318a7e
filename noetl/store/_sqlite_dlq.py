"""SQLite statements of the dead-letter queue (`dlq`), run inside the caller's transaction."""

from __future__ import annotations

import sqlite3

from noetl.store._rows import PreparedAppend
from noetl.store.queries import QUERIES

SQL = QUERIES["sqlite"]


def apply(conn: sqlite3.Connection, item: PreparedAppend, now: float) -> None:
    """The dead-letter writes of one append."""
    if item.dead_letters:
        conn.executemany(SQL["upsert_dlq"], [(*row, now) for row in item.dead_letters])
    if item.dead_letter_status:
        conn.executemany(
            SQL["set_dlq_status"],
            [(status, now, message_id) for message_id, status in item.dead_letter_status],
        )
