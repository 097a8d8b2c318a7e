"""Executions finished by another process while this one runs them.

`noetl run` owns its executions' decisions, but another process may finish one over the
same database: `noetl exec cancel --db`, the console (`noetl ui`). The embedded runtime
asks a `StatusWatch` every turn; at most every `every_s` seconds it reads the status of up
to `most` of the running executions from the store (in turn, so a wait for many reads few
at a time), and names one the store has finished.
"""

from __future__ import annotations

import time

from noetl.core.types import ExecutionStatus
from noetl.store.ports import ExecutionPort

WATCH_S = 1.0
WATCH_MAX = 16


class StatusWatch:
    def __init__(self, store: ExecutionPort, *, every_s: float = WATCH_S, most: int = WATCH_MAX):
        self.store = store
        self.every_s = every_s
        self.most = most
        self._last = time.monotonic()
        self._cursor = 0

    def finished_elsewhere(self, running: set[str]) -> tuple[str, ExecutionStatus] | None:
        """One of `running` the store has as finished, with its status; None when none is
        (or when it is not time to look yet)."""
        if not running or time.monotonic() - self._last < self.every_s:
            return None
        self._last = time.monotonic()
        ordered = sorted(running)
        start = self._cursor % len(ordered)
        looked = (ordered + ordered)[start : start + min(self.most, len(ordered))]
        self._cursor = start + len(looked)
        for execution_id in looked:
            record = self.store.get_execution(execution_id)
            if record is not None and record.status.terminal:
                return execution_id, record.status
        return None
