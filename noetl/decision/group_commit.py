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


class _Waiter:
    """A thread waiting in `submit_many`: woken (its lock released) when its last item is
    done, or when it is to make the next call."""

    __slots__ = ("lead", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()  # held until someone wakes the thread
        self.lead = False

    def wake(self, *, lead: bool = False) -> None:
        self.lead = lead
        self.lock.release()

    def wait(self) -> None:
        self.lock.acquire()


class _Slot(Generic[T, R]):
    __slots__ = ("done", "error", "item", "last", "result", "waiter")

    def __init__(self, item: T, waiter: _Waiter, *, last: bool) -> None:
        self.item = item
        self.waiter = waiter
        self.last = last  # its thread's last item: its answer wakes the thread
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Runs `call` on the items submitted together, one call at a time.

    Only the threads whose items a call answered are woken when it ends, and the thread of
    the oldest waiting item, to make the next call: a worker's many task threads are not
    all woken by every commit."""

    def __init__(self, call: Callable[[list[T]], Sequence[R]], *, limit: int = 64) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._call = call
        self._limit = limit
        self._lock = threading.Lock()
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
        if not items:
            return []
        waiter = _Waiter()
        last = len(items) - 1
        slots: list[_Slot[T, R]] = [
            _Slot(item, waiter, last=i == last) for i, item in enumerate(items)
        ]
        with self._lock:
            self._queue.extend(slots)
            lead = not self._busy
            self._busy = True
        if not lead:
            waiter.wait()  # until the last item is answered, or this thread is to call
            lead = waiter.lead
        while lead:
            lead = self._lead(slots[-1])
        for slot in slots:
            if slot.error is not None:
                raise slot.error
        return [slot.result for slot in slots]  # type: ignore[misc]  # set with done

    def _lead(self, mine: _Slot[T, R]) -> bool:
        """Make the next call (this thread holds `_busy`); whether to make another. When
        `mine` is answered, the call is handed to the oldest waiting item's thread."""
        with self._lock:
            batch = self._queue[: self._limit]
            del self._queue[: self._limit]
        called = False
        try:
            self._run(batch)
            called = True
        finally:
            with self._lock:
                again = called and not mine.done and bool(self._queue)
                if not again:
                    if not called:  # an interrupt: this thread leaves, its items with it
                        self._queue = [s for s in self._queue if s.waiter is not mine.waiter]
                    if self._queue:  # the next call is the oldest waiting thread's
                        self._queue[0].waiter.wake(lead=True)
                    else:
                        self._busy = False
            for slot in batch:  # every slot of the batch is answered (or failed) by now
                if slot.last and slot.waiter is not mine.waiter:
                    slot.waiter.wake()
        return again

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
