"""The PostgreSQL store's commit: one call of `noetl_commit` (migration 0013), which checks
a commit where its rows are and writes its appends, then the rarer queue and dead-letter
writes when there are any (`noetl.store.postgres` sends them in one transaction).

Every JSON column is already encoded (`_rows.prepare` with `_pg_nul.pg_dumps`); each kind
of row goes to the database as the JSON text of an array of arrays (`json_rows`), one
parameter each (`sql/postgres_queue.sql`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from noetl.store import _pg_dlq as dlq
from noetl.store._json import dumps
from noetl.store._rows import PreparedAppend, inputs_to_check
from noetl.store.queries import QUERIES

__all__ = ["REFUSED", "Refused", "one_statement", "send"]

SQL = QUERIES["postgres"]
Conn = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]


class Refused(Exception):
    """The guard refused a commit (its transaction rolled back): try it the slow way."""


# The SQLSTATE of `noetl_refuse` (migrations/postgres/0011_commit_guard.sql).
REFUSED = "NT001"


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


def firsts(prepared: list[PreparedAppend]) -> list[tuple[str, int]]:
    """The (execution id, sequence) each execution's first append continues, for the
    commit's checks. `Refused` at once for appends to one execution that do not chain:
    the slow way names them."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for item in prepared:
        if last.get(item.execution_id, item.expected_seq) != item.expected_seq:
            raise Refused
        first.setdefault(item.execution_id, item.expected_seq)
        last[item.execution_id] = item.last_seq
    return sorted(first.items())


def json_rows(rows: Iterable[Sequence[Any]]) -> str:
    """Rows as one JSON array of arrays, the text of a `jsonb` parameter. Each row's last
    cell is JSON text already (a column encoded by `prepare`): it goes in as it is, not
    encoded again as a string. psycopg dumps a list element by element in Python; this
    is one C-encoded call a row."""
    return "[" + ",".join(f"{dumps(row[:-1])[:-1]},{row[-1]}]" for row in rows) + "]"


def one_statement(prepared: list[PreparedAppend]) -> bool:
    """Whether the commit is `noetl_commit` alone: ONE statement, its own transaction. A
    commit with rarer writes (requeues, cancels, timers, dead letters) sends them after
    it in one transaction."""
    return not any(
        item.requeue or item.cancel_tasks or item.timers or item.dead_letters
        or item.dead_letter_status
        for item in prepared
    )  # fmt: skip


def send(
    conn: Conn,
    prepared: list[PreparedAppend],
    *,
    checked: bool = True,
    held: Sequence[tuple[str, int]] = (),
    lease: frozenset[str] = frozenset(),
    worker_id: str | None = None,
    lease_s: float = 30.0,
    wake: bool = False,
) -> Cursor:
    """Send the commit: `noetl_commit` (migration 0013: its checks when `checked`, then
    events, executions, steps, tasks and the inputs decided), then the rarer queue and
    dead-letter writes. `held`: the (task id, token) of leases it completes, every one
    still held or it refuses (SQLSTATE NT001). Tasks in `lease` are leased to
    `worker_id` at once: the returned cursor yields them. `wake`: notify idle workers."""
    check = firsts(prepared) if checked else []
    # Appends to one execution chain: its row ends as the last one leaves it.
    rows: dict[str, tuple[Any, ...]] = {}
    for item in prepared:
        old = rows.get(item.execution_id)
        status, finished, context = (None, None, None) if old is None else old[3:]
        if item.status is not None:
            status = item.status.value
            finished = item.now if item.finished else None
        if item.context is not None:
            context = item.context
        rows[item.execution_id] = (
            item.execution_id,
            item.last_seq,
            item.now,
            status,
            finished,
            context,
        )
    steps = {
        (e, step): (e, step, now, status)
        for item in prepared
        for e, step, status, now in item.steps
    }
    tasks = {row[0]: row for item in prepared for row in item.enqueue}
    written = conn.cursor()
    written.execute(
        SQL["commit"],
        [
            dumps(held),
            dumps(check),
            dumps(inputs_to_check(prepared) if checked else []),
            json_rows(row for item in prepared for row in item.events),
            dumps(list(rows.values())),
            json_rows(steps.values()),
            json_rows((*row[:6], float(row[7]), row[0] in lease, row[6]) for row in tasks.values()),
            dumps(
                [
                    (input_id, item.execution_id)
                    for item in prepared
                    for input_id in item.inputs_done
                ]
            ),
            worker_id,
            float(lease_s),
            wake,
        ],
    )
    if not one_statement(prepared):
        with conn.cursor() as cur:
            for item in prepared:
                if item.requeue or item.cancel_tasks or item.timers:
                    write_queue(cur, item)
                if item.dead_letters or item.dead_letter_status:
                    dlq.write(cur, item)
    return written
