"""`StatusWatch`: the embedded runtime's look at executions another process finished
(a cancel over the same database). It reads at most `most` statuses a time, in turn, and
no more often than `every_s`."""

from __future__ import annotations

import time

from noetl.core import Event, ExecutionStatus
from noetl.runtime.watch import StatusWatch
from noetl.store.base import Append, ExecutionRecord
from noetl.store.memory import MemoryStore


class Counting(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        self.reads.append(execution_id)
        return super().get_execution(execution_id)


def running(store: MemoryStore, *ids: str) -> None:
    for execution_id in ids:
        record = ExecutionRecord(execution_id, "p", None, "", created_at=1.0, updated_at=1.0)
        started = Event(1, "workflow.started", execution_id, 1.0, payload={"workload": {}})
        store.create_execution(record, Append(execution_id, 0, [started], now=1.0))


def finish(store: MemoryStore, execution_id: str) -> None:
    ended = Event(2, "workflow.finished", execution_id, 2.0, payload={"status": "canceled"})
    store.commit([Append(execution_id, 1, [ended], status=ExecutionStatus.CANCELED, now=2.0)])


def test_a_finished_execution_is_found_in_turn_and_at_most_every_interval() -> None:
    store = Counting()
    ids = [f"e{n:02}" for n in range(40)]
    running(store, *ids)
    finish(store, "e37")
    watch = StatusWatch(store, every_s=0.05, most=16)
    assert watch.finished_elsewhere(set(ids)) is None  # not time yet
    assert store.reads == []
    found = []
    for _ in range(3):
        time.sleep(0.06)
        found.append(watch.finished_elsewhere(set(ids)))
        assert watch.finished_elsewhere(set(ids)) is None  # at once again: no read
    # 16 a time: e00-e15, e16-e31, then e32... finds e37.
    assert found == [None, None, ("e37", ExecutionStatus.CANCELED)]
    assert store.reads[:32] == ids[:32]
    assert store.reads[32:] == ids[32:38]


def test_nothing_running_reads_nothing() -> None:
    store = Counting()
    watch = StatusWatch(store, every_s=0.0)
    assert watch.finished_elsewhere(set()) is None
    assert store.reads == []
