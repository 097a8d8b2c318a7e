"""The task queue and the inbox on PostgreSQL: claims, leases, outcomes, inputs.

Tasks are claimed with one `UPDATE ... FOR UPDATE SKIP LOCKED ... RETURNING` statement;
lease and schedule times come from the database clock. New inputs `NOTIFY noetl_inputs`,
handed-back tasks `NOTIFY noetl_tasks`, each after the writes they announce commit.
(The queue writes of a commit go with it: `noetl.store.postgres`.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from noetl.core import NotFoundError
from noetl.store._pg_connector import (
    NOTIFY_INPUTS,
    NOTIFY_TASKS,
    columns,
    epoch,
    epoch_or_none,
)
from noetl.store._pg_holder import FREE_INPUTS, GONE_HOLDERS, PgHolder
from noetl.store._pg_nul import json_in, json_out, pg_dumps
from noetl.store._rows import (
    TASK_COLUMNS,
    check_page,
    input_from_row,
    task_from_row,
    try_lease,
    undecodable_outcome,
)
from noetl.store.queries import QUERIES
from noetl.store.records import Heartbeat, Input, InputKind, Lease

SQL = QUERIES["postgres"]

Conn = psycopg.Connection[tuple[Any, ...]]
Use = Callable[[], AbstractContextManager[Conn]]


class PgQueue:
    """`LeasePort` (but the wait) and `InboxPort` (but the holders) on the store's pool,
    a part of `PostgresStore`: `_connection` gives a pooled connection, `_holders` the
    input holders opened on the store, by token (a holder's claims run on its own
    session)."""

    _connection: Use
    _holders: dict[str, PgHolder]

    def complete_many(self, reports: Sequence[tuple[str, int, dict[str, Any]]]) -> set[str]:
        """`complete` for every report in one statement; the accepted task ids."""
        if not reports:
            return set()
        arrays = columns([(task_id, token, pg_dumps(o)) for task_id, token, o in reports])
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(SQL["complete_many"], arrays)
                conn.execute(NOTIFY_INPUTS)
            return {row[0] for row in done.fetchall()}

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
        statement = SQL["claim"]
        if executions is not None:
            statement, params["executions"] = SQL["claim_scoped"], sorted(executions)
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
                    "lease_expires_at": epoch(expires),
                    "worker_id": holder,
                    "not_before": epoch(not_before),
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
                conn.cursor().executemany(SQL["poisoned"], poisoned)
            conn.execute(NOTIFY_INPUTS)

    def heartbeat(self, task_id: str, token: int, *, lease_s: float = 30.0) -> Heartbeat:
        """Extend a lease held with `token`; alive False when it is no longer held."""
        with self._connection() as conn:
            row = conn.execute(SQL["heartbeat"], (float(lease_s), task_id, token)).fetchone()
        return Heartbeat(alive=False) if row is None else Heartbeat(alive=True, cancel=row[0])

    def complete(self, task_id: str, token: int, outcome: dict[str, Any]) -> bool:
        """With the current token: mark the task done and post its outcome, atomically."""
        payload = pg_dumps(outcome)
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(SQL["complete"], (task_id, token, payload))
                conn.execute(NOTIFY_INPUTS)
            return done.fetchone() is not None

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Queue the held tasks again at once, in one statement (see `Store.release`)."""
        if not held:
            return set()
        with self._connection() as conn:
            with conn.pipeline():
                done = conn.execute(SQL["release"], columns(list(held)))
                conn.execute(NOTIFY_TASKS)
            return {row[0] for row in done.fetchall()}

    def maintain(self) -> None:
        """Vacuum the queue and the inbox. Their rows are rewritten row by row (queued,
        leased, done; posted, held, deleted) faster than autovacuum's round (a minute by
        default) clears the dead versions, and claims slow down stepping over them: a
        100,000-item loop cost 1.3x per item of a 10,000-item one without this, 1.1x with
        it. SKIP_LOCKED: another server vacuuming at the same time is not waited for."""
        with self._connection() as conn:
            conn.execute(SQL["vacuum_queue"])

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Expire leases past their time (database clock), posting LEASE_EXPIRED inputs."""
        check_page(limit)
        if limit == 0 or (executions is not None and not executions):
            return 0
        params: dict[str, Any] = {
            "limit": limit,
            "executions": None if executions is None else sorted(executions),
        }
        with self._connection() as conn:
            reaped = len(conn.execute(SQL["reap"], params).fetchall())
            if reaped:
                conn.execute(NOTIFY_INPUTS)
            return reaped

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        with self._connection() as conn:
            row = conn.execute(SQL["select_task"], (task_id,)).fetchone()
        if row is None:
            return None
        values = dict(zip(TASK_COLUMNS, row, strict=True))
        for column in ("lease_expires_at", "not_before"):
            values[column] = epoch_or_none(values[column])
        values["payload"] = json_out(values["payload"])
        return task_from_row(values)

    def post_input(self, execution_id: str, kind: InputKind, payload: dict[str, Any]) -> int:
        """Add an input for the orchestrators (and wake them); returns its id.
        NotFoundError if the execution does not exist."""
        values = (InputKind(kind).value, pg_dumps(payload), execution_id)
        with self._connection() as conn:
            with conn.pipeline():
                posted = conn.execute(SQL["post_input"], values)
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
        statement = SQL["claim_inputs"]
        if executions is not None:
            statement, params["executions"] = SQL["claim_inputs_scoped"], sorted(executions)
        holder = self._holders.get(owner)
        with self._connection() if holder is None else holder.connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        rows.sort(key=lambda row: row[0])
        names = ("id", "execution_id", "kind", "payload", "created_at")
        return [
            input_from_row(
                dict(zip(names, (*row[:3], json_out(row[3]), epoch(row[4])), strict=True))
            )
            for row in rows
        ]

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
