"""An in-process Store for unit tests: dicts behind one lock, same contract as SQLite.

Values are kept as JSON text, exactly as the databases keep them, so a test that passes
here does not depend on sharing mutable objects with the store. The clock of leases, holds,
delays and heartbeats is `clock` (`time.time` by default), read under the lock.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Collection, Sequence
from typing import Any

from noetl.store._complete import OneAtATime
from noetl.store._credentials import MemoryCredentials
from noetl.store._holders import LocalHolder, LocalHolders, parse
from noetl.store._json import dumps
from noetl.store._memory_admin import MemoryAdmin
from noetl.store._memory_auth import MemorySessions, MemoryTokens
from noetl.store._memory_checkpoints import MemoryCheckpoints
from noetl.store._memory_results import MemoryResults
from noetl.store._memory_retention import MemoryRetention
from noetl.store._memory_schedules import MemorySchedules
from noetl.store._rows import (
    CHANNELS,
    DLQ_COLUMNS,
    EventRow,
    PreparedAppend,
    check_page,
    expired_payload,
    input_from_row,
    inputs_to_check,
    lease_from_row,
    prepare,
    prepare_initial,
    record_to_row,
    stale,
    stale_all,
    task_from_row,
    try_lease,
    undecodable_outcome,
)
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
    PlaybookRecord,
    StalePlaybookError,
    TaskStatus,
    WorkerRecord,
)


class MemoryStore(OneAtATime, MemoryAdmin, MemoryRetention):
    """Store kept in dicts; thread-safe; nothing survives the process."""

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # Insertion order of `_executions` is creation order (the tie-break of "newest").
        self._executions: dict[str, dict[str, Any]] = {}
        self._events: dict[str, list[EventRow]] = {}
        self._steps: dict[str, dict[str, str]] = {}
        self._compiled: dict[str, str | None] = {}
        # task_queue rows (TASK_COLUMNS plus "order", the insertion tie-break of claims).
        self._tasks: dict[str, dict[str, Any]] = {}
        self._task_order = itertools.count()
        # inbox rows by id; ids only grow, so dict order is oldest first.
        self._inbox: dict[int, dict[str, Any]] = {}
        self._input_ids = itertools.count(1)
        self._playbooks: dict[str, list[PlaybookRecord]] = {}
        self._workers: dict[str, WorkerRecord] = {}
        # dlq rows by message id (DLQ_COLUMNS, JSON encoded, plus updated_at)
        self._dlq: dict[str, dict[str, Any]] = {}
        # API tokens and sessions, behind a lock of their own.
        auth_lock = threading.Lock()
        self.tokens = MemoryTokens(auth_lock)
        self.sessions = MemorySessions(auth_lock)
        self.credentials = MemoryCredentials(auth_lock)
        self.results = MemoryResults(threading.Lock())
        self.checkpoints = MemoryCheckpoints(threading.Lock(), clock)
        self.schedules = MemorySchedules(clock)
        self._wakeups = {channel: threading.Condition() for channel in CHANNELS}
        # Tokens of the input holders open on this store (all of them live in this process).
        self._holders = LocalHolders()

    def create_execution(
        self,
        record: ExecutionRecord,
        initial: Append | None = None,
        *,
        compiled: str | None = None,
        latest: int | None = None,
    ) -> None:
        """Insert a new execution row (and apply `initial`); ConcurrencyError if the id
        exists or `initial` does not start at sequence 0, StalePlaybookError if `latest`
        is not the latest version of the playbook."""
        row = record_to_row(record)
        prepared = prepare_initial(record, initial)
        with self._lock:
            if record.execution_id in self._executions:
                raise ConcurrencyError(f"execution {record.execution_id} already exists")
            if latest is not None and record.playbook_path is not None:
                versions = self._playbooks.get(record.playbook_path)
                if versions and versions[-1].version > latest:
                    raise StalePlaybookError(record.playbook_path, latest)
            if prepared is not None and prepared.expected_seq != 0:
                raise stale(prepared, 0)
            self._executions[record.execution_id] = row
            self._compiled[record.execution_id] = compiled
            self._events[record.execution_id] = []
            self._steps[record.execution_id] = {}
            if prepared is not None:
                self._apply(prepared, self._clock())
        if prepared is not None and prepared.wakes_workers:
            self._notify("tasks")

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append atomically (validate all, then write all)."""
        prepared = [prepare(append) for append in appends]
        with self._lock:
            self._check(prepared)
            now = self._clock()
            for item in prepared:
                self._apply(item, now)
        if any(item.wakes_workers for item in prepared):
            self._notify("tasks")

    def _check(self, prepared: list[PreparedAppend]) -> None:
        # Track last_seq as the earlier appends of this commit would leave it, so two
        # appends to one execution in one commit chain like they do in a transaction.
        last: dict[str, int] = {}
        behind: list[tuple[PreparedAppend, int]] = []
        for item in prepared:
            row = self._executions.get(item.execution_id)
            if row is None:
                raise NotFoundError(f"execution {item.execution_id} not found")
            current = last.get(item.execution_id, row["last_seq"])
            if current != item.expected_seq:
                behind.append((item, current))
            last[item.execution_id] = item.last_seq
        consumed = [
            (input_id, execution_id)
            for input_id, execution_id in inputs_to_check(prepared)
            if self._inbox.get(input_id, {}).get("execution_id") != execution_id
        ]
        if behind or consumed:
            raise stale_all(behind, consumed)

    def _apply(self, item: PreparedAppend, now: float) -> None:
        row = self._executions[item.execution_id]
        self._events[item.execution_id].extend(item.events)
        row["last_seq"] = item.last_seq
        row["updated_at"] = item.now
        if item.status is not None:
            row["status"] = item.status.value
            row["finished_at"] = item.now if item.finished else None
        if item.context is not None:
            row["context"] = item.context
        steps = self._steps[item.execution_id]
        for _, step, status, _ in item.steps:
            steps[step] = status
        self._apply_queue(item, now)

    def _apply_queue(self, item: PreparedAppend, now: float) -> None:
        for task_id, execution_id, step, pool, priority, attempt, payload, delay in item.enqueue:
            old = self._tasks.get(task_id)
            # Enqueueing an id again (a step run again) reuses the row: the token keeps
            # growing, so a holder of the old lease stays fenced off. A new row starts at
            # the execution's floor (its highest token a prune deleted).
            self._tasks[task_id] = {
                "task_id": task_id,
                "execution_id": execution_id,
                "step": step,
                "pool": pool,
                "priority": priority,
                "status": TaskStatus.QUEUED,
                "attempt": attempt,
                "lease_token": (
                    self._executions[execution_id].get("token_floor", 0)
                    if old is None
                    else old["lease_token"]
                ),
                "lease_expires_at": None,
                "worker_id": None,
                "cancel_requested": False,
                "not_before": now + delay,
                "payload": payload,
                "order": next(self._task_order) if old is None else old["order"],
            }
        for task_id, attempt, delay in item.requeue:
            row = self._own_task(item.execution_id, task_id)
            if row is not None:
                row.update(
                    status=TaskStatus.QUEUED,
                    attempt=attempt,
                    not_before=now + delay,
                    lease_expires_at=None,
                    worker_id=None,
                    cancel_requested=False,
                )
        for task_id in item.cancel_tasks:
            row = self._own_task(item.execution_id, task_id)
            if row is None:
                continue
            if row["status"] == TaskStatus.QUEUED:
                row["status"] = TaskStatus.CANCELED
            elif row["status"] == TaskStatus.LEASED:
                row["cancel_requested"] = True
        for input_id in item.inputs_done:
            held = self._inbox.get(input_id)
            if held is not None and held["execution_id"] == item.execution_id:
                del self._inbox[input_id]
        for delay, payload in item.timers:
            input_id = self._add_input(item.execution_id, InputKind.TIMER, payload, now)
            self._inbox[input_id].update(claimed_by="timer", claimed_until=now + delay)
        self._apply_dead_letters(item, now)

    def _apply_dead_letters(self, item: PreparedAppend, now: float) -> None:
        for row in item.dead_letters:
            entry = dict(zip(DLQ_COLUMNS, row, strict=True))
            old = self._dlq.get(entry["message_id"])
            if old is not None:  # failed again after a replay: pending again
                entry.update(first_seen=old["first_seen"], replays=old["replays"])
            self._dlq[entry["message_id"]] = {**entry, "updated_at": now}
        for message_id, status in item.dead_letter_status:
            found = self._dlq.get(message_id)
            if found is not None:
                found.update(status=status, updated_at=now)

    def _own_task(self, execution_id: str, task_id: str) -> dict[str, Any] | None:
        """The task row, if it belongs to `execution_id` (an append touches only its own)."""
        row = self._tasks.get(task_id)
        return row if row is not None and row["execution_id"] == execution_id else None

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
        with self._lock:
            now = self._clock()
            ready = [
                row
                for row in self._tasks.values()
                if row["pool"] == pool
                and row["status"] == TaskStatus.QUEUED
                and row["not_before"] <= now
                and (executions is None or row["execution_id"] in executions)
            ]
            ready.sort(key=lambda row: (-row["priority"], row["not_before"], row["order"]))
            leases = []
            poisoned = False
            for row in ready[:limit]:
                row.update(
                    status=TaskStatus.LEASED,
                    worker_id=worker_id,
                    lease_token=row["lease_token"] + 1,
                    lease_expires_at=now + lease_s,
                )
                lease = try_lease(row)
                if isinstance(lease, Lease):
                    leases.append(lease)
                    continue
                # A poison message: done at once, reported failed for the orchestrator.
                row["status"] = TaskStatus.DONE
                outcome = undecodable_outcome(row["task_id"], lease)
                self._add_input(row["execution_id"], InputKind.OUTCOME, outcome, now)
                poisoned = True
        if poisoned:
            self._notify("inputs")
        return leases

    def _held(self, task_id: str, token: int) -> dict[str, Any] | None:
        row = self._tasks.get(task_id)
        if row is None or row["status"] != TaskStatus.LEASED or row["lease_token"] != token:
            return None
        return row

    def heartbeat(self, task_id: str, token: int, *, lease_s: float = 30.0) -> Heartbeat:
        """Extend the lease of the current holder; anyone else learns it is gone."""
        with self._lock:
            row = self._held(task_id, token)
            if row is None:
                return Heartbeat(alive=False)
            row["lease_expires_at"] = self._clock() + lease_s
            return Heartbeat(alive=True, cancel=row["cancel_requested"])

    def complete(self, task_id: str, token: int, outcome: dict[str, Any]) -> bool:
        """Mark the task done and post its OUTCOME input, for the current holder only."""
        return bool(self.complete_many([(task_id, token, outcome)]))

    def complete_many(self, reports: Sequence[tuple[str, int, dict[str, Any]]]) -> set[str]:
        """`complete` for each report, all or none (every outcome is encoded before any is
        written, as in one transaction); the accepted task ids."""
        payloads = [(task_id, token, dumps(outcome)) for task_id, token, outcome in reports]
        accepted: set[str] = set()
        with self._lock:
            now = self._clock()
            for task_id, token, payload in payloads:
                row = self._held(task_id, token)
                if row is None:
                    continue
                row["status"] = TaskStatus.DONE
                self._add_input(row["execution_id"], InputKind.OUTCOME, payload, now)
                accepted.add(task_id)
        if accepted:
            self._notify("inputs")
        return accepted

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
        """Mark the task done, apply `append` and lease `lease` to `worker_id`, atomically
        (see `Store.complete_and_commit`)."""
        prepared = prepare(append)
        leased = set(lease)
        with self._lock:
            row = self._held(task_id, token)
            if row is None:
                return None
            self._check([prepared])
            now = self._clock()
            row["status"] = TaskStatus.DONE
            self._apply(prepared, now)
            leases = []
            for name in lease:
                task = self._own_task(prepared.execution_id, name)
                if task is None or task["status"] != TaskStatus.QUEUED:
                    continue
                task.update(
                    status=TaskStatus.LEASED,
                    worker_id=worker_id,
                    lease_token=task["lease_token"] + 1,
                    lease_expires_at=now + lease_s,
                )
                leases.append(lease_from_row(task))
        if prepared.requeue or any(r[0] not in leased for r in prepared.enqueue):
            self._notify("tasks")
        return leases

    def maintain(self) -> None:
        """Nothing to do: no dead rows pile up that claims must step over."""

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Queue the held tasks again at once (see `Store.release`)."""
        released: set[str] = set()
        with self._lock:
            for task_id, token in held:
                row = self._held(task_id, token)
                if row is None:
                    continue
                canceled = row["cancel_requested"]
                row.update(
                    status=TaskStatus.CANCELED if canceled else TaskStatus.QUEUED,
                    worker_id=None,
                    lease_expires_at=None,
                )
                released.add(task_id)
        if released:
            self._notify("tasks")
        return released

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Expire leases that ran out, oldest first, each with a LEASE_EXPIRED input."""
        check_page(limit)
        with self._lock:
            now = self._clock()
            expired = [
                row
                for row in self._tasks.values()
                if row["status"] == TaskStatus.LEASED
                and row["lease_expires_at"] < now
                and (executions is None or row["execution_id"] in executions)
            ]
            expired.sort(key=lambda row: (row["lease_expires_at"], row["order"]))
            for row in expired[:limit]:
                row["status"] = TaskStatus.EXPIRED
                self._add_input(
                    row["execution_id"], InputKind.LEASE_EXPIRED, expired_payload(row), now
                )
            count = len(expired[:limit])
        if count:
            self._notify("inputs")
        return count

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._tasks.get(task_id)
            return None if row is None else task_from_row(row)

    # --- the inbox ------------------------------------------------------------------------

    def _add_input(self, execution_id: str, kind: InputKind, payload: str, now: float) -> int:
        input_id = next(self._input_ids)
        self._inbox[input_id] = {
            "id": input_id,
            "execution_id": execution_id,
            "kind": kind.value,
            "payload": payload,
            "created_at": now,
            "claimed_by": None,
            "claimed_until": None,
        }
        return input_id

    def post_input(self, execution_id: str, kind: InputKind, payload: dict[str, Any]) -> int:
        """Add an input; NotFoundError if the execution does not exist."""
        kind, text = InputKind(kind), dumps(payload)
        with self._lock:
            if execution_id not in self._executions:
                raise NotFoundError(f"execution {execution_id} not found")
            input_id = self._add_input(execution_id, kind, text, self._clock())
        self._notify("inputs")
        return input_id

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
        taken: list[Input] = []
        with self._lock:
            now = self._clock()
            for row in self._inbox.values():
                if len(taken) >= limit:
                    break
                if executions is not None and row["execution_id"] not in executions:
                    continue
                if row["claimed_until"] is None or row["claimed_until"] < now:
                    row.update(claimed_by=owner, claimed_until=now + lease_s)
                    taken.append(input_from_row(row))
        return taken

    def open_holder(self, owner: str) -> LocalHolder:
        """A holder of inputs; gone once closed (the store lives in this process only)."""
        return LocalHolder(self._holders, owner)

    def release_orphaned_inputs(self) -> int:
        """Free the inputs held by closed holders."""
        freed = 0
        with self._lock:
            now = self._clock()
            for row in self._inbox.values():
                token = row["claimed_by"]
                if (
                    (row["claimed_until"] or 0) > now
                    and token not in self._holders
                    and parse(token) is not None
                ):
                    row.update(claimed_by=None, claimed_until=None)
                    freed += 1
        if freed:
            self._notify("inputs")
        return freed

    def close(self) -> None:
        """Nothing to release."""
