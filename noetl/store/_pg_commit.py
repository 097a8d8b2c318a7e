"""The PostgreSQL store's commit, as statements: the guard that checks a commit where its
rows are, and the writes of its appends (`noetl.store.postgres` runs them in one pipeline).

Every JSON column is already encoded (`_rows.prepare` with `_pg_nul.pg_dumps`); rows go
to the database as arrays, one `unnest` per kind of row (`sql/postgres_queue.sql`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from noetl.store import _pg_dlq as dlq
from noetl.store._pg_connector import columns, ts
from noetl.store._rows import PreparedAppend, inputs_to_check
from noetl.store.queries import QUERIES

__all__ = ["REFUSED", "Refused", "guard", "write"]

SQL = QUERIES["postgres"]
Conn = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]


class Refused(Exception):
    """The guard refused a commit (its transaction rolled back): try it the slow way."""


# The SQLSTATE of `noetl_refuse` (migrations/postgres/0011_commit_guard.sql).
REFUSED = "NT001"


def arrays(
    rows: list[tuple[Any, ...]], width: int, *, time_columns: tuple[int, ...] = ()
) -> list[list[Any]]:
    """`columns` of rows that may be none (then `width` empty arrays)."""
    return columns(rows, time_columns=time_columns) if rows else [[] for _ in range(width)]


def write_queue(cur: Cursor, item: PreparedAppend) -> None:
    """The rarer queue writes of one append: requeues, cancels, timers (its own rows only)."""
    eid = item.execution_id
    if item.requeue:
        cur.executemany(
            SQL["requeue"],
            [(attempt, float(delay), tid, eid) for tid, attempt, delay in item.requeue],
        )
    if item.cancel_tasks:
        cur.execute(SQL["cancel_tasks"], (item.cancel_tasks, eid))
    if item.timers:
        cur.executemany(
            SQL["insert_timer"], [(eid, payload, delay) for delay, payload in item.timers]
        )


def guard(
    conn: Conn, prepared: list[PreparedAppend], *, held: Sequence[tuple[str, int]] = ()
) -> None:
    """Send the commit's checks ahead of its writes (`guard`: the writes are never
    applied if it refuses); `held`: the (task id, token) of leases it completes, every
    one still held or it refuses. `Refused` at once for appends to one execution that do
    not chain: the slow way names them."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for item in prepared:
        if last.get(item.execution_id, item.expected_seq) != item.expected_seq:
            raise Refused
        first.setdefault(item.execution_id, item.expected_seq)
        last[item.execution_id] = item.last_seq
    ids = sorted(first)
    check = inputs_to_check(prepared)
    held_ids = [task_id for task_id, _ in held]
    conn.execute(
        SQL["guard"],
        [
            held_ids,
            [token for _, token in held],
            ids,
            held_ids,
            ids,
            ids,
            [first[i] for i in ids],
            *(columns(check) if check else [[], []]),
        ],
    )


def write(
    conn: Conn,
    prepared: list[PreparedAppend],
    *,
    lease: frozenset[str] = frozenset(),
    worker_id: str | None = None,
    lease_s: float = 30.0,
) -> Cursor:
    """Queue the writes of every append: events, executions, steps and tasks in one
    statement (`write_all`), the rarer queue and dead-letter writes after it. Tasks in
    `lease` are leased to `worker_id` at once; the returned cursor yields them."""
    events = [row for item in prepared for row in item.events]
    # Appends to one execution chain: its row ends as the last one leaves it.
    rows: dict[str, tuple[Any, ...]] = {}
    for item in prepared:
        old = rows.get(item.execution_id)
        status, finished, context = (None, None, None) if old is None else old[3:]
        if item.status is not None:
            status = item.status.value
            finished = ts(item.now) if item.finished else None
        if item.context is not None:
            context = item.context
        rows[item.execution_id] = (
            item.execution_id,
            item.last_seq,
            ts(item.now),
            status,
            finished,
            context,
        )
    steps = {
        (e, step): (e, step, status, ts(now))
        for item in prepared
        for e, step, status, now in item.steps
    }
    tasks = {row[0]: row for item in prepared for row in item.enqueue}
    written = conn.cursor()
    written.execute(
        SQL["write_all"],
        [
            *arrays(events, 6, time_columns=(3,)),
            *arrays(list(rows.values()), 6),
            *arrays(list(steps.values()), 4),
            *arrays([(*row[:7], float(row[7]), row[0] in lease) for row in tasks.values()], 9),
            worker_id,
            float(lease_s),
        ],
        binary=True,
    )
    with conn.cursor() as cur:
        for item in prepared:
            if item.requeue or item.cancel_tasks or item.timers:
                write_queue(cur, item)
            if item.dead_letters or item.dead_letter_status:
                dlq.write(cur, item)
        done = [(input_id, item.execution_id) for item in prepared for input_id in item.inputs_done]
        if done:
            cur.execute(SQL["delete_all_inputs"], columns(done))
    return written
