"""The distributed Store: PostgreSQL through a psycopg 3 connection pool.

Every server and worker shares one database; it is the system of record and the task
queue. Writes for one decision are one transaction that locks the executions it appends
to (`SELECT last_seq ... FOR NO KEY UPDATE`, in id order), so the per-execution sequence
stays gapless under any number of writers. Tasks are claimed with one
`UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING` statement; lease and schedule times
come from the database clock. Commits that queue tasks `NOTIFY noetl_tasks`, new inputs
`NOTIFY noetl_inputs`; `wait_for` listens on a dedicated connection and falls back to a
plain timeout (the caller polls) while it cannot.

Times are stored as timestamptz (microseconds) and handed out as epoch seconds. JSON
columns are JSONB: key order of stored objects is not kept, equality is; NaN and Infinity
cannot be stored (ValueError, nothing written). NUL characters, which neither JSONB nor
text can hold, are stored escaped and read back as they were (`noetl.store._pg_nul`), in
keys and values of every JSON column and in the free text of dead letters.

Errors: anything operational (server down, connection refused or lost, bad password, a
pool with no free connection) becomes StoreUnavailableError naming host, port and
database, never the password; a lost connection is retryable, and the pool replaces
broken connections, so a restarted server is picked up again without a restart of ours.

The pool lives in `_pg_connector`, what is written once for both SQL stores in
`noetl.store.managers`; the commit is here (its statements built in `_pg_commit`), the
queue and the inbox in `_pg_queue`, their statements in `sql/postgres_queue.sql`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from noetl.store._complete import check_distinct, create_each, one_by_one
from noetl.store._pg_commit import (
    REFUSED,
    Refused,
    check_latest,
    execution_row,
    new_row,
    one_statement,
    plain_starts,
    send,
    start,
    timestamps,
)
from noetl.store._pg_connector import (
    NOTIFY_TASKS,
    PgConnector,
    Target,
    columns,
    connect,
    epoch,
    parse_dsn,
    pipelined_transaction,
)
from noetl.store._pg_holder import PgHolder
from noetl.store._pg_listen import CHANNELS, Listener
from noetl.store._pg_nul import json_out, pg_dumps
from noetl.store._pg_partitions import PgPartitions
from noetl.store._pg_queue import PgQueue
from noetl.store._rows import (
    PreparedAppend,
    check_channel,
    inputs_to_check,
    lease_from_row,
    prepare,
    prepare_initial,
    stale_all,
)
from noetl.store.base import (
    Append,
    Completed,
    Completion,
    ConcurrencyError,
    ExecutionRecord,
    Lease,
    NewExecution,
    NotFoundError,
    StoreUnavailableError,
)
from noetl.store.managers import SqlStore
from noetl.store.migrate import migrate_postgres
from noetl.store.pg_create import migrate_schema, schema_status
from noetl.store.queries import QUERIES

SQL = QUERIES["postgres"]

__all__ = [
    "PostgresStore",
    "Target",
    "connect",
    "migrate_schema",
    "parse_dsn",
    "schema_status",
]

log = logging.getLogger("noetl.store.postgres")

Conn = psycopg.Connection[tuple[Any, ...]]
Cursor = psycopg.Cursor[tuple[Any, ...]]


class _LeaseLost(Exception):
    """The deciding worker's task is no longer leased with its token (rolls back)."""


class _Exists(Exception):
    """An execution of a batch to create exists already (rolls back)."""


# --- the store ---------------------------------------------------------------------------


class PostgresStore(SqlStore, PgQueue, PgPartitions):
    """Store in a PostgreSQL database, shared by every server and worker; thread-safe.

    The schema is brought up to date when the store opens (migrations under an advisory
    lock, so replicas starting together do not race).
    """

    # Called after a commit with the pool of each task it made claimable (`noetl.bus`).
    announce_tasks: Callable[[list[str]], None] | None = None

    def __init__(
        self, dsn: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0
    ) -> None:
        self._conninfo, self.target = parse_dsn(dsn)
        conn, _ = connect(dsn)
        try:
            with conn:
                migrate_postgres(conn)
        except psycopg.OperationalError as exc:
            raise self.target.unavailable(exc) from None
        except StoreUnavailableError as exc:
            raise StoreUnavailableError(f"{self.target}: {exc}") from exc
        self._connector = PgConnector(
            self._conninfo, self.target, min_size=min_size, max_size=max_size, timeout=timeout
        )
        super().__init__(self._connector)
        self._connection = self._connector.connection
        self._transaction = self._connector.in_transaction
        self._listener = Listener(self._conninfo)
        # Input holders opened on this store, by token (kept when closed: a closed
        # holder's token must not claim through the pool either).
        self._holders: dict[str, PgHolder] = {}

    def __repr__(self) -> str:
        return f"PostgresStore({self.target.url()!r})"

    # --- executions and events -----------------------------------------------------------

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
        prepared = [] if (p := prepare_initial(record, initial, pg_dumps)) is None else [p]
        try:
            self._create_pipelined(
                [new_row(record, compiled, latest)], prepared, wakes=self._wakes_workers(prepared)
            )
        except _Exists:
            raise ConcurrencyError(f"execution {record.execution_id} already exists") from None
        self._announce(prepared)

    def create_executions(self, items: Sequence[NewExecution]) -> list[Exception | None]:
        """Every execution in one transaction: their rows and first appends in ONE
        statement (`noetl_start`) when the appends are plain first ones, else in one
        pipelined transaction; when one cannot be created, each again on its own, which
        says which (see `Store.create_executions`)."""
        try:
            rows = [new_row(item.record, item.compiled, item.latest) for item in items]
            prepared = [
                p for item in items if (p := prepare_initial(item.record, item.initial, pg_dumps))
            ]
        except Exception:  # a value one of them cannot store: each says for itself
            return create_each(self.create_execution, items)
        wakes = self._wakes_workers(prepared)
        try:
            if plain_starts(prepared):
                with self._connection() as conn:
                    start(conn, [execution_row(row) for row in rows], prepared, wake=wakes)
            else:
                self._create_pipelined(rows, prepared, wakes=wakes)
        except StoreUnavailableError:  # the database: every start shares it
            raise
        except Exception:  # rolled back (an id exists, a value refused): each for itself
            return create_each(self.create_execution, items)
        self._announce(prepared)
        return [None] * len(items)

    def _create_pipelined(
        self, rows: list[dict[str, Any]], prepared: list[PreparedAppend], *, wakes: bool
    ) -> None:
        """New executions whose first appends need checks or rarer writes: their rows,
        then the appends, in one pipelined transaction."""
        with self._connection() as conn, conn.pipeline():
            with pipelined_transaction(conn):
                check_latest(conn, rows)
                inserted = [
                    conn.execute(SQL["insert_execution"], {**row, **timestamps(row)})
                    for row in rows
                ]
                if any(cursor.fetchone() is None for cursor in inserted):
                    raise _Exists
                if prepared:
                    self._initial(conn, prepared)
            if wakes:
                conn.execute(NOTIFY_TASKS)

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append in one transaction (see `Store.commit`): its checks and
        writes in one round trip (`_pg_commit.guard`); when the guard refuses it, again the slow
        way, which says why."""
        prepared = [prepare(append, pg_dumps) for append in appends]
        if not prepared:
            return
        wakes = self._wakes_workers(prepared)
        try:
            self._send(prepared, wake=wakes)
        except Refused:
            with self._connection() as conn, conn.pipeline():
                with pipelined_transaction(conn):
                    self._apply(conn, prepared)
                if wakes:
                    conn.execute(NOTIFY_TASKS)
        self._announce(prepared)

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
        transaction of one round trip (see `Store.complete_and_commit`); when the guard
        refuses it, again the slow way, which says why."""
        prepared = prepare(append, pg_dumps)
        leased = frozenset(lease)
        wakes = self._wakes_workers([prepared], leased)
        try:
            rows = self._send(
                [prepared],
                held=[(task_id, token)],
                lease=leased,
                worker_id=worker_id,
                lease_s=lease_s,
                wake=wakes,
            )
        except Refused:
            try:
                with self._connection() as conn, conn.pipeline():
                    with pipelined_transaction(conn):
                        done = conn.execute(SQL["done"], (task_id, token))
                        written = self._apply(
                            conn,
                            [prepared],
                            held=done,
                            lease=leased,
                            worker_id=worker_id,
                            lease_s=lease_s,
                        )
                    if wakes:
                        conn.execute(NOTIFY_TASKS)
                    rows = written.fetchall() if leased else []
            except _LeaseLost:
                return None
        self._announce([prepared], leased)
        # In the order asked for (RETURNING keeps none).
        order = {task_id: index for index, task_id in enumerate(lease)}
        rows.sort(key=lambda row: order[row[0]])
        return [self._lease_of(row) for row in rows]

    @staticmethod
    def _lease_of(row: tuple[Any, ...]) -> Lease:
        """A lease from a row `noetl_commit` returned for a task leased at once."""
        _, payload, attempt, lease_token, expires, holder = row
        return lease_from_row(
            {
                "payload": json_out(payload),
                "attempt": attempt,
                "lease_token": lease_token,
                "lease_expires_at": epoch(expires),
                "worker_id": holder,
            }
        )

    def continue_many(
        self, items: Sequence[Completion], *, worker_id: str, lease_s: float = 30.0
    ) -> list[Completed]:
        """Every completion in one transaction of one round trip: one `noetl_commit` with
        all their leases and sequences (see `Store.continue_many`). When its checks
        refuse, each again on its own (`complete_and_commit`), which says which."""
        check_distinct(items)
        if len(items) == 1:  # a quiet worker's one continuation: the one-task path
            return one_by_one(self.complete_and_commit, items, worker_id=worker_id, lease_s=lease_s)
        results: list[Completed] = [None] * len(items)
        batch: list[tuple[int, Completion, PreparedAppend]] = []
        for index, item in enumerate(items):
            try:
                batch.append((index, item, prepare(item.append, pg_dumps)))
            except Exception as exc:  # a value this completion cannot store: its own refusal
                results[index] = exc
        if not batch:
            return results
        prepared = [entry[2] for entry in batch]
        leased = frozenset(task_id for _, item, _ in batch for task_id in item.lease)
        wakes = self._wakes_workers(prepared, leased)
        try:
            rows = self._send(
                prepared,
                held=[(item.task_id, item.token) for _, item, _ in batch],
                lease=leased,
                worker_id=worker_id,
                lease_s=lease_s,
                wake=wakes,
            )
        except Refused:
            alone = one_by_one(
                self.complete_and_commit,
                [item for _, item, _ in batch],
                worker_id=worker_id,
                lease_s=lease_s,
            )
            for (index, _, _), result in zip(batch, alone, strict=True):
                results[index] = result
            return results
        except Exception as exc:  # the database: every completion of the batch shares it
            for index, _, _ in batch:
                results[index] = exc
            return results
        self._announce(prepared, leased)
        mine = {lease.task.task_id: lease for lease in map(self._lease_of, rows)}
        for index, item, _ in batch:
            results[index] = [mine[task_id] for task_id in item.lease if task_id in mine]
        return results

    def _send(
        self,
        prepared: list[PreparedAppend],
        *,
        held: Sequence[tuple[str, int]] = (),
        lease: frozenset[str] = frozenset(),
        worker_id: str | None = None,
        lease_s: float = 30.0,
        wake: bool = False,
    ) -> list[tuple[Any, ...]]:
        """A checked commit in one round trip: `noetl_commit` alone (ONE statement, its
        own transaction), or with the rarer writes behind it in one pipelined transaction;
        the rows of the tasks leased at once. `Refused` when its checks refused it (nothing
        of it was written)."""

        def sent(conn: Conn) -> Cursor:
            return send(
                conn, prepared, held=held, lease=lease, worker_id=worker_id, lease_s=lease_s,
                wake=wake,
            )  # fmt: skip

        try:
            with self._connection() as conn:
                if one_statement(prepared):
                    return sent(conn).fetchall()
                with conn.pipeline():
                    with pipelined_transaction(conn):
                        written = sent(conn)
                    return written.fetchall()
        except psycopg.Error as exc:
            if exc.sqlstate == REFUSED:
                raise Refused from None
            raise

    def _initial(self, conn: Conn, prepared: list[PreparedAppend]) -> None:
        """The first appends of executions this transaction just inserted: nobody else
        can see their rows yet and they stand at sequence 0, so there is nothing to lock
        or check when each starts at 0 and consumes no input (else `_apply` checks, and
        refuses what does not start at 0)."""
        if any(item.expected_seq != 0 for item in prepared) or inputs_to_check(prepared):
            self._apply(conn, prepared)
        else:
            send(conn, prepared, checked=False)

    def _apply(
        self,
        conn: Conn,
        prepared: list[PreparedAppend],
        *,
        held: Cursor | None = None,
        lease: frozenset[str] = frozenset(),
        worker_id: str | None = None,
        lease_s: float = 30.0,
    ) -> Cursor:
        """Check every expected_seq under the executions' row locks, then queue every write
        (in pipeline mode: they go out with the commit). `held`: the cursor of a statement
        sent before the lock whose empty answer means "the worker's lease is gone"
        (_LeaseLost, raised before anything is written). `lease`, `worker_id`, `lease_s`:
        tasks leased at once (`_pg_commit.send`); the returned cursor yields them."""
        ids = sorted({item.execution_id for item in prepared})
        # Locked in id order, so two commits over the same executions cannot deadlock.
        locked = conn.execute(SQL["lock_executions"], (ids,))
        # Under the same locks (every commit that consumes an execution's inputs holds
        # it), the inputs decided on that another commit consumed already; same round trip.
        check = inputs_to_check(prepared)
        missing = conn.execute(SQL["consumed_inputs"], columns(check)) if check else None
        if held is not None and held.fetchone() is None:
            raise _LeaseLost("the task's lease is no longer held")
        last: dict[str, int] = dict(locked.fetchall())
        behind: list[tuple[PreparedAppend, int]] = []
        for item in prepared:
            current = last.get(item.execution_id)
            if current is None:
                raise NotFoundError(f"execution {item.execution_id} not found")
            if current != item.expected_seq:
                behind.append((item, current))
            last[item.execution_id] = item.last_seq
        consumed = [] if missing is None else [(int(i), e) for i, e in missing.fetchall()]
        if behind or consumed:
            raise stale_all(behind, consumed)
        return send(
            conn, prepared, checked=False, lease=lease, worker_id=worker_id, lease_s=lease_s
        )

    def _announce(
        self, prepared: list[PreparedAppend], leased: frozenset[str] = frozenset()
    ) -> None:
        """Tell the task bus (when one is attached) of the tasks claimable now, once their
        commit is done: a pool per task."""
        if self.announce_tasks is None:
            return
        pools = [
            row[3]
            for item in prepared
            for row in item.enqueue
            if row[0] not in leased and row[7] <= 0
        ]
        if pools:
            self.announce_tasks(pools)

    @staticmethod
    def _wakes_workers(
        prepared: list[PreparedAppend], leased: frozenset[str] = frozenset()
    ) -> bool:
        """Whether the appends make tasks claimable (tasks leased at once by the deciding
        worker need nobody woken)."""
        return any(
            item.requeue or any(row[0] not in leased for row in item.enqueue) for item in prepared
        )

    # --- input holders and notifications ----------------------------------------------------

    def open_holder(self, owner: str) -> PgHolder:
        """A holder of inputs: a session of its own holding its advisory lock."""
        holder = PgHolder(self._conninfo, owner, self.target.unavailable)
        self._holders[holder.token] = holder
        return holder

    def wait_for(self, channel: str, timeout: float) -> bool:
        """Sleep until a NOTIFY on `channel` ("tasks" or "inputs") or the timeout."""
        check_channel(channel)
        return self._listener.wait(CHANNELS[channel], timeout)

    def close(self) -> None:
        """Stop listening and close every connection; the store cannot be used afterwards."""
        for holder in list(self._holders.values()):
            holder.close()
        self._listener.close()
        self._connector.close()
