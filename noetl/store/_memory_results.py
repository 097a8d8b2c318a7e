"""The memory adapter's result store (SQLite and PostgreSQL: `noetl.store.managers.results`)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from noetl.store._json import dumps, loads
from noetl.store.managers.results import new_ref
from noetl.store.records import StoredResult


class MemoryResults:
    """`ResultStore` in a dict (the memory adapter's result store)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._results: dict[str, StoredResult] = {}

    def put(self, execution_id: str, step: str | None, value: Any) -> StoredResult:
        body = dumps(value)  # what a SQL store would keep: a copy, sized as JSON
        stored = StoredResult(new_ref(), execution_id, step, len(body.encode()), loads(body))
        with self._lock:
            self._results[stored.ref] = stored
        return stored

    def get(self, ref: str) -> StoredResult | None:
        with self._lock:
            return self._results.get(ref) if isinstance(ref, str) else None

    def count(self, execution_id: str) -> tuple[int, int]:
        with self._lock:
            mine = [r.bytes for r in self._results.values() if r.execution_id == execution_id]
        return len(mine), sum(mine)

    def forget(self, execution_ids: Collection[str], *, dry_run: bool = False) -> int:
        """Drop the results of `execution_ids` (retention); how many (would) go."""
        with self._lock:
            gone = [ref for ref, r in self._results.items() if r.execution_id in execution_ids]
            if not dry_run:
                for ref in gone:
                    del self._results[ref]
        return len(gone)
