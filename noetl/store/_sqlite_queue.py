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
from noetl.store.queries import QUERIES

SQL = QUERIES["sqlite"]


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
        conn.executemany(SQL["input_done"], [(input_id, eid) for input_id in item.inputs_done])
    if not (item.enqueue or item.requeue or item.cancel_tasks or item.timers):
        return  # most commits of the embedded runtime: no clock to read
    now = db_now(conn)
    if item.timers:
        conn.executemany(
            SQL["insert_timer"],
            [
                (eid, InputKind.TIMER.value, payload, now, now + delay)
                for delay, payload in item.timers
            ],
        )
    if item.enqueue:
        conn.executemany(SQL["enqueue"], [(*row, now) for row in item.enqueue])
    if item.requeue:
        conn.executemany(SQL["requeue"], [(*row, eid, now) for row in item.requeue])
    if item.cancel_tasks:
        conn.executemany(
            SQL["cancel_tasks"], [(task_id, eid, now) for task_id in item.cancel_tasks]
        )


# --- the task queue -----------------------------------------------------------------------


def _scoped(name: str, executions: Collection[str] | None) -> tuple[str, tuple[Any, ...]]:
    """The named query, or its `_scoped` twin with the scope's parameter."""
    if executions is None:
        return SQL[name], ()
    return SQL[f"{name}_scoped"], (json.dumps(sorted(executions)),)


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
    query, scope = _scoped("ready_tasks", executions)
    ready = conn.execute(query, (pool, now, *scope, limit)).fetchall()
    leases = []
    for task_id, attempt, token, payload, not_before, execution_id in ready:
        conn.execute(SQL["lease"], (worker_id, token + 1, expires, now, task_id))
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
        conn.execute(SQL["mark_done"], (now, task_id))
        outcome = undecodable_outcome(task_id, lease)
        conn.execute(SQL["insert_input"], (execution_id, InputKind.OUTCOME.value, outcome, now))
    return leases


def heartbeat(conn: sqlite3.Connection, task_id: str, token: int, lease_s: float) -> Heartbeat:
    held = conn.execute(SQL["held"], (task_id, token)).fetchone()
    if held is None:
        return Heartbeat(alive=False)
    now = db_now(conn)
    conn.execute(SQL["extend_lease"], (now + lease_s, now, task_id))
    return Heartbeat(alive=True, cancel=bool(held[1]))


def complete(conn: sqlite3.Connection, task_id: str, token: int, payload: str) -> bool:
    held = conn.execute(SQL["held"], (task_id, token)).fetchone()
    if held is None:
        return False
    now = db_now(conn)
    conn.execute(SQL["mark_done"], (now, task_id))
    conn.execute(SQL["insert_input"], (held[0], InputKind.OUTCOME.value, payload, now))
    return True


def release(conn: sqlite3.Connection, held: Sequence[tuple[str, int]]) -> set[str]:
    """Queue the held tasks again in their old place (canceled when their execution asked
    them to stop); the ids released."""
    now = db_now(conn)
    released: set[str] = set()
    for task_id, token in held:
        if conn.execute(SQL["release"], (now, task_id, token)).rowcount:
            released.add(task_id)
    return released


def mark_done(conn: sqlite3.Connection, task_id: str, token: int) -> bool:
    """The holder's task is done (no inbox input: its outcome was decided already)."""
    if conn.execute(SQL["held"], (task_id, token)).fetchone() is None:
        return False
    conn.execute(SQL["mark_done"], (db_now(conn), task_id))
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
        row = conn.execute(SQL["queued_task"], (task_id, execution_id)).fetchone()
        if row is None:
            continue
        attempt, token, payload = row
        conn.execute(SQL["lease"], (worker_id, token + 1, now + lease_s, now, task_id))
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
    query, scope = _scoped("expired_tasks", executions)
    rows = [
        dict(zip(columns, row, strict=True)) for row in conn.execute(query, (now, *scope, limit))
    ]
    conn.executemany(SQL["mark_expired"], [(now, row["task_id"]) for row in rows])
    kind = InputKind.LEASE_EXPIRED.value
    conn.executemany(
        SQL["insert_input"],
        [(row["execution_id"], kind, expired_payload(row), now) for row in rows],
    )
    return len(rows)


def get_task(conn: sqlite3.Connection, task_id: str) -> dict[str, Any] | None:
    row = conn.execute(SQL["select_task"], (task_id,)).fetchone()
    return None if row is None else task_from_row(dict(zip(TASK_COLUMNS, row, strict=True)))


# --- the inbox ------------------------------------------------------------------------------


def post_input(conn: sqlite3.Connection, execution_id: str, kind: InputKind, payload: str) -> int:
    if conn.execute(SQL["select_last_seq"], (execution_id,)).fetchone() is None:
        raise NotFoundError(f"execution {execution_id} not found")
    cursor = conn.execute(SQL["insert_input"], (execution_id, kind.value, payload, db_now(conn)))
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
    query, scope = _scoped("free_inputs", executions)
    rows = [
        dict(zip(columns, row, strict=True)) for row in conn.execute(query, (now, *scope, limit))
    ]
    conn.executemany(SQL["hold_input"], [(owner, now + lease_s, row["id"]) for row in rows])
    return [input_from_row(row) for row in rows]


def orphaned_holders(conn: sqlite3.Connection, local: LocalHolders) -> list[str]:
    """Tokens of holders that hold inputs and are gone (closed, or their process ended)."""
    tokens = [row[0] for row in conn.execute(SQL["holders"], (db_now(conn),))]
    return [
        token
        for token in tokens
        if (holder := parse(token)) is not None and process_gone(holder, local)
    ]


def release_inputs(conn: sqlite3.Connection, tokens: Sequence[str]) -> int:
    """Free the inputs the (gone) holders `tokens` hold."""
    cursor = conn.execute(SQL["release_inputs"], (db_now(conn), json.dumps(list(tokens))))
    return cursor.rowcount


def consumed_inputs(
    conn: sqlite3.Connection, pairs: Sequence[tuple[int, str]]
) -> list[tuple[int, str]]:
    """The (input id, execution id) pairs that are no longer in the inbox."""
    return [
        (input_id, execution_id)
        for input_id, execution_id in pairs
        if conn.execute(SQL["input_exists"], (input_id, execution_id)).fetchone() is None
    ]
