"""The start queue (noetl.server.starts.StartQueue): starts put while a write runs go
together in the next one, each future gets its own answer, and a failed write fails all
the starts it took."""

from __future__ import annotations

import threading
import time

import pytest

from noetl.core import ConcurrencyError
from noetl.server.starts import Answer, StartQueue
from noetl.store.base import ExecutionRecord, NewExecution


def new(execution_id: str) -> NewExecution:
    return NewExecution(ExecutionRecord(execution_id, "p", None, "t", 1.0, 1.0))


class Writer:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: BaseException | None = None

    def __call__(self, items: list[NewExecution]) -> list[Answer]:
        self.entered.set()
        self.gate.wait(5)
        self.calls.append([item.record.execution_id for item in items])
        if self.fail is not None:
            raise self.fail
        return [
            ConcurrencyError(f"{item.record.execution_id} exists")
            if item.record.execution_id.startswith("dup")
            else None
            for item in items
        ]


def test_starts_put_during_a_write_go_together_in_the_next() -> None:
    writer = Writer()
    starts = StartQueue(writer)
    first = starts.put(new("a"))
    assert writer.entered.wait(5)
    rest = [starts.put(new(name)) for name in ("b", "dup1", "c")]
    writer.gate.set()

    assert first.result(5) is None
    answers = [future.result(5) for future in rest]
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], ConcurrencyError) and "dup1 exists" in str(answers[1])
    assert writer.calls == [["a"], ["b", "dup1", "c"]]
    assert starts.calls == 2


def test_a_failed_write_fails_every_start_it_took() -> None:
    writer = Writer()
    writer.fail = RuntimeError("database away")
    writer.gate.set()
    starts = StartQueue(writer)

    with pytest.raises(RuntimeError, match="database away"):
        starts.put(new("a")).result(5)
    writer.fail = None
    assert starts.put(new("b")).result(5) is None  # the thread goes on


def test_the_thread_ends_when_idle_and_starts_again() -> None:
    writer = Writer()
    writer.gate.set()
    starts = StartQueue(writer, idle_s=0.05)
    assert starts.put(new("a")).result(5) is None
    deadline = time.monotonic() + 5
    while starts.running:
        assert time.monotonic() < deadline, "the idle thread did not end"
        time.sleep(0.02)

    assert starts.put(new("b")).result(5) is None
    assert writer.calls == [["a"], ["b"]]
