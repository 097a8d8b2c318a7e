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
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from noetl.store import _pg_dlq as dlq
from noetl.store import _pg_sql as sql
from noetl.store._pg_connector import (
    NOTIFY_INPUTS,
    NOTIFY_TASKS,
    PgConnector,
    Target,
    connect,
    parse_dsn,
)
from noetl.store._pg_holder import FREE_INPUTS, GONE_HOLDERS, PgHolder
from noetl.store._pg_listen import CHANNELS, Listener
from noetl.store._pg_nul import json_in, json_out, pg_dumps
from noetl.store._rows import (
    TASK_COLUMNS,
    PreparedAppend,
    check_channel,
    check_page,
    input_from_row,
    inputs_to_check,
    lease_from_row,
    prepare,
    prepare_initial,
    record_to_row,
    stale_all,
    task_from_row,
    try_lease,
    undecodable_outcome,
)
from noetl.store.base import (
    Append,
    ConcurrencyError,
    ExecutionRecord,
    Heartbeat,
    Input,
    InputKind,
    Lease,
    NotFoundError,
    StoreUnavailableError,
)
from noetl.store.managers.auth import Sessions, Tokens
from noetl.store.managers.catalog import Catalog
from noetl.store.managers.credentials import Credentials
from noetl.store.managers.dead_letters import DeadLetters
from noetl.store.managers.executions import Executions
from noetl.store.migrate import (
    Migration,
    SchemaStatus,
    discover,
    migrate_postgres,
    status_postgres,
)

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


# --- values ------------------------------------------------------------------------------


def _columns(
    rows: Sequence[tuple[Any, ...]], *, time_columns: tuple[int, ...] = ()
) -> list[list[Any]]:
    """Rows as one list per column (the arrays of an `unnest` statement); the columns at
    `time_columns` hold epoch seconds, passed as timestamps."""
    columns: list[list[Any]] = [list(column) for column in zip(*rows, strict=True)]
    for index in time_columns:
        columns[index] = [_ts(value) for value in columns[index]]
    return columns


def _write_queue(cur: Cursor, item: PreparedAppend) -> None:
    """The rarer queue writes of one append: requeues, cancels, timers (its own rows only)."""
    eid = item.execution_id
    if item.requeue:
        cur.executemany(
            sql.REQUEUE, [(attempt, float(delay), tid, eid) for tid, attempt, delay in item.requeue]
        )
    if item.cancel_tasks:
        cur.execute(sql.CANCEL_TASKS, (item.cancel_tasks, eid))
    if item.timers:
        cur.executemany(sql.INSERT_TIMER, [(eid, payload, delay) for delay, payload in item.timers])


def _ts(seconds: float) -> datetime:
    """Epoch seconds -> timestamptz (rounded to the microsecond, as PostgreSQL keeps it)."""
    return datetime.fromtimestamp(seconds, UTC)


def _epoch(value: datetime) -> float:
    return value.timestamp()


def _epoch_or_none(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def schema_status(dsn: str) -> SchemaStatus:
    """Applied and pending schema versions of a PostgreSQL database; changes nothing."""
    conn, target = connect(dsn)
    try:
        with conn:
            return status_postgres(conn)
    except psycopg.OperationalError as exc:
        raise target.unavailable(exc) from None


def migrate_schema(dsn: str) -> list[Migration]:
    """Apply pending migrations to a PostgreSQL database; the migrations applied."""
    conn, target = connect(dsn)
    try:
        with conn:
            applied = set(migrate_postgres(conn))
    except psycopg.OperationalError as exc:
        raise target.unavailable(exc) from None
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(f"{target}: {exc}", retryable=exc.retryable) from exc
    return [m for m in discover("postgres") if m.version in applied]


class _LeaseLost(Exception):
    """The deciding worker's task is no longer leased with its token (rolls back)."""


# --- the store ---------------------------------------------------------------------------


class PostgresStore:
    """Store in a PostgreSQL database, shared by every server and worker; thread-safe.

    The schema is brought up to date when the store opens (migrations under an advisory
    lock, so replicas starting together do not race).
    """

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
        self._db = PgConnector(
            self._conninfo, self.target, min_size=min_size, max_size=max_size, timeout=timeout
        )
        self._connection = self._db.connection
        self._transaction = self._db.in_transaction
        self._listener = Listener(self._conninfo)
        # Input holders opened on this store, by token (kept when closed: a closed
        # holder's token must not claim through the pool either).
        self._holders: dict[str, PgHolder] = {}
        # The parts written once over the connector (noetl.store.managers).
        catalog = Catalog(self._db)
        self.register_playbook = catalog.register_playbook
        self.get_playbook = catalog.get_playbook
        self.list_playbooks = catalog.list_playbooks
        self.register_worker = catalog.register_worker
        self.worker_heartbeat = catalog.worker_heartbeat
        self.request_drain = catalog.request_drain
        self.list_workers = catalog.list_workers
        self.stats = catalog.stats
        executions = Executions(self._db)
        self.get_compiled = executions.get_compiled
        self.load_events = executions.load_events
        self.get_execution = executions.get_execution
        self.execution_family = executions.execution_family
        self.list_executions = executions.list_executions
        self.get_steps = executions.get_steps
        dead_letters = DeadLetters(self._db)
        self.list_dead_letters = dead_letters.list_dead_letters
        self.get_dead_letter = dead_letters.get_dead_letter
        self.dead_letter_counts = dead_letters.dead_letter_counts
        self.post_replay = dead_letters.post_replay
        self.discard_dead_letter = dead_letters.discard_dead_letter
        self.tokens = Tokens(self._db)
        self.sessions = Sessions(self._db)
        self.credentials = Credentials(self._db)

    def __repr__(self) -> str:
        return f"PostgresStore({self.target.url()!r})"

    # --- executions and events -----------------------------------------------------------

    def create_execution(
        self, record: ExecutionRecord, initial: Append | None = None, *, compiled: str | None = None
    ) -> None:
        """Insert a new execution row and apply `initial`, in one transaction;
        ConcurrencyError if the id exists or `initial` does not start at sequence 0."""
        row = record_to_row(record, pg_dumps)
        for column in ("created_at", "updated_at", "finished_at"):
            if row[column] is not None:
                row[column] = _ts(row[column])
        row["compiled"] = compiled
        prepared = prepare_initial(record, initial, pg_dumps)
        with self._connection() as conn, conn.pipeline():
            with conn.transaction():
                if conn.execute(sql.INSERT_EXECUTION, row).fetchone() is None:
                    raise ConcurrencyError(f"execution {record.execution_id} already exists")
                if prepared is not None:
                    self._apply(conn, [prepared])
            if prepared is not None and self._wakes_workers([prepared]):
                conn.execute(NOTIFY_TASKS)

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append in one transaction (see `Store.commit`)."""
        prepared = [prepare(append, pg_dumps) for append in appends]
        if not prepared:
            return
        with self._connection() as conn, conn.pipeline():
            with conn.transaction():
                self._apply(conn, prepared)
            if self._wakes_workers(prepared):
                conn.execute(NOTIFY_TASKS)

    def complete_many(self, reports: Sequence[tuple[str, int, dict[str, Any]]]) -> set[str]:
        """`complete` for every report in one statement; the accepted task ids."""
        if not reports:
            return set()
        columns = _columns([(task_id, token, pg_dumps(o)) for task_id, token, o in reports])
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(sql.COMPLETE_MANY, columns)
                conn.execute(NOTIFY_INPUTS)
            return {row[0] for row in done.fetchall()}

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
        transaction of two round trips (see `Store.complete_and_commit`)."""
        prepared = prepare(append, pg_dumps)
        rows: list[tuple[Any, ...]] = []
        try:
            with self._connection() as conn, conn.pipeline():
                with conn.transaction():
                    # Sent together with the row lock of `_apply`: one round trip for both.
                    done = conn.execute(sql.DONE, (task_id, token))
                    self._apply(conn, [prepared], held=done)
                    if lease:
                        cur = conn.execute(
                            sql.LEASE_IDS,
                            (worker_id, float(lease_s), list(lease), prepared.execution_id),
                        )
                if self._wakes_workers([prepared], frozenset(lease)):
                    conn.execute(NOTIFY_TASKS)
                # The writes, the leases, COMMIT and a notification went out together.
                if lease:
                    rows = cur.fetchall()
        except _LeaseLost:
            return None
        return [
            lease_from_row(
                {
                    "payload": json_out(payload),
                    "attempt": attempt,
                    "lease_token": lease_token,
                    "lease_expires_at": _epoch(expires),
                    "worker_id": holder,
                }
            )
            for payload, attempt, lease_token, expires, holder in rows
        ]

    def _apply(
        self,
        conn: Conn,
        prepared: list[PreparedAppend],
        *,
        held: Cursor | None = None,
    ) -> None:
        """Check every expected_seq under the executions' row locks, then queue every write
        (in pipeline mode: they go out with the commit). `held`: the cursor of a statement
        sent before the lock whose empty answer means "the worker's lease is gone"
        (_LeaseLost, raised before anything is written)."""
        ids = sorted({item.execution_id for item in prepared})
        # Locked in id order, so two commits over the same executions cannot deadlock.
        locked = conn.execute(sql.LOCK_EXECUTIONS, (ids,))
        # Under the same locks (every commit that consumes an execution's inputs holds
        # it), the inputs decided on that another commit consumed already; same round trip.
        check = inputs_to_check(prepared)
        missing = conn.execute(sql.CONSUMED_INPUTS, _columns(check)) if check else None
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
        with conn.cursor() as cur:
            self._write(cur, prepared)

    @staticmethod
    def _wakes_workers(
        prepared: list[PreparedAppend], leased: frozenset[str] = frozenset()
    ) -> bool:
        """Whether the appends make tasks claimable (tasks leased at once by the deciding
        worker need nobody woken)."""
        return any(
            item.requeue or any(row[0] not in leased for row in item.enqueue) for item in prepared
        )

    @staticmethod
    def _write(cur: Cursor, prepared: list[PreparedAppend]) -> None:
        """Queue the writes of every append: one statement per kind of row."""
        events = [row for item in prepared for row in item.events]
        if events:
            cur.execute(sql.INSERT_EVENTS, _columns(events, time_columns=(3,)), binary=True)
        # Appends to one execution chain: its row ends as the last one leaves it.
        rows: dict[str, tuple[Any, ...]] = {}
        for item in prepared:
            old = rows.get(item.execution_id)
            status, finished, context = (None, None, None) if old is None else old[3:]
            if item.status is not None:
                status = item.status.value
                finished = _ts(item.now) if item.finished else None
            if item.context is not None:
                context = item.context
            rows[item.execution_id] = (
                item.execution_id,
                item.last_seq,
                _ts(item.now),
                status,
                finished,
                context,
            )
        cur.execute(sql.UPDATE_EXECUTIONS, _columns(list(rows.values())), binary=True)
        steps = {
            (e, step): (e, step, status, _ts(now))
            for item in prepared
            for e, step, status, now in item.steps
        }
        if steps:
            cur.execute(sql.UPSERT_STEPS, _columns(list(steps.values())), binary=True)
        tasks = {row[0]: row for item in prepared for row in item.enqueue}
        if tasks:
            cur.execute(
                sql.ENQUEUE_ALL,
                _columns([(*row[:7], float(row[7])) for row in tasks.values()]),
                binary=True,
            )
        for item in prepared:
            if item.requeue or item.cancel_tasks or item.timers:
                _write_queue(cur, item)
            if item.dead_letters or item.dead_letter_status:
                dlq.write(cur, item)
        done = [(input_id, item.execution_id) for item in prepared for input_id in item.inputs_done]
        if done:
            cur.execute(sql.DELETE_ALL_INPUTS, _columns(done))

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
        """Lease up to `limit` due tasks of `pool` (of `executions`, when given), best
        first, in one statement."""
        check_page(limit)
        if limit == 0 or (executions is not None and not executions):
            return []
        params: dict[str, Any] = {
            "pool": pool,
            "limit": limit,
            "worker_id": worker_id,
            "lease_s": float(lease_s),
        }
        statement = sql.CLAIM
        if executions is not None:
            statement, params["executions"] = sql.CLAIM_SCOPED, sorted(executions)
        with self._connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        # RETURNING does not keep the order of the inner SELECT.
        rows.sort(key=lambda row: (-row[5], row[6], row[7]))
        leases: list[Lease] = []
        poisoned: list[tuple[str, int, str]] = []
        for payload, attempt, token, expires, holder, _, not_before, _, task_id, _ in rows:
            lease = try_lease(
                {
                    "payload": json_out(payload),
                    "attempt": attempt,
                    "lease_token": token,
                    "lease_expires_at": _epoch(expires),
                    "worker_id": holder,
                    "not_before": _epoch(not_before),
                }
            )
            if isinstance(lease, Lease):
                leases.append(lease)
            else:
                poisoned.append((task_id, token, json_in(undecodable_outcome(task_id, lease))))
        if poisoned:
            self._report_poisoned(poisoned)
        return leases

    def _report_poisoned(self, poisoned: list[tuple[str, int, str]]) -> None:
        """Claimed tasks that cannot be decoded: done at once, reported failed."""
        with self._connection() as conn:
            with conn.transaction():
                conn.cursor().executemany(sql.POISONED, poisoned)
            conn.execute(NOTIFY_INPUTS)

    def heartbeat(self, task_id: str, token: int, *, lease_s: float = 30.0) -> Heartbeat:
        """Extend a lease held with `token`; alive False when it is no longer held."""
        with self._connection() as conn:
            row = conn.execute(sql.HEARTBEAT, (float(lease_s), task_id, token)).fetchone()
        return Heartbeat(alive=False) if row is None else Heartbeat(alive=True, cancel=row[0])

    def complete(self, task_id: str, token: int, outcome: dict[str, Any]) -> bool:
        """With the current token: mark the task done and post its outcome, atomically."""
        payload = pg_dumps(outcome)
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(sql.COMPLETE, (task_id, token, payload))
                conn.execute(NOTIFY_INPUTS)
            return done.fetchone() is not None

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Queue the held tasks again at once, in one statement (see `Store.release`)."""
        if not held:
            return set()
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(sql.RELEASE, _columns(list(held)))
                conn.execute(NOTIFY_TASKS)
            return {row[0] for row in done.fetchall()}

    def maintain(self) -> None:
        """Vacuum the queue and the inbox. Their rows are rewritten row by row (queued,
        leased, done; posted, held, deleted) faster than autovacuum's round (a minute by
        default) clears the dead versions, and claims slow down stepping over them: a
        100,000-item loop cost 1.3x per item of a 10,000-item one without this, 1.1x with
        it. SKIP_LOCKED: another server vacuuming at the same time is not waited for."""
        with self._connection() as conn:
            conn.execute(b"VACUUM (SKIP_LOCKED) task_queue, inbox")

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Expire leases past their time (database clock), posting LEASE_EXPIRED inputs."""
        check_page(limit)
        if limit == 0 or (executions is not None and not executions):
            return 0
        params: dict[str, Any] = {"limit": limit}
        statement = sql.REAP
        if executions is not None:
            statement, params["executions"] = sql.REAP_SCOPED, sorted(executions)
        with self._connection() as conn:
            reaped = len(conn.execute(statement, params).fetchall())
            if reaped:
                conn.execute(NOTIFY_INPUTS)
            return reaped

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        with self._connection() as conn:
            row = conn.execute(sql.SELECT_TASK, (task_id,)).fetchone()
        if row is None:
            return None
        values = dict(zip(TASK_COLUMNS, row, strict=True))
        for column in sql.TIME_COLUMNS:
            values[column] = _epoch_or_none(values[column])
        values["payload"] = json_out(values["payload"])
        return task_from_row(values)

    # --- the inbox -----------------------------------------------------------------------

    def post_input(self, execution_id: str, kind: InputKind, payload: dict[str, Any]) -> int:
        """Add an input for the orchestrators (and wake them); returns its id.
        NotFoundError if the execution does not exist."""
        values = (InputKind(kind).value, pg_dumps(payload), execution_id)
        with self._connection() as conn:
            with conn.pipeline():
                posted = conn.execute(sql.POST_INPUT, values)
                conn.execute(NOTIFY_INPUTS)
            row = posted.fetchone()
        if row is None:
            raise NotFoundError(f"execution {execution_id} not found")
        return int(row[0])

    def claim_inputs(
        self,
        owner: str,
        *,
        limit: int = 500,
        lease_s: float = 30.0,
        executions: Collection[str] | None = None,
    ) -> list[Input]:
        """Hold up to `limit` free inputs (of `executions`, when given) for `lease_s`,
        oldest first; a holder's claims run on its own session (`noetl.store._pg_holder`)."""
        check_page(limit)
        if limit == 0 or (executions is not None and not executions):
            return []
        params: dict[str, Any] = {"limit": limit, "owner": owner, "lease_s": float(lease_s)}
        statement = sql.CLAIM_INPUTS
        if executions is not None:
            statement, params["executions"] = sql.CLAIM_INPUTS_SCOPED, sorted(executions)
        holder = self._holders.get(owner)
        with self._connection() if holder is None else holder.connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        rows.sort(key=lambda row: row[0])
        columns = ("id", "execution_id", "kind", "payload", "created_at")
        return [
            input_from_row(
                dict(zip(columns, (*row[:3], json_out(row[3]), _epoch(row[4])), strict=True))
            )
            for row in rows
        ]

    def open_holder(self, owner: str) -> PgHolder:
        """A holder of inputs: a session of its own holding its advisory lock."""
        holder = PgHolder(self._conninfo, owner, self.target.unavailable)
        self._holders[holder.token] = holder
        return holder

    def release_orphaned_inputs(self) -> int:
        """Free the inputs of holders whose lock is free (their session ended)."""
        with self._connection() as conn:
            gone = [row[0] for row in conn.execute(GONE_HOLDERS).fetchall()]
            if not gone:
                return 0
            freed = len(conn.execute(FREE_INPUTS, (gone,)).fetchall())
            if freed:
                conn.execute(NOTIFY_INPUTS)
        return freed

    def wait_for(self, channel: str, timeout: float) -> bool:
        """Sleep until a NOTIFY on `channel` ("tasks" or "inputs") or the timeout."""
        check_channel(channel)
        return self._listener.wait(CHANNELS[channel], timeout)

    def close(self) -> None:
        """Stop listening and close every connection; the store cannot be used afterwards."""
        for holder in list(self._holders.values()):
            holder.close()
        self._listener.close()
        self._db.close()
