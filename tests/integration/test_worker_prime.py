"""A claim of several new executions' tasks reads their states together (one read on
PostgreSQL, `Store.load_executions`) before the tasks run; when that read fails, each
task reads its own, and every execution still ends as it would."""

from __future__ import annotations

import threading
import time
from typing import Any

from noetl.core import ExecutionStatus
from noetl.decision.decider import Decider
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import Store
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import NoopTool, ToolRegistry
from tests.integration.test_worker_continuation import BRANCHES


class Reads:
    """The worker's decider's store: the store itself, its reads of executions counted
    (and `load_executions` failing when `broken`)."""

    def __init__(self, store: Store, *, broken: bool = False) -> None:
        self._store = store
        self.broken = broken
        self.many: list[list[str]] = []
        self.one: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def load_executions(self, execution_ids: Any, *, max_events: int) -> Any:
        self.many.append(sorted(execution_ids))
        if self.broken:
            raise RuntimeError("the database went away")
        return self._store.load_executions(execution_ids, max_events=max_events)

    def load_execution(self, execution_id: str) -> Any:
        self.one.append(execution_id)
        return self._store.load_execution(execution_id)


def run(store: Store, reads: Reads, count: int) -> list[str]:
    """Start `count` executions of BRANCHES (two tasks each, queued), then run one worker
    of 2 * count slots (its first claim takes them all) and the server until all end."""
    orchestrator = Orchestrator(store, owner="server")
    execution_ids = [orchestrator.start_execution(BRANCHES) for _ in range(count)]
    config = WorkerConfig(concurrency=2 * count, poll_s=0.02, worker_id="w")
    worker = Worker(store, ToolRegistry([NoopTool()]), config, decider=Decider(reads))  # type: ignore[arg-type]
    stop = threading.Event()
    wait = {"idle_wait": 0.02}
    threads = [
        threading.Thread(target=orchestrator.serve, args=(stop.is_set,), kwargs=wait),
        threading.Thread(target=worker.run, args=(stop.is_set,)),
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            records = [store.get_execution(e) for e in execution_ids]
            if all(r is not None and r.status.terminal for r in records):
                break
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    for execution_id in execution_ids:
        record = store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.OK, record
        assert record.context["total"] == {"n": 3}
    return execution_ids


def test_a_claim_of_new_executions_reads_their_states_together(store: Store) -> None:
    reads = Reads(store)

    execution_ids = run(store, reads, 4)

    assert reads.many[0] == sorted(execution_ids)
    assert not set(reads.one) & set(execution_ids)  # every task found its state read


def test_when_that_read_fails_each_task_reads_its_own(store: Store) -> None:
    reads = Reads(store, broken=True)

    execution_ids = run(store, reads, 3)

    assert reads.many[0] == sorted(execution_ids)
    assert set(reads.one) == set(execution_ids)
