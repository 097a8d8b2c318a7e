"""SQLite statements of the task queue, the inbox, the playbook catalog and the workers.

Every write runs inside a transaction the caller opened with BEGIN IMMEDIATE, so a read
and the write that depends on it (pick ready tasks, then lease them) cannot interleave
with another connection, in this process or another. Times come from one clock (`db_now`,
read once per operation): a SQLite file is only ever shared by processes of one machine,
so they all judge leases by the same clock. It is the system clock in microseconds (or a
clock the store was given), not SQLite's `julianday('now')`, whose milliseconds tie too
often to order a queue by.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Sequence
from typing import Any

from noetl.store._holders import LocalHolders, parse, process_gone
from noetl.store._rows import (
    TASK_COLUMNS,
    PreparedAppend,
    expired_payload,
    input_from_row,
    lease_from_row,
    task_from_row,
    try_lease,
    undecodable_outcome,
)
from noetl.store.base import (
    Clock,
    Heartbeat,
    Input,
    InputKind,
    Lease,
    NotFoundError,
)

# ?1 task_id ?2 execution_id ?3 step ?4 pool ?5 priority ?6 attempt ?7 payload ?8 delay ?9 now
# Enqueueing an id again (a step run again) reuses the row and keeps its lease_token, so
# the fencing token still only grows and a holder of an older lease stays fenced off.
_ENQUEUE = """
INSERT INTO task_queue (
    task_id, execution_id, step, pool, priority, status, attempt, lease_token,
    cancel_requested, not_before, payload, created_at, updated_at
) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, 0, 0, ?9 + ?8, ?7, ?9, ?9)
ON CONFLICT (task_id) DO UPDATE SET
    execution_id = excluded.execution_id,
    step = excluded.step,
    pool = excluded.pool,
    priority = excluded.priority,
    status = 'queued',
    attempt = excluded.attempt,
    lease_expires_at = NULL,
    worker_id = NULL,
    cancel_requested = 0,
    not_before = excluded.not_before,
    payload = excluded.payload,
    updated_at = excluded.updated_at
"""
# ?1 task_id ?2 attempt ?3 delay ?4 execution_id ?5 now
_REQUEUE = """
UPDATE task_queue SET
    status = 'queued', attempt = ?2, not_before = ?5 + ?3, lease_expires_at = NULL,
    worker_id = NULL, cancel_requested = 0, updated_at = ?5
WHERE task_id = ?1 AND execution_id = ?4
"""
# ?1 task_id ?2 execution_id ?3 now. A queued task is canceled outright; a leased one is
# flagged, and its holder learns it from the next heartbeat.
_CANCEL = """
UPDATE task_queue SET
    status = CASE status WHEN 'queued' THEN 'canceled' ELSE status END,
    cancel_requested = CASE status WHEN 'leased' THEN 1 ELSE cancel_requested END,
    updated_at = ?3
WHERE task_id = ?1 AND execution_id = ?2 AND status IN ('queued', 'leased')
"""
_INPUT_DONE = "DELETE FROM inbox WHERE id = ? AND execution_id = ?"

_READY = """
SELECT task_id, attempt, lease_token, payload, not_before, execution_id FROM task_queue
WHERE pool = ? AND status = 'queued' AND not_before <= ?{scope}
ORDER BY priority DESC, not_before, rowid
LIMIT ?
"""
# Only rows of the executions given as a JSON list (a scoped claim, reap or input claim).
_SCOPE = " AND execution_id IN (SELECT value FROM json_each(?))"
_LEASE = """
UPDATE task_queue SET
    status = 'leased', worker_id = ?, lease_token = ?, lease_expires_at = ?, updated_at = ?
WHERE task_id = ?
"""
_HELD = """
SELECT execution_id, cancel_requested FROM task_queue
WHERE task_id = ? AND lease_token = ? AND status = 'leased'
"""
# ?1 now ?2 task_id ?3 token: a leased task handed back by its holder.
_RELEASE = """
UPDATE task_queue SET
    status = CASE cancel_requested WHEN 1 THEN 'canceled' ELSE 'queued' END,
    worker_id = NULL, lease_expires_at = NULL, updated_at = ?1
WHERE task_id = ?2 AND lease_token = ?3 AND status = 'leased'
"""
_EXPIRED = """
SELECT task_id, execution_id, attempt, worker_id FROM task_queue
WHERE status = 'leased' AND lease_expires_at < ?{scope}
ORDER BY lease_expires_at, rowid
LIMIT ?
"""
_INSERT_INPUT = "INSERT INTO inbox (execution_id, kind, payload, created_at) VALUES (?, ?, ?, ?)"
# A timer is an input held (by nobody) until it is due.
_INSERT_TIMER = (
    "INSERT INTO inbox (execution_id, kind, payload, created_at, claimed_by, claimed_until) "
    "VALUES (?, ?, ?, ?, 'timer', ?)"
)
_FREE_INPUTS = """
SELECT id, execution_id, kind, payload, created_at FROM inbox
WHERE (claimed_until IS NULL OR claimed_until < ?){scope}
ORDER BY id
LIMIT ?
"""


class ClockedConnection(sqlite3.Connection):
    """A connection that carries its store's clock, which `db_now` reads."""

    clock: Clock


def db_now(conn: sqlite3.Connection) -> float:
    """The queue clock, in epoch seconds (see the module docstring): the store's clock
    (`SqliteStore(clock=...)`, `time.time` by default), carried by its connection."""
    return conn.clock() if isinstance(conn, ClockedConnection) else time.time()


def apply_queue(conn: sqlite3.Connection, item: PreparedAppend) -> None:
    """The queue changes of one append (after its expected_seq check)."""
    eid = item.execution_id
    if item.inputs_done:
        conn.executemany(_INPUT_DONE, [(input_id, eid) for input_id in item.inputs_done])
    if not (item.enqueue or item.requeue or item.cancel_tasks or item.timers):
        return  # most commits of the embedded runtime: no clock to read
    now = db_now(conn)
    if item.timers:
        conn.executemany(
            _INSERT_TIMER,
            [
                (eid, InputKind.TIMER.value, payload, now, now + delay)
                for delay, payload in item.timers
            ],
        )
    if item.enqueue:
        conn.executemany(_ENQUEUE, [(*row, now) for row in item.enqueue])
    if item.requeue:
        conn.executemany(_REQUEUE, [(*row, eid, now) for row in item.requeue])
    if item.cancel_tasks:
        conn.executemany(_CANCEL, [(task_id, eid, now) for task_id in item.cancel_tasks])


# --- the task queue -----------------------------------------------------------------------


def _scoped(query: str, executions: Collection[str] | None) -> tuple[str, tuple[Any, ...]]:
    """The query with its scope filter (and the filter's parameter), or without."""
    if executions is None:
        return query.format(scope=""), ()
    return query.format(scope=_SCOPE), (json.dumps(sorted(executions)),)


def claim(
    conn: sqlite3.Connection,
    worker_id: str,
    pool: str,
    limit: int,
    lease_s: float,
    *,
    executions: Collection[str] | None = None,
) -> list[Lease]:
    now = db_now(conn)
    expires = now + lease_s
    query, scope = _scoped(_READY, executions)
    ready = conn.execute(query, (pool, now, *scope, limit)).fetchall()
    leases = []
    for task_id, attempt, token, payload, not_before, execution_id in ready:
        conn.execute(_LEASE, (worker_id, token + 1, expires, now, task_id))
        row = {
            "not_before": not_before,
            "payload": payload,
            "attempt": attempt,
            "lease_token": token + 1,
            "lease_expires_at": expires,
            "worker_id": worker_id,
        }
        lease = try_lease(row)
        if isinstance(lease, Lease):
            leases.append(lease)
            continue
        # A poison message: done at once, reported failed for the orchestrator.
        conn.execute(
            "UPDATE task_queue SET status = 'done', updated_at = ? WHERE task_id = ?",
            (now, task_id),
        )
        outcome = undecodable_outcome(task_id, lease)
        conn.execute(_INSERT_INPUT, (execution_id, InputKind.OUTCOME.value, outcome, now))
    return leases


def heartbeat(conn: sqlite3.Connection, task_id: str, token: int, lease_s: float) -> Heartbeat:
    held = conn.execute(_HELD, (task_id, token)).fetchone()
    if held is None:
        return Heartbeat(alive=False)
    now = db_now(conn)
    conn.execute(
        "UPDATE task_queue SET lease_expires_at = ?, updated_at = ? WHERE task_id = ?",
        (now + lease_s, now, task_id),
    )
    return Heartbeat(alive=True, cancel=bool(held[1]))


def complete(conn: sqlite3.Connection, task_id: str, token: int, payload: str) -> bool:
    held = conn.execute(_HELD, (task_id, token)).fetchone()
    if held is None:
        return False
    now = db_now(conn)
    conn.execute(
        "UPDATE task_queue SET status = 'done', updated_at = ? WHERE task_id = ?", (now, task_id)
    )
    conn.execute(_INSERT_INPUT, (held[0], InputKind.OUTCOME.value, payload, now))
    return True


def release(conn: sqlite3.Connection, held: Sequence[tuple[str, int]]) -> set[str]:
    """Queue the held tasks again in their old place (canceled when their execution asked
    them to stop); the ids released."""
    now = db_now(conn)
    released: set[str] = set()
    for task_id, token in held:
        if conn.execute(_RELEASE, (now, task_id, token)).rowcount:
            released.add(task_id)
    return released


def mark_done(conn: sqlite3.Connection, task_id: str, token: int) -> bool:
    """The holder's task is done (no inbox input: its outcome was decided already)."""
    if conn.execute(_HELD, (task_id, token)).fetchone() is None:
        return False
    conn.execute(
        "UPDATE task_queue SET status = 'done', updated_at = ? WHERE task_id = ?",
        (db_now(conn), task_id),
    )
    return True


def lease_ids(
    conn: sqlite3.Connection,
    worker_id: str,
    task_ids: Sequence[str],
    execution_id: str,
    lease_s: float,
) -> list[Lease]:
    """Lease the named queued tasks of `execution_id` to `worker_id` (just enqueued)."""
    now = db_now(conn)
    leases = []
    for task_id in task_ids:
        row = conn.execute(
            "SELECT attempt, lease_token, payload FROM task_queue "
            "WHERE task_id = ? AND execution_id = ? AND status = 'queued'",
            (task_id, execution_id),
        ).fetchone()
        if row is None:
            continue
        attempt, token, payload = row
        conn.execute(_LEASE, (worker_id, token + 1, now + lease_s, now, task_id))
        leases.append(
            lease_from_row(
                {
                    "payload": payload,
                    "attempt": attempt,
                    "lease_token": token + 1,
                    "lease_expires_at": now + lease_s,
                    "worker_id": worker_id,
                }
            )
        )
    return leases


def reap_expired(
    conn: sqlite3.Connection, limit: int, executions: Collection[str] | None = None
) -> int:
    now = db_now(conn)
    columns = ("task_id", "execution_id", "attempt", "worker_id")
    query, scope = _scoped(_EXPIRED, executions)
    rows = [
        dict(zip(columns, row, strict=True)) for row in conn.execute(query, (now, *scope, limit))
    ]
    conn.executemany(
        "UPDATE task_queue SET status = 'expired', updated_at = ? WHERE task_id = ?",
        [(now, row["task_id"]) for row in rows],
    )
    kind = InputKind.LEASE_EXPIRED.value
    conn.executemany(
        _INSERT_INPUT, [(row["execution_id"], kind, expired_payload(row), now) for row in rows]
    )
    return len(rows)


def get_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {', '.join(TASK_COLUMNS)} FROM task_queue WHERE task_id = ?", (task_id,)
    ).fetchone()
    return None if row is None else task_from_row(dict(zip(TASK_COLUMNS, row, strict=True)))


# --- the inbox ------------------------------------------------------------------------------


def post_input(conn: sqlite3.Connection, execution_id: str, kind: InputKind, payload: str) -> int:
    exists = conn.execute("SELECT 1 FROM execution WHERE execution_id = ?", (execution_id,))
    if exists.fetchone() is None:
        raise NotFoundError(f"execution {execution_id} not found")
    cursor = conn.execute(_INSERT_INPUT, (execution_id, kind.value, payload, db_now(conn)))
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def claim_inputs(
    conn: sqlite3.Connection,
    owner: str,
    limit: int,
    lease_s: float,
    executions: Collection[str] | None = None,
) -> list[Input]:
    now = db_now(conn)
    columns = ("id", "execution_id", "kind", "payload", "created_at")
    query, scope = _scoped(_FREE_INPUTS, executions)
    rows = [
        dict(zip(columns, row, strict=True)) for row in conn.execute(query, (now, *scope, limit))
    ]
    conn.executemany(
        "UPDATE inbox SET claimed_by = ?, claimed_until = ? WHERE id = ?",
        [(owner, now + lease_s, row["id"]) for row in rows],
    )
    return [input_from_row(row) for row in rows]


# Inputs held (hold not expired) under a holder's token; timers are held by 'timer'.
_HOLDERS = """
SELECT DISTINCT claimed_by FROM inbox
WHERE claimed_until > ? AND claimed_by IS NOT NULL AND claimed_by <> 'timer'
"""


def orphaned_holders(conn: sqlite3.Connection, local: LocalHolders) -> list[str]:
    """Tokens of holders that hold inputs and are gone (closed, or their process ended)."""
    tokens = [row[0] for row in conn.execute(_HOLDERS, (db_now(conn),))]
    return [
        token
        for token in tokens
        if (holder := parse(token)) is not None and process_gone(holder, local)
    ]


def release_inputs(conn: sqlite3.Connection, tokens: Sequence[str]) -> int:
    """Free the inputs the (gone) holders `tokens` hold."""
    marks = ", ".join("?" * len(tokens))
    cursor = conn.execute(
        "UPDATE inbox SET claimed_by = NULL, claimed_until = NULL "
        f"WHERE claimed_until > ? AND claimed_by IN ({marks})",
        (db_now(conn), *tokens),
    )
    return cursor.rowcount


def consumed_inputs(
    conn: sqlite3.Connection, pairs: Sequence[tuple[int, str]]
) -> list[tuple[int, str]]:
    """The (input id, execution id) pairs that are no longer in the inbox."""
    return [
        (input_id, execution_id)
        for input_id, execution_id in pairs
        if conn.execute(
            "SELECT 1 FROM inbox WHERE id = ? AND execution_id = ?", (input_id, execution_id)
        ).fetchone()
        is None
    ]
