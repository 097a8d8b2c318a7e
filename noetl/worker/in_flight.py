"""The tasks a worker holds, from their claim until their thread is done with them.

Heartbeats keep every tracked lease alive, so a task is never left tracked once its
thread is done with it. A hard stop marks them all lost at once (their outcomes are not
reported: they were handed back); tasks a continuation leases to the worker as it stops
are not tracked, they go straight back to the queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from noetl.store.base import Lease
from noetl.worker.heartbeats import InFlight

__all__ = ["InFlightTable"]


class InFlightTable:
    """The worker's tasks in flight, by task id, behind one lock."""

    def __init__(self, waits: Callable[[str], bool]) -> None:
        self._waits = waits  # whether a tool kind waits for other tasks
        self._entries: dict[str, InFlight] = {}
        self._waiting = 0  # entries that wait (kept as they come and go: `busy` is hot)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entries(self) -> list[InFlight]:
        with self._lock:
            return list(self._entries.values())

    def busy(self) -> int:
        """Tasks that count against the claim window (not the waiting ones)."""
        with self._lock:
            return len(self._entries) - self._waiting

    def get(self, task_id: str) -> InFlight | None:
        with self._lock:
            return self._entries.get(task_id)

    def track(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._put(lease)

    def drop(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._pop(lease)

    def hand_over(
        self, done: Iterable[Lease], follow: list[Lease], stopped: Callable[[], bool]
    ) -> list[Lease]:
        """Drop `done` and track `follow` (leased to the worker by their continuations),
        unless `stopped()` (asked under the lock `abandon` holds): the ones not tracked,
        to hand back."""
        with self._lock:
            for lease in done:
                self._pop(lease)
            if stopped():
                return follow
            for lease in follow:
                self._put(lease)
            return []

    def abandon(self, stop: Callable[[], None]) -> list[InFlight]:
        """`stop()` and mark every task lost, at once: the ones to hand back."""
        with self._lock:
            stop()
            entries = list(self._entries.values())
            for entry in entries:
                entry.lost = True
            return entries

    def _put(self, lease: Lease) -> None:
        # called with the lock held
        self._pop(lease)
        entry = InFlight(lease, waits=self._waits(lease.task.kind))
        self._entries[lease.task.task_id] = entry
        self._waiting += entry.waits

    def _pop(self, lease: Lease) -> None:
        # called with the lock held
        entry = self._entries.pop(lease.task.task_id, None)
        if entry is not None:
            self._waiting -= entry.waits
