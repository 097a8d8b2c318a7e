"""A worker runs the short python tasks of one claim in one thread, with one round trip to
a python child, and reports them together (`noetl.worker.ahead`).

An orchestrator and workers run as threads over one SQLite file; the python tasks run in
real child processes. `PythonPool.run_ahead` is wrapped to count the batches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import EventType, Task
from noetl.decision.workloads import Workloads
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import SqliteStore
from noetl.store.base import Store
from noetl.worker.ahead import Pace
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import default_registry
from tests.helpers.python_loops import count_batches, python_loop


class Cluster:
    """An orchestrator and workers (each with its own python pool) as threads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.orchestrator = Orchestrator(store, owner="server", reap_interval_s=0.1)
        self.halt = threading.Event()
        self.pools: list[PythonPool] = []
        self.workers: list[Worker] = []
        self.threads: list[threading.Thread] = []
        self._spawn(self.orchestrator.serve, self.halt.is_set, idle_wait=0.02)

    def _spawn(self, target: Any, *args: Any, **kwargs: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def worker(self, name: str, *, halt: threading.Event | None = None) -> Worker:
        pool = PythonPool(2)
        self.pools.append(pool)
        worker = Worker(
            self.store,
            default_registry(pool),
            WorkerConfig(concurrency=32, lease_s=2.0, poll_s=0.02, worker_id=name),
        )
        self.workers.append(worker)
        stop = halt or self.halt
        self._spawn(worker.run, lambda: stop.is_set() or self.halt.is_set())
        return worker

    def wait(self, execution_id: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.store.get_execution(execution_id)
            if record is not None and record.status.terminal:
                return str(record.status)
            time.sleep(0.01)
        raise AssertionError(f"execution {execution_id} did not finish")

    def finished(self, execution_id: str) -> dict[int, dict[str, Any]]:
        return {
            e.payload["index"]: e.payload
            for e in self.store.load_events(execution_id)
            if e.type == "loop.iteration.finished"
        }

    def expired(self, execution_id: str) -> int:
        """Leases that ran out: a report lost would show here, its task run again."""
        events = self.store.load_events(execution_id)
        return sum(1 for e in events if e.type == EventType.LEASE_EXPIRED.value)

    def close(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for pool in self.pools:
            pool.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = SqliteStore(tmp_path / "db.sqlite")
    running = Cluster(store)
    try:
        yield running
    finally:
        running.close()
        store.close()


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the batches sent to python children."""
    return count_batches(monkeypatch)


def counted(count: Callable[[], int], expected: int) -> int:
    """`count()` once it reaches `expected` (or after 5 s). A report is counted by its
    thread when the reporter's commit returns; the server may finish the execution before
    that thread runs again, so a count can trail the execution's end by a moment."""
    deadline = time.monotonic() + 5
    while count() < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return count()


def test_short_tasks_of_a_claim_go_to_a_child_together(
    cluster: Cluster, batches: list[int]
) -> None:
    worker = cluster.worker("w1")
    # The first execution's tasks show the worker that python tasks run short; the
    # second's claims then go to children in batches from the first.
    for n in (1, 2):
        text = python_loop(300, "return args['x'] * 2")
        execution_id = cluster.orchestrator.start_execution(text)
        assert cluster.wait(execution_id) == "ok"
        finished = cluster.finished(execution_id)
        assert sorted(finished) == list(range(300))
        assert all(payload["ok"] for payload in finished.values())
        assert cluster.expired(execution_id) == 0
        # each reported once, through the inbox
        assert counted(lambda: worker.stats.completed, 300 * n) == 300 * n
    assert batches and max(batches) > 1
    assert sum(batches) <= 600


def test_a_failing_and_a_timed_out_task_fail_alone_in_their_batch(
    cluster: Cluster, batches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Pace, "short", property(lambda self: True))  # from the first claim
    cluster.worker("w1")
    body = """if args['x'] == 13:
    time.sleep(30)
if args['x'] == 7:
    raise ValueError('seven')
return args['x'] * 2"""
    started = time.monotonic()
    execution_id = cluster.orchestrator.start_execution(python_loop(120, body, timeout_ms=1500))
    assert cluster.wait(execution_id) == "fail"
    assert time.monotonic() - started < 20  # nothing waited out the slow one's 30 s
    finished = cluster.finished(execution_id)
    failed = sorted(index for index, payload in finished.items() if not payload["ok"])
    assert failed == [7, 13]
    assert len(finished) == 120
    assert batches and max(batches) > 1
    assert cluster.expired(execution_id) == 0


def test_tasks_that_run_long_are_not_batched(cluster: Cluster, batches: list[int]) -> None:
    cluster.worker("w1")
    execution_id = cluster.orchestrator.start_execution(
        python_loop(60, "time.sleep(0.005)\nreturn args['x'] * 2")
    )
    assert cluster.wait(execution_id) == "ok"
    assert len(cluster.finished(execution_id)) == 60
    assert batches == []


def test_a_hard_stop_mid_batch_hands_the_batch_back_to_another_worker(
    cluster: Cluster, batches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tasks of 0.3 s each, batched all the same (as if the recent ones had been short).
    monkeypatch.setattr(Pace, "short", property(lambda self: True))
    stop_first = threading.Event()
    first = cluster.worker("w1", halt=stop_first)
    execution_id = cluster.orchestrator.start_execution(
        python_loop(10, "time.sleep(0.3)\nreturn args['x'] * 2")
    )
    deadline = time.monotonic() + 10
    while not batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batches, "the first worker never sent a batch"
    time.sleep(0.5)  # a task or two of the batch done, the rest still running or queued
    stop_first.set()
    second = cluster.worker("w2")
    assert cluster.wait(execution_id) == "ok"
    finished = cluster.finished(execution_id)
    assert sorted(finished) == list(range(10))
    assert all(payload["ok"] for payload in finished.values())
    assert first.stats.released > 0  # handed back at once, not left to expire
    assert counted(lambda: first.stats.completed + second.stats.completed, 10) >= 10
    assert cluster.expired(execution_id) == 0  # handed back, not left to expire


def test_a_batch_whose_workload_cannot_be_read_fails_instead_of_hanging(
    cluster: Cluster, batches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Pace, "short", property(lambda self: True))  # from the first claim

    def away(self: Workloads, task: Task) -> Task:
        raise RuntimeError("the store is away")

    monkeypatch.setattr(Workloads, "attach", away)
    worker = cluster.worker("w1")
    text = python_loop(40, "return args['x'] * 2")
    execution_id = cluster.orchestrator.start_execution(text)
    assert cluster.wait(execution_id) == "fail"  # not left leased (and heartbeaten) forever
    assert cluster.expired(execution_id) == 0
    processed = [
        e.payload for e in cluster.store.load_events(execution_id) if e.type == "tool.processed"
    ]
    assert processed and all(p["error_type"] == "ReportError" for p in processed)
    assert "the store is away" in processed[0]["error"]
    deadline = time.monotonic() + 5
    while worker.in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.in_flight() == 0
