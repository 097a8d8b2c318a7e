"""Executions finished by another process while this one runs them.

`noetl run` owns its executions' decisions, but another process may finish one over the
same database: `noetl exec cancel --db`, the console (`noetl ui`). The embedded runtime
asks a `StatusWatch` every turn; at most every `every_s` seconds it reads which of the
running executions the store has finished (`finished_among`: the status column only, a
statement per thousand ids), and names one of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from noetl.core.types import ExecutionStatus
from noetl.store.ports import ExecutionPort

WATCH_S = 1.0


class StatusWatch:
    def __init__(
        self,
        store: ExecutionPort,
        *,
        every_s: float = WATCH_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.every_s = every_s
        self._clock = clock
        self._last = clock()

    def finished_elsewhere(self, running: set[str]) -> tuple[str, ExecutionStatus] | None:
        """One of `running` the store has as finished, with its status; None when none is
        (or when it is not time to look yet)."""
        now = self._clock()
        if not running or now - self._last < self.every_s:
            return None
        self._last = now
        finished = self.store.finished_among(running)
        if not finished:
            return None
        execution_id = min(finished)  # the same one each time, whatever the set's order
        return execution_id, finished[execution_id]
