"""`StatusWatch`: the embedded runtime's look at executions another process finished
(a cancel over the same database). One read of the statuses of every running execution,
no more often than `every_s`, whatever their number."""

from __future__ import annotations

from collections.abc import Collection

from noetl.core import Event, ExecutionStatus
from noetl.runtime.watch import StatusWatch
from noetl.store.base import Append, ExecutionRecord
from noetl.store.memory import MemoryStore


class Counting(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []  # how many ids each read asked about

    def finished_among(self, execution_ids: Collection[str]) -> dict[str, ExecutionStatus]:
        self.reads.append(len(execution_ids))
        return super().finished_among(execution_ids)

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        raise AssertionError("the watch reads statuses, not whole executions")


def running(store: MemoryStore, *ids: str) -> None:
    for execution_id in ids:
        record = ExecutionRecord(execution_id, "p", None, "", created_at=1.0, updated_at=1.0)
        started = Event(1, "workflow.started", execution_id, 1.0, payload={"workload": {}})
        store.create_execution(record, Append(execution_id, 0, [started], now=1.0))


def finish(store: MemoryStore, execution_id: str) -> None:
    ended = Event(2, "workflow.finished", execution_id, 2.0, payload={"status": "canceled"})
    store.commit([Append(execution_id, 1, [ended], status=ExecutionStatus.CANCELED, now=2.0)])


class Clock:
    """A clock the test moves by hand: a slow machine cannot make a look early or late."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_finished_execution_among_thousands_is_found_at_the_next_look() -> None:
    store = Counting()
    ids = [f"e{n:04}" for n in range(3000)]
    running(store, *ids)
    clock = Clock()
    watch = StatusWatch(store, every_s=1.0, clock=clock)
    clock.now += 0.99
    assert watch.finished_elsewhere(set(ids)) is None  # not time yet
    assert store.reads == []
    clock.now += 0.01
    assert watch.finished_elsewhere(set(ids)) is None  # none finished
    finish(store, "e2999")
    clock.now += 0.5
    assert watch.finished_elsewhere(set(ids)) is None  # half the interval on: no read
    assert store.reads == [3000]
    clock.now += 0.5
    assert watch.finished_elsewhere(set(ids)) == ("e2999", ExecutionStatus.CANCELED)
    assert store.reads == [3000, 3000]


def test_nothing_running_reads_nothing() -> None:
    store = Counting()
    watch = StatusWatch(store, every_s=0.0)
    assert watch.finished_elsewhere(set()) is None
    assert store.reads == []
