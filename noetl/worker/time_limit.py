"""The time limit of a tool call: one deadline from `task.timeout_ms`, for every tool.

`TimeLimit` is the innermost middleware of a registry's chain (`noetl.worker.middleware`):

1. it starts the task's clock when the tool is called and makes the `Deadline` current,
   so the tool bounds its own waits by what is left (`noetl.tools.deadline`);
2. when the tool can stop a task (`Cancellable`), a watchdog asks it to stop `task_id`
   `grace_s` after the deadline: a tool that keeps time gets that long to report its own
   timeout, in its own words, before it is stopped from outside;
3. an outcome that comes back after the deadline is a retryable `TaskTimeoutError`
   when it succeeded (its result came too late) or when the watchdog stopped it; a
   failure the tool reported itself (its own timeout) is kept as it is.

A task without `timeout_ms` runs unbounded here (the python pool still applies its own
default). One watchdog thread serves every deadline of the process.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from noetl.core import Outcome, Task
from noetl.tools.deadline import Deadline

__all__ = ["CANCEL_GRACE_S", "TimeLimit", "Watchdog", "timed_out"]

log = logging.getLogger("noetl.worker")

# How long after its deadline a tool that can be stopped is asked to stop.
CANCEL_GRACE_S = 0.5
# How long a call that returned waits for the answer of the cancel that stopped it.
_ANSWER_S = 2.0

Handler = Callable[[Task], Outcome]


# An alarm: [when (time.monotonic), sequence number, callback or None once canceled or
# fired]. A list, so the heap compares it in C (the sequence number breaks ties).
_Alarm = list[Any]


class Watchdog:
    """Calls each callback once its time comes (`time.monotonic`), unless canceled first;
    one daemon thread, started on first use, for all of them."""

    def __init__(self) -> None:
        self._heap: list[_Alarm] = []
        self._cond = threading.Condition(threading.Lock())
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stale = 0

    def schedule(self, at: float, callback: Callable[[], None]) -> _Alarm:
        alarm: _Alarm = [at, next(self._seq), callback]
        with self._cond:
            heapq.heappush(self._heap, alarm)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="noetl-time-limit", daemon=True
                )
                self._thread.start()
            if self._heap[0] is alarm:  # earlier than what the thread waits for
                self._cond.notify()
        return alarm

    def cancel(self, alarm: _Alarm) -> None:
        with self._cond:
            if alarm[2] is None:
                return
            alarm[2] = None
            self._stale += 1
            if self._stale > 64 and self._stale * 2 > len(self._heap):
                # Long deadlines of finished tasks: drop them rather than keep them for hours.
                self._heap = [a for a in self._heap if a[2] is not None]
                heapq.heapify(self._heap)
                self._stale = 0

    def pending(self) -> int:
        """Alarms not yet fired nor canceled (for tests)."""
        with self._cond:
            return sum(a[2] is not None for a in self._heap)

    def _loop(self) -> None:
        while True:
            with self._cond:
                callback = self._next_due()
            try:
                callback()
            except Exception:  # a tool's cancel must not stop the watchdog
                log.exception("time limit: stopping a task failed")

    def _next_due(self) -> Callable[[], None]:
        while True:
            if not self._heap:
                self._cond.wait()
                continue
            first = self._heap[0]
            callback = first[2]
            if callback is None:
                heapq.heappop(self._heap)
                self._stale -= 1
                continue
            wait = first[0] - time.monotonic()
            if wait > 0:
                self._cond.wait(wait)
                continue
            heapq.heappop(self._heap)
            first[2] = None  # fired: a later cancel is a no-op
            return callback  # type: ignore[no-any-return]


WATCHDOG = Watchdog()


class _Stop:
    """Asks the tool to stop one task, and remembers whether it did."""

    __slots__ = ("asked", "cancel", "lock", "stopped", "task_id")

    def __init__(self, cancel: Callable[[str], bool], task_id: str) -> None:
        self.cancel = cancel
        self.task_id = task_id
        self.asked = False
        self.stopped = False
        self.lock = threading.Lock()  # held while asking (an Event costs 20 times more)

    def __call__(self) -> None:
        with self.lock:
            self.asked = True
            self.stopped = self.cancel(self.task_id) is True

    def result(self) -> bool:
        """Whether the tool stopped the task; the stopped call may return before its
        `cancel` does, so wait for that (briefly) once it was asked."""
        if not self.asked:
            return False
        if self.lock.acquire(timeout=_ANSWER_S):
            self.lock.release()
        return self.stopped


class TimeLimit:
    """Bounds a tool call by `task.timeout_ms` (see the module docstring)."""

    def __init__(
        self,
        cancel: Callable[[str], bool] | None = None,
        *,
        grace_s: float = CANCEL_GRACE_S,
        watchdog: Watchdog = WATCHDOG,
    ) -> None:
        self.cancel = cancel
        self.grace_s = grace_s
        self.watchdog = watchdog

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        timeout_ms = task.timeout_ms
        if timeout_ms is None or timeout_ms <= 0:  # the hot path: no limit
            return call_next(task)
        deadline = Deadline(task.task_id, timeout_ms, time.monotonic() + timeout_ms / 1000)
        stop = alarm = None
        if self.cancel is not None:
            stop = _Stop(self.cancel, task.task_id)
            alarm = self.watchdog.schedule(deadline.at + self.grace_s, stop)
        token = deadline.enter()
        try:
            outcome = call_next(task)
        finally:
            Deadline.leave(token)
            if alarm is not None:
                self.watchdog.cancel(alarm)
        stopped = stop is not None and stop.result()
        if (outcome.ok or stopped) and deadline.expired():
            return timed_out(task, deadline, outcome, stopped=stopped)
        return outcome


def timed_out(task: Task, deadline: Deadline, outcome: Outcome, *, stopped: bool) -> Outcome:
    """The retryable timeout failure of an outcome that came back past its deadline."""
    error = f"{task.kind}: the task ran past its timeout_ms ({deadline.timeout_ms})"
    if stopped:
        error += "; it was stopped"
    return Outcome(
        task_id=outcome.task_id,
        ok=False,
        error=error,
        error_type="TaskTimeoutError",
        retryable=True,
        stdout=outcome.stdout,
        duration_ms=outcome.duration_ms,
    )
