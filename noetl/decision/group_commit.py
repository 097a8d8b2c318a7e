"""Group commit: the calls that wait meanwhile go together in the next call.

A thread that submits an item while no call runs makes the call at once, with its item
and whatever else waits (a quiet worker pays no wait at all). Items submitted while a
call runs wait for it to end; then one of their threads makes the next call for all of
them (at most `limit`), and each thread gets its own item's answer back. It is how a
worker's continuations that end together share one transaction (`Store.continue_many`),
and the starts that the API's threads make together (`Store.create_executions`): a
database round trip and a commit cost about the same for one execution as for thirty.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Runs `call` on the items submitted together, one call at a time."""

    def __init__(self, call: Callable[[list[T]], Sequence[R]], *, limit: int = 64) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._call = call
        self._limit = limit
        self._cond = threading.Condition()
        self._queue: list[_Slot[T, R]] = []
        self._busy = False
        self.calls = 0  # how many calls were made (for tests and stats)

    def submit(self, item: T) -> R:
        """`item`'s answer from the call that took it; what that call raised, raised here
        (in every thread whose item it took)."""
        return self.submit_many([item])[0]

    def submit_many(self, items: Sequence[T]) -> list[R]:
        """Each item's answer, in order (they may go in more than one call: at most
        `limit` an item); what a call raised, raised here."""
        slots: list[_Slot[T, R]] = [_Slot(item) for item in items]
        if not slots:
            return []
        with self._cond:
            self._queue.extend(slots)
            while not slots[-1].done:
                if self._busy:
                    self._cond.wait()
                    continue
                # Nobody calls: this thread makes the next call, for the oldest items.
                self._busy = True
                batch = self._queue[: self._limit]
                del self._queue[: self._limit]
                self._cond.release()
                try:
                    self._run(batch)
                finally:
                    self._cond.acquire()
                    self._busy = False
                    self._cond.notify_all()
        for slot in slots:
            if slot.error is not None:
                raise slot.error
        return [slot.result for slot in slots]  # type: ignore[misc]  # set with done

    def _run(self, batch: list[_Slot[T, R]]) -> None:
        """Make one call for `batch` and hand each slot its answer (outside the lock)."""
        self.calls += 1
        try:
            answers = list(self._call([slot.item for slot in batch]))
            if len(answers) != len(batch):
                raise RuntimeError(f"{len(answers)} answers for {len(batch)} items")
        except BaseException as exc:  # every item of the call shares its failure
            for slot in batch:
                slot.error = _own(exc)  # each thread raises an object of its own
                slot.done = True
            if not isinstance(exc, Exception):  # an interrupt: the calling thread's too
                raise
            return
        for slot, answer in zip(batch, answers, strict=True):
            slot.result = answer
            slot.done = True


def _own(exc: BaseException) -> BaseException:
    """A copy of `exc` for one thread to raise (raising one object in several threads at
    once mixes their tracebacks); `exc` itself when it cannot be copied."""
    try:
        mine = copy.copy(exc)
    except Exception:
        return exc
    mine.__cause__, mine.__context__ = exc.__cause__, exc.__context__
    return mine
