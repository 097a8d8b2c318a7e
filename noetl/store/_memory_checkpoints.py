"""The memory adapter's checkpoint store (SQLite and PostgreSQL:
`noetl.store.managers.checkpoints`)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any, NamedTuple

from noetl.store._json import loads
from noetl.store.managers.checkpoints import encode_checkpoint
from noetl.store.records import Checkpoint, Clock


class _Row(NamedTuple):
    execution_id: str
    attempt: int
    body: str  # JSON text, as a SQL store keeps it
    updated_at: float


class MemoryCheckpoints:
    """`CheckpointStore` in a dict, timed by the store's clock (read under the lock)."""

    def __init__(self, lock: threading.Lock, clock: Clock) -> None:
        self._lock = lock
        self._clock = clock
        self._rows: dict[str, _Row] = {}

    def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
        body = encode_checkpoint(task_id, value)
        with self._lock:
            kept = self._rows.get(task_id)
            if kept is not None and kept.attempt > attempt:
                return False
            self._rows[task_id] = _Row(execution_id, attempt, body, self._clock())
        return True

    def load(self, task_id: str) -> Checkpoint | None:
        with self._lock:
            row = self._rows.get(task_id)
        if row is None:
            return None
        # Decoded on every read: no caller shares a mutable value with the store.
        return Checkpoint(task_id, row.execution_id, row.attempt, loads(row.body), row.updated_at)

    def drop(self, task_id: str) -> None:
        with self._lock:
            self._rows.pop(task_id, None)

    def forget(self, execution_ids: Collection[str], *, dry_run: bool = False) -> int:
        """Drop the checkpoints of `execution_ids` (retention); how many (would) go."""
        with self._lock:
            gone = [task for task, row in self._rows.items() if row.execution_id in execution_ids]
            if not dry_run:
                for task_id in gone:
                    del self._rows[task_id]
        return len(gone)
