"""The next python step of a chain starts in a child while the commit that leases it is
sent (`PythonPool.start_early`, `noetl.worker.ahead.EarlyStart`): the pool's side (the
reply taken late, its timeout, a cancel, a task given up) and a worker's (a chain over a
real store, and a commit that fails and stops the step it started)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest

from noetl.core import ExecutionStatus, Task
from noetl.decision.decider import Decider
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import Lease, Store
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import default_registry
from tests.integration.test_python_ahead import task

ADD = "def main(context, args):\n    return args['v'] + 1\n"
SLEEP = "import time\n\ndef main(context, args):\n    time.sleep(args['s'])\n    return 1\n"
PRINT = "def main(context, args):\n    print('early', args['v'])\n    return args['v']\n"


@pytest.fixture
def pool() -> Iterator[PythonPool]:
    with PythonPool(processes=1) as single:
        assert not single.start_early(task(0, ADD, v=0))  # its child has not started yet
        assert single.run(task(0, ADD, v=0)).this == 1  # now it has
        yield single


def test_a_task_sent_early_runs_meanwhile_and_its_run_takes_the_reply(pool: PythonPool) -> None:
    sent = task(1, SLEEP, s=0.3)
    began = time.monotonic()
    assert pool.start_early(sent)
    time.sleep(0.3)  # the caller's own work (the commit), while the child runs the task
    outcome = pool.run(sent)
    took = time.monotonic() - began

    assert outcome.ok and outcome.this == 1
    assert took < 0.5  # it ran during the caller's wait, not after it
    # Its duration is the child's own count, not the time until its reply was read.
    assert outcome.duration_ms is not None and 290 <= outcome.duration_ms < 450
    assert pool.run(task(2, ADD, v=1)).this == 2  # the child is free again


def test_early_needs_a_free_child_and_a_runnable_spec(pool: PythonPool) -> None:
    first = task(1, ADD, v=1)
    assert pool.start_early(first)
    assert not pool.start_early(task(2, ADD, v=2))  # the one child is taken: nothing sent
    assert pool.run(first).this == 2
    bad = dataclasses.replace(task(3, ADD, v=3), spec={})
    assert not pool.start_early(bad)
    assert not pool.start_early(task(4, ADD, timeout_ms=0, v=4))
    assert pool.run(task(5, ADD, v=5)).this == 6


def test_an_early_task_keeps_its_timeout_from_when_it_was_sent(pool: PythonPool) -> None:
    slow = task(1, SLEEP, timeout_ms=300, s=5)
    assert pool.start_early(slow)
    time.sleep(0.4)  # past its timeout already
    began = time.monotonic()
    outcome = pool.run(slow)

    assert not outcome.ok and outcome.error_type == "TimeoutError"
    assert time.monotonic() - began < 0.2  # not another 300 ms
    assert pool.run(task(2, ADD, v=1)).this == 2  # replaced


def test_an_early_task_given_up_is_stopped_and_its_child_replaced(pool: PythonPool) -> None:
    slow = task(1, SLEEP, s=30)
    assert pool.start_early(slow)
    [pid] = pool.pids
    pool.forget_early(slow)

    assert pool.run(task(2, ADD, v=1)).this == 2  # a new child, at once
    assert pool.pids != [pid]
    pool.forget_early(slow)  # twice: nothing left to do


def test_an_early_task_can_be_canceled_and_passes_on_what_it_printed(pool: PythonPool) -> None:
    printed = task(1, PRINT, v=7)
    assert pool.start_early(printed)
    outcome = pool.run(printed)
    assert outcome.ok and outcome.this == 7 and "early 7" in (outcome.stdout or "")

    slow = task(2, SLEEP, s=30)
    assert pool.start_early(slow)
    assert pool.cancel(slow.task_id)
    canceled = pool.run(slow)
    assert not canceled.ok and canceled.error_type == "CancelError"


CHAIN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain}
workflow:
""" + "".join(
    f"""  - step: s{i}
    tool:
      kind: python
      code: "def main(context, args):\\n    return args['v'] + 1\\n"
      args: {{v: {"0" if i == 0 else '"{{ v }}"'}}}
    result: {{as: v}}
{f"    next: s{i + 1}" if i < 5 else ""}
"""
    for i in range(6)
)


class Counting(PythonPool):
    """A pool that counts the tasks sent early and those given up."""

    def __init__(self) -> None:
        super().__init__(processes=2)
        self.early: list[str] = []
        self.forgotten: list[str] = []

    def start_early(self, task: Task) -> bool:
        sent = super().start_early(task)
        if sent:
            self.early.append(task.step)
        return sent

    def forget_early(self, task: Task) -> None:
        if (task.task_id, task.attempt) in self._early:
            self.forgotten.append(task.step)
        super().forget_early(task)


def worker_of(store: Store) -> tuple[Worker, Counting]:
    pool = Counting()
    worker = Worker(
        store,
        default_registry(pool),
        # No chain (noetl.worker.chain, tested on its own): each step is committed alone.
        WorkerConfig(worker_id="w", concurrency=2, poll_s=0.02, chain_steps=0),
        decider=Decider(store),
    )
    # As after short python tasks, whatever this machine's load makes of these ones.
    worker._pace.ms = 0.2
    monkeypatch_pace(worker)
    return worker, pool


def monkeypatch_pace(worker: Worker) -> None:
    worker._pace.observe = lambda task, outcome: None  # type: ignore[method-assign]


def started(orchestrator: Orchestrator, store: Store, worker: Worker) -> tuple[str, Lease]:
    """A new execution of CHAIN, and its first task claimed by `worker`."""
    execution_id = orchestrator.start_execution(CHAIN)
    [lease] = store.claim("w", limit=1)
    worker._in_flight.track([lease])  # as its claim does
    return execution_id, lease


def test_a_chain_runs_each_next_step_while_its_commit_is_sent(store: Store) -> None:
    orchestrator = Orchestrator(store, owner="server")
    worker, pool = worker_of(store)
    with pool:
        execution_id, lease = started(orchestrator, store, worker)
        worker._go_on(worker._run(lease))  # s0, then each continuation in this thread

    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert record.context["v"] == 6
    assert worker.stats.continued == 6
    # Each next step started before the commit that leased it.
    assert pool.early == ["s1", "s2", "s3", "s4", "s5"]
    assert pool.forgotten == []


def test_a_commit_that_fails_stops_the_step_it_started(store: Store) -> None:
    """The execution moved (a cancel was decided) after the worker loaded it: its commit
    fails, the next step it had sent to a child is stopped, the outcome goes to the
    inbox and nothing follows on the worker."""
    orchestrator = Orchestrator(store, owner="server")
    worker, pool = worker_of(store)
    with pool:
        execution_id, lease = started(orchestrator, store, worker)
        [nxt] = worker._run(lease)  # s0 continued: s1 sent early, then leased to the worker
        assert orchestrator.cancel(execution_id)
        assert orchestrator.run_once() == 1  # the cancel is decided: the worker is behind

        follow = worker._run(nxt)

        assert follow == []
        assert pool.early == ["s1", "s2"]
        assert pool.forgotten == ["s2"]  # sent early, never leased: stopped
        assert pool.run(task(9, ADD, v=1)).this == 2
    orchestrator.run_once()
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.CANCELED
