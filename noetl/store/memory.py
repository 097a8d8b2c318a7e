"""An in-process Store for unit tests: dicts behind one lock, same contract as SQLite.

Values are kept as JSON text, exactly as the databases keep them, so a test that passes
here does not depend on sharing mutable objects with the store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from noetl.engine.types import Event, ExecutionStatus
from noetl.store._rows import (
    EventRow,
    PreparedAppend,
    check_page,
    event_from_row,
    loads,
    prepare,
    record_from_row,
    record_to_row,
)
from noetl.store.base import Append, ConcurrencyError, ExecutionRecord, NotFoundError


class MemoryStore:
    """Store kept in dicts; thread-safe; nothing survives the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Insertion order of `_executions` is creation order (the tie-break of "newest").
        self._executions: dict[str, dict[str, Any]] = {}
        self._events: dict[str, list[EventRow]] = {}
        self._steps: dict[str, dict[str, str]] = {}

    def create_execution(self, record: ExecutionRecord) -> None:
        """Insert a new execution row; ConcurrencyError if the id exists."""
        row = record_to_row(record)
        with self._lock:
            if record.execution_id in self._executions:
                raise ConcurrencyError(f"execution {record.execution_id} already exists")
            self._executions[record.execution_id] = row
            self._events[record.execution_id] = []
            self._steps[record.execution_id] = {}

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append atomically (validate all, then write all)."""
        prepared = [prepare(append) for append in appends]
        with self._lock:
            self._check(prepared)
            for item in prepared:
                self._apply(item)

    def _check(self, prepared: list[PreparedAppend]) -> None:
        # Track last_seq as the earlier appends of this commit would leave it, so two
        # appends to one execution in one commit chain like they do in a transaction.
        last: dict[str, int] = {}
        for item in prepared:
            row = self._executions.get(item.execution_id)
            if row is None:
                raise NotFoundError(f"execution {item.execution_id} not found")
            current = last.get(item.execution_id, row["last_seq"])
            if current != item.expected_seq:
                raise ConcurrencyError(
                    f"execution {item.execution_id}: expected last seq {item.expected_seq}, "
                    f"store has {current}"
                )
            last[item.execution_id] = item.last_seq

    def _apply(self, item: PreparedAppend) -> None:
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

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events in sequence order after `after_seq`, at most `limit`."""
        check_page(limit)
        with self._lock:
            rows = self._events.get(execution_id)
            if rows is None:
                raise NotFoundError(f"execution {execution_id} not found")
            # seq is gapless from 1, so seq n sits at index n - 1.
            start = max(after_seq, 0)
            selected = rows[start:] if limit is None else rows[start : start + limit]
        return [event_from_row(execution_id, row[1:]) for row in selected]

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        with self._lock:
            row = self._executions.get(execution_id)
            return None if row is None else record_from_row(row)

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
            if steps is None:
                raise NotFoundError(f"execution {execution_id} not found")
            return {step: loads(status) for step, status in steps.items()}

    def close(self) -> None:
        """Nothing to release."""
