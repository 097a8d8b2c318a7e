"""The plans of PostgreSQL's commit function on a database that starts empty.

`noetl_commit` keeps generic plans for the session, made from the statistics of the moment
its session first calls it. On a new database those say "almost empty": the update of the
executions' rows then joined them over a sequential scan of the whole `execution` table,
and went on scanning it on every commit as the table grew, until an ANALYZE (migration
0014). The commits here find every execution by its key.
"""

from __future__ import annotations

import time

import psycopg

from noetl.core import Event
from noetl.store import PostgresStore
from noetl.store.base import Append, ExecutionRecord

EXECUTIONS = 300


def _record(execution_id: str) -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=execution_id,
        playbook_name="demo",
        playbook_path=None,
        playbook_text="name: demo\n",
        created_at=1.0,
        updated_at=1.0,
    )


def _execution_stats(url: str, updates: int) -> tuple[int, int]:
    """(sequential scans, rows they read) of `execution`, once the store's sessions have
    reported at least `updates` updates of it (a session reports its counts when it ends)."""
    deadline = time.monotonic() + 15
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT seq_scan, seq_tup_read, n_tup_upd FROM pg_stat_user_tables "
                "WHERE relname = 'execution'"
            ).fetchone()
        assert row is not None
        if row[2] >= updates or time.monotonic() > deadline:
            assert row[2] >= updates, f"only {row[2]} updates of execution were reported"
            return int(row[0]), int(row[1])
        time.sleep(0.1)


def test_commits_on_a_new_database_find_their_executions_by_key(pg_database: str) -> None:
    ids = [f"e{i:04d}" for i in range(EXECUTIONS)]
    store = PostgresStore(pg_database)
    try:
        for execution_id in ids:
            started = Event(1, "workflow.started", execution_id, 1.0)
            store.create_execution(_record(execution_id), Append(execution_id, 0, [started]))
        for execution_id in ids:
            called = Event(2, "step.called", execution_id, 2.0, step="a")
            store.commit([Append(execution_id, 1, [called], now=2.0)])
    finally:
        store.close()  # its sessions end, and report their counts

    scans, read = _execution_stats(pg_database, updates=2 * EXECUTIONS)
    # A scan per commit read the whole table: tens of thousands of rows.
    assert read < EXECUTIONS, (scans, read)
