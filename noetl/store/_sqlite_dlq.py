"""SQLite statements of the dead-letter queue (`dlq`), run inside the caller's transaction."""

from __future__ import annotations

import sqlite3

from noetl.store._rows import DLQ_COLUMNS, PreparedAppend

_COLUMNS = ", ".join(DLQ_COLUMNS)
# A task that fails again after a replay updates its row: pending again, first_seen and
# the replay count kept.
_KEEP = ("message_id", "first_seen", "replays")
_UPSERT = f"""
INSERT INTO dlq ({_COLUMNS}, updated_at) VALUES ({", ".join("?" * len(DLQ_COLUMNS))}, ?)
ON CONFLICT (message_id) DO UPDATE SET
    {", ".join(f"{c} = excluded.{c}" for c in DLQ_COLUMNS if c not in _KEEP)},
    updated_at = excluded.updated_at
"""
_SET_STATUS = "UPDATE dlq SET status = ?, updated_at = ? WHERE message_id = ?"
_SELECT = f"SELECT {_COLUMNS} FROM dlq"


def apply(conn: sqlite3.Connection, item: PreparedAppend, now: float) -> None:
    """The dead-letter writes of one append."""
    if item.dead_letters:
        conn.executemany(_UPSERT, [(*row, now) for row in item.dead_letters])
    if item.dead_letter_status:
        conn.executemany(
            _SET_STATUS,
            [(status, now, message_id) for message_id, status in item.dead_letter_status],
        )
