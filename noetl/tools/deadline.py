"""The deadline of the task a tool is running: one time limit, from `task.timeout_ms`.

The worker's time limit (`noetl.worker.time_limit.TimeLimit`) starts a task's clock when
it hands the task to its tool and makes the deadline current for the call. A tool bounds
its own waits by what is left of it (`Deadline.of(task).remaining()`: the http request's
timeout, PostgreSQL's `statement_timeout`, the duckdb watchdog, the wait for a child
execution, the python child's reply) instead of starting a clock of its own. Called
outside a time limit (a tool run directly, in a test), `Deadline.of` starts the task's
clock there.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from typing import NamedTuple

from noetl.core import Task

__all__ = ["Deadline"]

# The smallest wait handed to a client library: some read 0 as "no timeout at all".
_FLOOR_S = 0.001


class Deadline(NamedTuple):
    """When the task with `task_id` runs out of its `timeout_ms` (on `time.monotonic`).
    A named tuple: made for every task with a timeout, so it is cheap to make."""

    task_id: str
    timeout_ms: int
    at: float

    @classmethod
    def start(cls, task: Task, now: float | None = None) -> Deadline | None:
        """A deadline `task.timeout_ms` from `now`; None for a task without one."""
        timeout_ms = task.timeout_ms
        if timeout_ms is None or timeout_ms <= 0:
            return None
        began = time.monotonic() if now is None else now
        return cls(task.task_id, int(timeout_ms), began + timeout_ms / 1000)

    @classmethod
    def of(cls, task: Task) -> Deadline | None:
        """The current deadline of `task` (set by the worker's time limit), else one
        starting now; None when the task has no `timeout_ms`."""
        current = _CURRENT.get()
        if current is not None and current.task_id == task.task_id:
            return current
        return cls.start(task)

    def remaining(self, now: float | None = None) -> float:
        """Seconds left, at least a millisecond (a client given 0 may wait forever)."""
        left = self.at - (time.monotonic() if now is None else now)
        return max(left, _FLOOR_S)

    def remaining_ms(self, now: float | None = None) -> int:
        """Whole milliseconds left, at least 1."""
        return max(int(self.remaining(now) * 1000), 1)

    def expired(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.at

    def enter(self) -> Token[Deadline | None]:
        """Make this the current deadline (for the tool's call); `leave` with the token."""
        return _CURRENT.set(self)

    @staticmethod
    def leave(token: Token[Deadline | None]) -> None:
        _CURRENT.reset(token)


_CURRENT: ContextVar[Deadline | None] = ContextVar("noetl_deadline", default=None)
