"""The memory store's reads of executions, dead-letter queue, catalog, workers, stats and
notifications: a part of `MemoryStore` (noetl.store.memory), on its dicts and under its
lock."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Collection
from typing import Any

from noetl.core import Event, ExecutionStatus, HistoryPrunedError, NotFoundError
from noetl.store._json import dumps, loads
from noetl.store._rows import (
    DLQ_COLUMNS,
    EventRow,
    check_channel,
    check_page,
    check_worker,
    dead_letter_from_row,
    event_from_row,
    family,
    record_from_row,
)
from noetl.store.records import (
    Clock,
    DeadLetter,
    DeadLetterStatus,
    ExecutionRecord,
    InputKind,
    PlaybookRecord,
    StoreStats,
    TaskStatus,
    WorkerRecord,
    check_load_many,
)


class MemoryAdmin:
    """The reads of `ExecutionPort`, `DeadLetterPort`, `CatalogPort`,
    `WorkerRegistryPort`, `stats` and `wait_for` of `MemoryStore`, whose state it shares."""

    _clock: Clock
    _lock: threading.Lock
    _executions: dict[str, dict[str, Any]]
    _steps: dict[str, dict[str, str]]
    _tasks: dict[str, dict[str, Any]]
    _inbox: dict[int, dict[str, Any]]
    _playbooks: dict[str, list[PlaybookRecord]]
    _workers: dict[str, WorkerRecord]
    _dlq: dict[str, dict[str, Any]]
    _wakeups: dict[str, threading.Condition]
    _events: dict[str, list[EventRow]]
    _compiled: dict[str, str | None]
    # Add an inbox row (under the lock): MemoryStore._add_input.
    _add_input: Callable[[str, InputKind, str, float], int]

    # --- reading executions -------------------------------------------------------------

    def _check_present(self, execution_id: str) -> None:
        """Under the lock: NotFoundError when there is no such execution,
        HistoryPrunedError when only its tombstone is left."""
        row = self._executions.get(execution_id)
        if row is None:
            raise NotFoundError(f"execution {execution_id} not found")
        if row.get("pruned_at") is not None:
            raise HistoryPrunedError(execution_id, row["pruned_at"])

    def get_compiled(self, execution_id: str) -> str | None:
        with self._lock:
            return self._compiled.get(execution_id)

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events in sequence order after `after_seq`, at most `limit`."""
        check_page(limit)
        with self._lock:
            rows = self._events.get(execution_id)
            if not rows:
                self._check_present(execution_id)
                return []
            # seq is gapless from the first kept event (1, unless a prune dropped those
            # before), so seq n sits at index n - first.
            start = max(after_seq - rows[0][1] + 1, 0)
            selected = rows[start:] if limit is None else rows[start : start + limit]
        return [event_from_row(execution_id, row[1:]) for row in selected]

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        with self._lock:
            row = self._executions.get(execution_id)
            return None if row is None else record_from_row(row)

    def load_execution(self, execution_id: str) -> tuple[ExecutionRecord, list[Event]] | None:
        with self._lock:
            row = self._executions.get(execution_id)
            if row is None or row.get("pruned_at") is not None:
                return None
            rows = list(self._events.get(execution_id, ()))
            record = record_from_row(row)
        return record, [event_from_row(execution_id, event[1:]) for event in rows]

    def load_executions(
        self, execution_ids: Collection[str], *, max_events: int
    ) -> dict[str, tuple[ExecutionRecord, list[Event]]]:
        loaded: dict[str, tuple[ExecutionRecord, list[Event]]] = {}
        for execution_id in check_load_many(execution_ids, max_events):
            with self._lock:
                row = self._executions.get(execution_id)
                young = row is not None and row["last_seq"] <= max_events
            one = self.load_execution(execution_id) if young else None
            if one is not None:
                loaded[execution_id] = one
        return loaded

    def finished_among(self, execution_ids: Collection[str]) -> dict[str, ExecutionStatus]:
        with self._lock:
            rows = [(e, self._executions.get(e)) for e in execution_ids]
            return {
                e: ExecutionStatus(row["status"])
                for e, row in rows
                if row is not None and row["status"] != ExecutionStatus.RUNNING
            }

    def execution_family(self, execution_id: str) -> list[str]:
        with self._lock:
            parents = [(e, row["parent_execution_id"]) for e, row in self._executions.items()]
        return family(execution_id, parents)

    def list_executions(
        self, *, status: ExecutionStatus | None = None, limit: int = 50, offset: int = 0
    ) -> list[ExecutionRecord]:
        """Newest first (created_at, then creation order); optionally one status."""
        check_page(limit, offset)
        with self._lock:
            rows = [
                (row["created_at"], index, row)
                for index, row in enumerate(self._executions.values())
                if status is None or row["status"] == status
            ]
            rows.sort(key=lambda item: (item[0], item[1]), reverse=True)
            return [record_from_row(row) for _, _, row in rows[offset : offset + limit]]

    def get_steps(self, execution_id: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            steps = self._steps.get(execution_id)
            if not steps:
                self._check_present(execution_id)
                return {}
            return {step: loads(status) for step, status in steps.items()}

    def queued_tasks(self, execution_id: str) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        with self._lock:
            for task in self._tasks.values():
                if task["execution_id"] == execution_id and task["status"] == TaskStatus.QUEUED:
                    key = (task["step"], task["pool"])
                    found[key] = found.get(key, 0) + 1
        return found

    # --- the dead-letter queue -----------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        status: DeadLetterStatus | None = None,
        execution_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[DeadLetter]:
        """Most recently failed first (last_seen, then message id, both descending)."""
        check_page(limit, offset)
        with self._lock:
            rows = [
                row
                for row in self._dlq.values()
                if (status is None or row["status"] == DeadLetterStatus(status).value)
                and (execution_id is None or row["execution_id"] == execution_id)
            ]
        rows.sort(key=lambda row: (row["last_seen"], row["message_id"]), reverse=True)
        return [_dead_letter(row) for row in rows[offset : offset + limit]]

    def get_dead_letter(self, message_id: str) -> DeadLetter | None:
        with self._lock:
            row = self._dlq.get(message_id)
            return None if row is None else _dead_letter(row)

    def dead_letter_counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in DeadLetterStatus}
        with self._lock:
            for row in self._dlq.values():
                counts[row["status"]] += 1
        return counts

    def pending_dead_letters(self, execution_id: str) -> dict[str, int]:
        found: dict[str, int] = {}
        with self._lock:
            for row in self._dlq.values():
                if row["execution_id"] == execution_id and row["status"] == "pending":
                    found[row["step_id"]] = found.get(row["step_id"], 0) + 1
        return found

    def post_replay(self, message_id: str, payload: dict[str, Any]) -> bool:
        """Mark a pending entry replayed and post its REPLAY input, atomically."""
        text = dumps(payload)
        with self._lock:
            row = self._dlq.get(message_id)
            if row is None:
                raise NotFoundError(f"no dead-letter entry {message_id}")
            if row["status"] != DeadLetterStatus.PENDING:
                return False
            pruned_at = self._executions[row["execution_id"]].get("pruned_at")
            if pruned_at is not None:
                raise HistoryPrunedError(row["execution_id"], pruned_at)
            now = self._clock()
            row.update(status=DeadLetterStatus.REPLAYED.value, updated_at=now)
            row["replays"] += 1
            self._add_input(row["execution_id"], InputKind.REPLAY, text, now)
        self._notify("inputs")
        return True

    def discard_dead_letter(self, message_id: str, reason: str) -> bool:
        """Discard a pending entry with `reason`."""
        with self._lock:
            row = self._dlq.get(message_id)
            if row is None:
                raise NotFoundError(f"no dead-letter entry {message_id}")
            if row["status"] != DeadLetterStatus.PENDING:
                return False
            row.update(
                status=DeadLetterStatus.DISCARDED.value,
                discard_reason=reason,
                updated_at=self._clock(),
            )
            return True

    def wait_for(self, channel: str, timeout: float) -> bool:
        """Block until `channel` is notified (True) or `timeout` passes (False)."""
        check_channel(channel)
        condition = self._wakeups[channel]
        with condition:
            return condition.wait(max(timeout, 0.0))

    def _notify(self, channel: str) -> None:
        condition = self._wakeups[channel]
        with condition:
            condition.notify_all()

    # --- playbooks and workers --------------------------------------------------------------

    def register_playbook(self, path: str, name: str, text: str, now: float) -> PlaybookRecord:
        """A new version of `path`, unless `text` equals the latest version's."""
        with self._lock:
            versions = self._playbooks.setdefault(path, [])
            if versions and versions[-1].text == text:
                return versions[-1]
            record = PlaybookRecord(path, len(versions) + 1, name, text, now)
            versions.append(record)
            return record

    def get_playbook(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        with self._lock:
            versions = self._playbooks.get(path)
            if not versions:
                return None
            if version is None:
                return versions[-1]
            return versions[version - 1] if 1 <= version <= len(versions) else None

    def list_playbooks(self) -> list[PlaybookRecord]:
        with self._lock:
            return [self._playbooks[path][-1] for path in sorted(self._playbooks)]

    def register_worker(self, record: WorkerRecord) -> None:
        """Insert or replace the worker's row."""
        check_worker(record)
        with self._lock:
            self._workers[record.worker_id] = record

    def worker_heartbeat(self, worker_id: str) -> str:
        """Stamp the worker alive and return its status; NotFoundError if unregistered."""
        with self._lock:
            record = self._workers.get(worker_id)
            if record is None:
                raise NotFoundError(f"worker {worker_id} is not registered")
            self._workers[worker_id] = dataclasses.replace(record, heartbeat_at=self._clock())
            return record.status

    def request_drain(self, pool: str | None = None) -> int:
        """Move running workers (of `pool`, or all) to draining; returns how many."""
        with self._lock:
            chosen = [
                record
                for record in self._workers.values()
                if record.status == "running" and (pool is None or record.pool == pool)
            ]
            for record in chosen:
                self._workers[record.worker_id] = dataclasses.replace(record, status="draining")
            return len(chosen)

    def list_workers(self) -> list[WorkerRecord]:
        """Every registered worker, by id."""
        with self._lock:
            return [self._workers[worker_id] for worker_id in sorted(self._workers)]

    def stats(self) -> StoreStats:
        """Counts for the metrics exporter."""
        running: dict[str, tuple[int, float]] = {}
        parked: dict[str, int] = {}
        tasks: dict[tuple[str, str], tuple[int, float | None]] = {}
        executions: dict[tuple[str, str], int] = {}
        with self._lock:
            now = self._clock()
            for execution_id, row in self._executions.items():
                name = row["playbook_name"]
                key = (name, row["status"])
                executions[key] = executions.get(key, 0) + 1
                if row["status"] != ExecutionStatus.RUNNING.value:
                    continue
                count, oldest = running.get(name, (0, row["updated_at"]))
                running[name] = (count + 1, min(oldest, row["updated_at"]))
                steps = self._steps.get(execution_id, {}).values()
                waiting = sum(1 for status in steps if loads(status).get("status") == "parked")
                if waiting:
                    parked[name] = parked.get(name, 0) + waiting
            for task in self._tasks.values():
                status = task["status"]
                if status not in (TaskStatus.QUEUED, TaskStatus.LEASED):
                    continue
                key = (task["pool"], str(status.value))
                count, due = tasks.get(key, (0, None))
                if status == TaskStatus.QUEUED and task["not_before"] <= now:
                    due = task["not_before"] if due is None else min(due, task["not_before"])
                tasks[key] = (count + 1, due)
            created = [
                row["created_at"]
                for row in self._inbox.values()
                # timers that are not due yet are no backlog
                if not (row["kind"] == InputKind.TIMER and (row["claimed_until"] or 0) > now)
            ]
        inputs = (len(created), min(created) if created else None)
        return StoreStats(
            running=running, parked=parked, tasks=tasks, inputs=inputs, executions=executions
        )


def _dead_letter(row: dict[str, Any]) -> DeadLetter:
    return dead_letter_from_row([row[column] for column in DLQ_COLUMNS])
