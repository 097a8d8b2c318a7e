"""The PostgreSQL store's commit: one call of `noetl_commit` (migration 0013), which checks
a commit where its rows are and writes its appends, then the rarer queue and dead-letter
writes when there are any (`noetl.store.postgres` sends them in one transaction). New
executions go in with their first appends through `noetl_start` (migration 0016), one
statement as well.

Every JSON column is already encoded (`_rows.prepare` with `_pg_nul.pg_dumps`); each kind
of row goes to the database as the JSON text of an array of arrays (`json_rows`), one
parameter each (`sql/postgres_queue.sql`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from noetl.store import _pg_dlq as dlq
from noetl.store._json import dumps
from noetl.store._pg_connector import ts
from noetl.store._pg_nul import pg_dumps
from noetl.store._rows import PreparedAppend, inputs_to_check, record_to_row
from noetl.store.base import ExecutionRecord, StalePlaybookError
from noetl.store.queries import QUERIES

__all__ = [
    "EXISTS",
    "REFUSED",
    "Refused",
    "execution_row",
    "new_row",
    "one_statement",
    "plain_starts",
    "send",
    "start",
    "timestamps",
]

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


def writes(prepared: list[PreparedAppend], lease: frozenset[str] = frozenset()) -> list[str]:
    """The rows `noetl_commit` writes, one JSON parameter per kind: events, executions,
    step states and tasks (those in `lease` flagged to be leased at once)."""
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
    return [
        json_rows(row for item in prepared for row in item.events),
        dumps(list(rows.values())),
        json_rows(steps.values()),
        json_rows((*row[:6], float(row[7]), row[0] in lease, row[6]) for row in tasks.values()),
    ]


# The SQLSTATEs of `noetl_start` when an execution id exists (migration 0016), and when a
# row's `latest` is not the latest version of its playbook (0017).
EXISTS = "NT002"
NEWER = "NT003"


def new_row(
    record: ExecutionRecord, compiled: str | None, latest: int | None = None
) -> dict[str, Any]:
    """A new execution's columns (times in epoch seconds), its compiled model and the
    version of its playbook it must still be the latest of (`Store.create_execution`)."""
    return {**record_to_row(record, pg_dumps), "compiled": compiled, "latest": latest}


def check_latest(conn: Conn, rows: Sequence[Mapping[str, Any]]) -> None:
    """StalePlaybookError unless each row's `latest` is the latest version of its path
    (in the transaction of its insert: it rolls back)."""
    checks = [
        (
            row["playbook_path"],
            row["latest"],
            conn.execute(SQL["newest_version"], {"path": row["playbook_path"]}),
        )
        for row in rows
        if row["latest"] is not None and row["playbook_path"] is not None
    ]
    for path, latest, cursor in checks:
        found = cursor.fetchone()
        if found is not None and found[0] is not None and found[0] > latest:
            raise StalePlaybookError(path, latest)


def execution_row(row: Mapping[str, Any]) -> str:
    """One new execution as a `noetl_start` row: the JSON array of its columns (those of
    `record_to_row` and `compiled`, times in epoch seconds) and the version it must still
    be the latest of (migration 0017), its context (JSON text already) spliced in as it
    is."""
    head = dumps([row["execution_id"], row["playbook_name"], row["playbook_path"], row["status"]])
    tail = dumps(
        [
            row["parent_execution_id"],
            row["created_at"],
            row["updated_at"],
            row["finished_at"],
            row["playbook_text"],
            row["compiled"],
            row["latest"],
        ]
    )
    return f"{head[:-1]},{row['context']},{tail[1:]}"


def start(conn: Conn, rows: Sequence[str], prepared: list[PreparedAppend], *, wake: bool) -> None:
    """New executions (their `execution_row`s) and their first appends in one statement,
    its own transaction (`noetl_start`, migration 0017). When an id exists it raises
    psycopg's error of SQLSTATE `EXISTS`, and nothing is written."""
    conn.execute(SQL["start"], ["[" + ",".join(rows) + "]", *writes(prepared), wake])


def plain_starts(prepared: list[PreparedAppend]) -> bool:
    """Whether the first appends of new executions go in with `noetl_start`: each starts
    at sequence 0, consumes no input and has no rarer writes (else the pipelined way,
    which checks them)."""
    return (
        all(item.expected_seq == 0 for item in prepared)
        and not inputs_to_check(prepared)
        and one_statement(prepared)
    )


def timestamps(row: Mapping[str, Any]) -> dict[str, Any]:
    """A new execution's times as timestamps (its row has them in epoch seconds)."""
    return {
        c: ts(row[c]) for c in ("created_at", "updated_at", "finished_at") if row[c] is not None
    }


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
    written = conn.cursor()
    written.execute(
        SQL["commit"],
        [
            dumps(held),
            dumps(firsts(prepared) if checked else []),
            dumps(inputs_to_check(prepared) if checked else []),
            *writes(prepared, lease),
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
