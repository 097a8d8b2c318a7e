"""SQLite statements of the dead-letter queue (`dlq`), run inside the caller's transaction."""

from __future__ import annotations

import sqlite3

from noetl.store._rows import DLQ_COLUMNS, PreparedAppend, dead_letter_filter, dead_letter_from_row
from noetl.store._sqlite_queue import db_now
from noetl.store.base import DeadLetter, DeadLetterStatus, InputKind, NotFoundError

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


def select(
    conn: sqlite3.Connection,
    status: DeadLetterStatus | None,
    execution_id: str | None,
    limit: int,
    offset: int,
) -> list[DeadLetter]:
    clause, params = dead_letter_filter(status, execution_id, "?")
    rows = conn.execute(
        f"{_SELECT}{clause} ORDER BY last_seen DESC, message_id DESC LIMIT ? OFFSET ?",
        (*params, limit, offset),
    ).fetchall()
    return [dead_letter_from_row(row) for row in rows]


def get(conn: sqlite3.Connection, message_id: str) -> DeadLetter | None:
    row = conn.execute(f"{_SELECT} WHERE message_id = ?", (message_id,)).fetchone()
    return None if row is None else dead_letter_from_row(row)


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    found = {status.value: 0 for status in DeadLetterStatus}
    for status, count in conn.execute("SELECT status, count(*) FROM dlq GROUP BY status"):
        found[status] = count
    return found


def _status(conn: sqlite3.Connection, message_id: str) -> tuple[str, str]:
    row = conn.execute(
        "SELECT status, execution_id FROM dlq WHERE message_id = ?", (message_id,)
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no dead-letter entry {message_id}")
    return row[0], row[1]


def post_replay(conn: sqlite3.Connection, message_id: str, payload: str) -> bool:
    status, execution_id = _status(conn, message_id)
    if status != DeadLetterStatus.PENDING:
        return False
    now = db_now(conn)
    conn.execute(
        "UPDATE dlq SET status = 'replayed', replays = replays + 1, updated_at = ? "
        "WHERE message_id = ?",
        (now, message_id),
    )
    conn.execute(
        "INSERT INTO inbox (execution_id, kind, payload, created_at) VALUES (?, ?, ?, ?)",
        (execution_id, InputKind.REPLAY.value, payload, now),
    )
    return True


def discard(conn: sqlite3.Connection, message_id: str, reason: str) -> bool:
    status, _ = _status(conn, message_id)
    if status != DeadLetterStatus.PENDING:
        return False
    conn.execute(
        "UPDATE dlq SET status = 'discarded', discard_reason = ?, updated_at = ? "
        "WHERE message_id = ?",
        (reason, db_now(conn), message_id),
    )
    return True
