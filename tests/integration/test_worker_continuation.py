"""A worker that decides what follows its own task (the continuation) against real stores.

The orchestrator and workers run as threads over one SQLite file, or over a fresh
PostgreSQL database; the tools are `noop`, so what is measured is who decided what.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from noetl.core import ExecutionStatus
from noetl.decision.decider import Decider
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import Store
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import NoopTool, ToolRegistry

CHAIN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain}
workflow:
  - step: s1
    tool: {kind: noop, args: {n: 1}}
    result: {as: a}
    next: s2
  - step: s2
    tool: {kind: noop, args: {n: "{{ a.n + 1 }}"}}
    result: {as: b}
    next: s3
  - step: s3
    tool: {kind: noop, args: {n: "{{ b.n + 1 }}"}}
    result: {as: c}
"""

FANOUT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fanout}
workflow:
  - step: fan
    loop: {collection: "{{ range(20) | list }}", element: x, mode: parallel}
    tool: {kind: noop, args: {x: "{{ x }}"}}
    result: {collect: {into: xs, mode: list}}
    next: after
  - step: after
    tool: {kind: noop, args: {count: "{{ xs | length }}"}}
    result: {as: total}
"""


BRANCHES = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: branches}
workflow:
  - step: start
    next: [A, B]
  - step: A
    tool: {kind: noop, args: {n: 1}}
    result: {as: a}
    next: join
  - step: B
    tool: {kind: noop, args: {n: 2}}
    result: {as: b}
    next: join
  - step: join
    when: "{{ done('A') and done('B') }}"
    tool: {kind: noop, args: {n: "{{ a.n + b.n }}"}}
    result: {as: total}
"""


class Cluster:
    """An orchestrator and workers as threads over one store."""

    def __init__(self, store: Store, *, workers: int, decide: bool, concurrency: int = 2) -> None:
        self.store = store
        self.orchestrator = Orchestrator(store, owner="server")
        self.stop = threading.Event()
        self.workers = [
            Worker(
                store,
                ToolRegistry([NoopTool()]),
                WorkerConfig(concurrency=concurrency, poll_s=0.02, worker_id=f"w{i}"),
                decider=Decider(store) if decide else None,
            )
            for i in range(workers)
        ]
        self.threads = [
            threading.Thread(
                target=self.orchestrator.serve, args=(self.stop.is_set,), kwargs={"idle_wait": 0.02}
            )
        ] + [threading.Thread(target=w.run, args=(self.stop.is_set,)) for w in self.workers]
        for thread in self.threads:
            thread.start()

    def run(self, text: str, timeout: float = 20.0) -> str:
        return self.run_many(text, 1, timeout)[0]

    def run_many(self, text: str, count: int, timeout: float = 20.0) -> list[str]:
        """Start `count` executions at once; their ids once all have finished."""
        execution_ids = [self.orchestrator.start_execution(text) for _ in range(count)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = [self.store.get_execution(e) for e in execution_ids]
            if all(record is not None and record.status.terminal for record in records):
                return execution_ids
            time.sleep(0.01)
        raise AssertionError(f"executions {execution_ids} did not all finish")

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def continued(self) -> int:
        return sum(w.stats.continued for w in self.workers)

    def reported(self) -> int:
        return sum(w.stats.completed for w in self.workers)


def shape(store: Store, execution_id: str) -> list[tuple[str, str | None]]:
    return [(e.type, e.step) for e in store.load_events(execution_id)]


def test_a_chain_is_continued_by_the_worker_with_the_same_log(store: Store) -> None:
    with Cluster(store, workers=1, decide=True) as cluster:
        execution_id = cluster.run(CHAIN)
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK
    assert record.context["c"] == {"n": 3}
    # Every outcome was decided by the worker: nothing went through the inbox.
    assert (cluster.continued(), cluster.reported()) == (3, 0)
    # The log is the one the server would have written.
    with Cluster(store, workers=1, decide=False) as other:
        reference = other.run(CHAIN)
    assert other.continued() == 0 and other.reported() == 3
    assert shape(store, execution_id) == shape(store, reference)


def test_a_parallel_loop_reports_items_to_the_server(store: Store) -> None:
    with Cluster(store, workers=2, decide=True) as cluster:
        execution_ids = [cluster.run(FANOUT) for _ in range(3)]
    for execution_id in execution_ids:
        record = store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.OK, record
        assert sorted(item["x"] for item in record.context["xs"]) == list(range(20))
        events = store.load_events(execution_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        started = collections.Counter(e.step for e in events if e.type == "step.started")
        assert started == {"fan": 1, "after": 1}
        finished = [e.payload["index"] for e in events if e.type == "loop.iteration.finished"]
        assert sorted(finished) == list(range(20))
    # Items with others in flight went to the server; some last items and the steps after
    # the loop were decided by the workers.
    assert cluster.reported() >= 3 * 10
    assert cluster.continued() >= 3
    assert cluster.reported() + cluster.continued() == 3 * 21


def test_a_cancel_that_lands_first_wins_over_the_continuation(store: Store) -> None:
    """The execution moved (a cancel was decided) between the task's claim and its end:
    the worker's commit fails on the sequence, and the outcome goes to the server."""
    orchestrator = Orchestrator(store, owner="server")
    decider = Decider(store)
    worker = Worker(store, ToolRegistry([NoopTool()]), WorkerConfig(worker_id="w"), decider=decider)
    execution_id = orchestrator.start_execution(CHAIN)
    [lease] = store.claim("w", limit=1)
    decider.load(execution_id)  # the worker's view, before the cancel
    assert orchestrator.cancel(execution_id)
    assert orchestrator.run_once() == 1

    follow = worker._report(lease, worker.tools.run(lease.task))

    assert follow == []
    assert (worker.stats.continued, worker.stats.completed) == (0, 1)
    assert orchestrator.run_once() == 1  # the late outcome is consumed and discarded
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.CANCELED
    types: list[Any] = [e.type for e in store.load_events(execution_id)]
    assert "step.finished" not in types


def ended_once(store: Store, execution_id: str, result: tuple[str, Any], steps: list[str]) -> None:
    """The execution ended ok with `result` (a context key and its value), its log is
    gapless, and each of `steps` started once."""
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert record.context[result[0]] == result[1]
    events = store.load_events(execution_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    started = collections.Counter(e.step for e in events if e.type == "step.started")
    assert started == dict.fromkeys(steps, 1)


class SlowCommits:
    """A store whose `continue_many` takes 20 ms longer, as under load: the
    continuations that end meanwhile wait for the next commit."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def continue_many(self, items: Any, **kwargs: Any) -> Any:
        time.sleep(0.02)
        return self._store.continue_many(items, **kwargs)


def test_continuations_that_end_together_commit_together(store: Store) -> None:
    slow: Any = SlowCommits(store)
    with Cluster(slow, workers=1, decide=True, concurrency=8) as cluster:
        execution_ids = cluster.run_many(CHAIN, 16)
    for execution_id in execution_ids:
        ended_once(store, execution_id, ("c", {"n": 3}), ["s1", "s2", "s3"])
    # Every outcome was decided by the worker, in fewer commits than continuations.
    assert (cluster.continued(), cluster.reported()) == (16 * 3, 0)
    [worker] = cluster.workers
    assert worker._continuation is not None
    assert worker._continuation.commits.calls < 16 * 3


def test_parallel_branches_one_worker_holds_are_continued_by_it(store: Store) -> None:
    """A and B are dispatched together by the start (neither solo); one worker claims
    both, so no other worker's outcome can come first: it decides both, and the join."""
    with Cluster(store, workers=1, decide=True, concurrency=4) as cluster:
        execution_id = cluster.run(BRANCHES)
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert record.context["total"] == {"n": 3}
    assert (cluster.continued(), cluster.reported()) == (3, 0)
    with Cluster(store, workers=1, decide=False, concurrency=4) as other:
        reference = other.run(BRANCHES)
    assert sorted(shape(store, execution_id)) == sorted(shape(store, reference))


def test_parallel_branches_on_two_workers_end_right(store: Store) -> None:
    with Cluster(store, workers=2, decide=True, concurrency=1) as cluster:
        execution_ids = cluster.run_many(BRANCHES, 6)
    for execution_id in execution_ids:
        ended_once(store, execution_id, ("total", {"n": 3}), ["start", "A", "B", "join"])
    assert cluster.continued() + cluster.reported() == 6 * 3
