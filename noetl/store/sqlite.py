"""The embedded Store: one SQLite file (stdlib sqlite3), WAL mode, numbered migrations.

One connection guarded by a lock: the embedded runtime writes from one thread, and WAL
lets other processes (`noetl status`, a second `noetl run`) read while it writes. Writers
in other processes wait up to 5 s for the lock (`busy_timeout`); every write transaction
takes the write lock up front (`BEGIN IMMEDIATE`) so the read of `last_seq` and the
append, or the choice of ready tasks and their lease, cannot interleave with another
writer. The connection lives in `_sqlite_connector`, what is written once for both SQL
stores in `noetl.store.managers`; the commit is here, the queue in `_sqlite_queue`, their
statements in `sql/sqlite_queue.sql`. SQLite has no notifications, so `wait_for` is a
short sleep and callers poll.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, NoReturn

from noetl.store import _sqlite_dlq as dlq
from noetl.store import _sqlite_queue as queue
from noetl.store._complete import OneAtATime
from noetl.store._holders import PROCESS_HOLDERS, LocalHolder
from noetl.store._json import dumps
from noetl.store._rows import (
    PreparedAppend,
    check_channel,
    check_page,
    inputs_to_check,
    prepare,
    prepare_initial,
    record_to_row,
    stale_all,
)
from noetl.store._sqlite_connector import SqliteConnector
from noetl.store.base import (
    Append,
    Clock,
    ConcurrencyError,
    ExecutionRecord,
    Heartbeat,
    Input,
    InputKind,
    Lease,
    NotFoundError,
    PartitionReport,
    StalePlaybookError,
)
from noetl.store.managers import SqlStore
from noetl.store.queries import QUERIES

BUSY_TIMEOUT_MS = 5000
# How long `wait_for` sleeps at most: the latency of a poll without notifications.
POLL_S = 0.05

SQL = QUERIES["sqlite"]


class _Behind(Exception):
    """An append's execution is not at its expected sequence (the transaction rolls
    back; `_refuse` says which)."""


class SqliteStore(OneAtATime, SqlStore):
    """Store in one SQLite file; the file and its directory are created when missing."""

    def __init__(self, path: str | Path, *, clock: Clock = time.time) -> None:
        self.path = Path(path).expanduser().absolute()
        self._connector = SqliteConnector(self.path, clock=clock, busy_timeout_ms=BUSY_TIMEOUT_MS)
        self._conn = self._connector.conn
        self._use = self._connector.use
        self._transaction = self._connector.in_transaction
        super().__init__(self._connector)

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        """See `RetentionPort.rotate_partitions`: one table each, nothing to do."""
        PartitionReport.check(period_days, ahead_days)
        return PartitionReport()

    def create_execution(
        self,
        record: ExecutionRecord,
        initial: Append | None = None,
        *,
        compiled: str | None = None,
        latest: int | None = None,
    ) -> None:
        """Insert a new execution row and apply `initial`, in one transaction;
        ConcurrencyError if the id exists or `initial` does not start at sequence 0,
        StalePlaybookError if `latest` is not the latest version of the playbook."""
        row = record_to_row(record)
        prepared = prepare_initial(record, initial)
        try:
            self._create(row, prepared, compiled, latest)
        except _Behind:
            assert prepared is not None
            raise stale_all([(prepared, 0)], []) from None

    def _create(
        self,
        row: dict[str, Any],
        prepared: PreparedAppend | None,
        compiled: str | None,
        latest: int | None,
    ) -> None:
        with self._transaction() as conn:
            path = row["playbook_path"]
            if latest is not None and path is not None:
                newest = conn.execute(SQL["newest_version"], {"path": path}).fetchone()[0]
                if newest is not None and newest > latest:
                    raise StalePlaybookError(path, latest)
            try:
                conn.execute(SQL["insert_execution"], row)
            except sqlite3.IntegrityError as exc:
                if exc.sqlite_errorname != "SQLITE_CONSTRAINT_PRIMARYKEY":
                    raise
                raise ConcurrencyError(f"execution {row['execution_id']} already exists") from exc
            conn.execute(SQL["insert_execution_input"], {**row, "compiled": compiled})
            if prepared is not None:
                self._apply(conn, [prepared])

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append in one transaction (see `Store.commit`)."""
        prepared = [prepare(append) for append in appends]
        if not prepared:
            return
        try:
            with self._transaction() as conn:
                self._apply(conn, prepared)
        except _Behind:
            self._refuse(prepared)

    def _refuse(self, prepared: Sequence[PreparedAppend]) -> NoReturn:
        """After a write found an execution moved on (and rolled back): the error naming
        every append that does not continue its execution."""
        with self._use() as conn:
            self._check(conn, prepared)
        ids = sorted({item.execution_id for item in prepared})
        raise ConcurrencyError(f"executions {ids} changed while being written", ids)

    @classmethod
    def _apply(cls, conn: sqlite3.Connection, prepared: Sequence[PreparedAppend]) -> None:
        """Write every append; an execution's row moves on only from the sequence its
        append continues (else `_Behind`, and the caller's transaction rolls back).
        Inputs already consumed refuse the commit before anything is written."""
        if queue.consumed_inputs(conn, inputs_to_check(prepared)):
            cls._check(conn, prepared)  # raises, naming them (and any append behind)
        for item in prepared:
            if not cls._write(conn, item):
                raise _Behind

    @staticmethod
    def _check(conn: sqlite3.Connection, prepared: Sequence[PreparedAppend]) -> None:
        """Every append continues its execution's stored last sequence (appends to one
        execution chain as they would one after another), or ConcurrencyError naming all
        that do not."""
        last: dict[str, int] = {}
        behind: list[tuple[PreparedAppend, int]] = []
        for item in prepared:
            current = last.get(item.execution_id)
            if current is None:
                row = conn.execute(SQL["select_last_seq"], (item.execution_id,)).fetchone()
                if row is None:
                    raise NotFoundError(f"execution {item.execution_id} not found")
                current = row[0]
            if current != item.expected_seq:
                behind.append((item, current))
            last[item.execution_id] = item.last_seq
        consumed = queue.consumed_inputs(conn, inputs_to_check(prepared))
        if behind or consumed:
            raise stale_all(behind, consumed)

    @staticmethod
    def _write(conn: sqlite3.Connection, item: PreparedAppend) -> bool:
        """Write one append; False (nothing of it written) when its execution is not at
        `expected_seq`, or does not exist."""
        row: dict[str, object] = {
            "last_seq": item.last_seq,
            "expected_seq": item.expected_seq,
            "now": item.now,
            "context": item.context,
            "execution_id": item.execution_id,
        }
        if item.status is None:
            moved = conn.execute(SQL["advance_execution"], row)
        else:
            row["status"] = item.status.value
            row["finished_at"] = item.now if item.finished else None
            moved = conn.execute(SQL["update_execution"], row)
        if moved.rowcount != 1:
            return False
        if item.events:
            conn.executemany(SQL["insert_event"], item.events)
        if item.steps:
            conn.executemany(SQL["upsert_step"], item.steps)
        queue.apply_queue(conn, item)
        if item.dead_letters or item.dead_letter_status:
            dlq.apply(conn, item, queue.db_now(conn))
        return True

    # --- the task queue ------------------------------------------------------------------

    def claim(
        self,
        worker_id: str,
        *,
        pool: str = "default",
        limit: int = 1,
        lease_s: float = 30.0,
        executions: Collection[str] | None = None,
    ) -> list[Lease]:
        """Lease up to `limit` ready tasks of `pool` (of `executions`, when given):
        priority DESC, not_before, insertion."""
        check_page(limit)
        if limit == 0 or (executions is not None and not executions):
            return []
        with self._transaction() as conn:
            return queue.claim(conn, worker_id, pool, limit, lease_s, executions=executions)

    def heartbeat(self, task_id: str, token: int, *, lease_s: float = 30.0) -> Heartbeat:
        """Extend the lease of the current holder; anyone else learns it is gone."""
        with self._transaction() as conn:
            return queue.heartbeat(conn, task_id, token, lease_s)

    def complete(self, task_id: str, token: int, outcome: dict[str, Any]) -> bool:
        """Mark the task done and post its OUTCOME input, for the current holder only."""
        payload = dumps(outcome)
        with self._transaction() as conn:
            return queue.complete(conn, task_id, token, payload)

    def complete_many(self, reports: Sequence[tuple[str, int, dict[str, Any]]]) -> set[str]:
        """`complete` for each report, in one transaction; the accepted task ids."""
        payloads = [(task_id, token, dumps(outcome)) for task_id, token, outcome in reports]
        with self._transaction() as conn:
            return {
                task_id
                for task_id, token, payload in payloads
                if queue.complete(conn, task_id, token, payload)
            }

    def complete_and_commit(
        self,
        task_id: str,
        token: int,
        append: Append,
        *,
        worker_id: str,
        lease: Sequence[str] = (),
        lease_s: float = 30.0,
    ) -> list[Lease] | None:
        """Mark the task done, apply `append` and lease `lease` to `worker_id`, in one
        transaction (see `Store.complete_and_commit`)."""
        prepared = prepare(append)
        try:
            with self._transaction() as conn:
                if not queue.mark_done(conn, task_id, token):
                    return None
                self._apply(conn, [prepared])
                return queue.lease_ids(conn, worker_id, lease, prepared.execution_id, lease_s)
        except _Behind:
            self._refuse([prepared])

    def maintain(self) -> None:
        """Nothing to do: no dead rows pile up that claims must step over."""

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Queue the held tasks again at once (see `Store.release`)."""
        with self._transaction() as conn:
            return queue.release(conn, held)

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Expire leases that ran out, oldest first, each with a LEASE_EXPIRED input."""
        check_page(limit)
        if executions is not None and not executions:
            return 0
        with self._transaction() as conn:
            return queue.reap_expired(conn, limit, executions)

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        with self._use() as conn:
            return queue.get_task(conn, task_id)

    # --- the inbox ------------------------------------------------------------------------

    def post_input(self, execution_id: str, kind: InputKind, payload: dict[str, Any]) -> int:
        """Add an input; NotFoundError if the execution does not exist."""
        kind, text = InputKind(kind), dumps(payload)
        with self._transaction() as conn:
            return queue.post_input(conn, execution_id, kind, text)

    def claim_inputs(
        self,
        owner: str,
        *,
        limit: int = 500,
        lease_s: float = 30.0,
        executions: Collection[str] | None = None,
    ) -> list[Input]:
        """Hold up to `limit` free (or no longer held) inputs for `lease_s`, oldest first."""
        check_page(limit)
        if executions is not None and not executions:
            return []
        with self._transaction() as conn:
            return queue.claim_inputs(conn, owner, limit, lease_s, executions)

    def open_holder(self, owner: str) -> LocalHolder:
        """A holder of inputs, gone once closed or once this process ends."""
        return LocalHolder(PROCESS_HOLDERS, owner)

    def release_orphaned_inputs(self) -> int:
        """Free the inputs of holders that are gone, judged by their process (a SQLite
        file is shared by the processes of one machine only)."""
        with self._use() as conn:
            gone = queue.orphaned_holders(conn, PROCESS_HOLDERS)
        if not gone:
            return 0
        with self._transaction() as conn:
            return queue.release_inputs(conn, gone)

    def wait_for(self, channel: str, timeout: float) -> bool:
        """No notifications in SQLite: sleep a poll interval (at most `timeout`), False."""
        check_channel(channel)
        time.sleep(max(0.0, min(timeout, POLL_S)))
        return False

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        self._connector.close()
