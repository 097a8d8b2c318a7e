"""A worker's chain (`noetl.worker.chain`): the short python steps a continuation runs
past its task before it commits them all in one transaction, over a real store of each
kind. The log it writes is the one of steps committed one by one; a chain keeps to its
length and its time, and takes a step only once it has seen it run short; a step that
runs past the chain's time ends it without holding its commit; a chained step that fails
is reported once, through the inbox; and a chain whose commit is refused writes nothing
of what it ran."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from noetl.core import ExecutionStatus, Outcome, Task
from noetl.decision.decider import Decider
from noetl.decision.workloads import Workloads
from noetl.observability import NoopObserver
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import Completed, Completion, Lease, Store
from noetl.worker.ahead import Pace
from noetl.worker.chain import Chain, Overran
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import default_registry
from tests.integration.test_python_early import CHAIN, monkeypatch_pace


@pytest.fixture
def pool() -> Iterator[PythonPool]:
    with PythonPool(processes=2) as started:
        yield started


# A chain's time no step of these tests reaches however loaded the machine, so what they
# count follows the chain's rules, not the machine's speed; the tests of its time set theirs.
ROOMY_MS = 10_000.0


def worker_of(
    store: Store, pool: PythonPool, *, chain_steps: int = 8, chain_ms: float = ROOMY_MS
) -> Worker:
    worker = Worker(
        store,
        default_registry(pool),
        WorkerConfig(
            worker_id="w", concurrency=2, poll_s=0.02, chain_steps=chain_steps, chain_ms=chain_ms
        ),
        decider=Decider(store),
    )
    # As after short python tasks, whatever this machine's load makes of these ones.
    worker._pace.ms = 0.2
    monkeypatch_pace(worker)
    if worker._chain is not None:
        seen = functools.partial(Chain.observe, worker._chain)
        worker._chain.observe = lambda playbook, task, outcome: seen(  # type: ignore[method-assign]
            playbook, task, dataclasses.replace(outcome, duration_ms=1.0)
        )
    return worker


def claimed(store: Store, worker: Worker) -> Lease:
    """The first task of a new execution, claimed by `worker` as its claim does."""
    [lease] = store.claim("w", limit=1)
    worker._in_flight.track([lease])
    return lease


def run_all(worker: Worker, lease: Lease) -> None:
    """The task, then every task its continuations lease to the worker, in this thread."""
    worker._go_on(worker._run(lease))


def taught(store: Store, worker: Worker, orchestrator: Orchestrator, playbook: str) -> str:
    """One execution of `playbook` run by `worker` while its recent python tasks did not
    run short: it commits each step on its own (a step not seen yet is chained only while
    they do), and has seen each step run (a step seen is chained when it last ran short)."""
    worker._pace.ms = 5.0
    execution_id = orchestrator.start_execution(playbook)
    before = commits(worker)
    run_all(worker, claimed(store, worker))
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert commits(worker) - before == 6  # nothing seen yet: nothing chained
    worker.stats.continued = 0
    worker._pace.ms = 5.0  # steps seen since are chained whatever the recent pace
    return execution_id


def commits(worker: Worker) -> int:
    assert worker._continuation is not None
    return worker._continuation.commits.calls


def history(store: Store, execution_id: str) -> list[tuple[int, str, str | None]]:
    return [(e.seq, str(e.type), e.step) for e in store.load_events(execution_id)]


def task_ids(store: Store, execution_id: str) -> list[str]:
    """The ids of the tasks the execution's log dispatched, in order."""
    seen: list[str] = []
    for event in store.load_events(execution_id):
        task = event.payload.get("task")
        if isinstance(task, dict) and task.get("task_id") not in seen:
            seen.append(task["task_id"])
    return seen


def test_a_chain_writes_the_log_of_steps_committed_one_by_one_in_one_commit(
    store: Store, pool: PythonPool
) -> None:
    orchestrator = Orchestrator(store, owner="server")
    logs, states = [], []
    for steps in (0, 8):  # each step committed alone, then the whole chain at once
        worker = worker_of(store, pool, chain_steps=steps)
        taught(store, worker, orchestrator, CHAIN)
        before = commits(worker)
        execution_id = orchestrator.start_execution(CHAIN)
        run_all(worker, claimed(store, worker))

        record = store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.OK, record
        assert record.context["v"] == 6
        assert worker.stats.continued == 6  # every step decided on the worker
        assert commits(worker) - before == (6 if steps == 0 else 1)
        logs.append(history(store, execution_id))
        states.append(store.get_steps(execution_id))
        dispatched = task_ids(store, execution_id)
        assert len(dispatched) == 6
        rows = [store.get_task(task_id) is not None for task_id in dispatched]
        # The chained tasks ran where they were decided: their dispatch events record
        # them, no queue row does.
        assert rows == ([True] * 6 if steps == 0 else [True] + [False] * 5)
    assert logs[0] == logs[1]
    assert states[0] == states[1]
    assert set(states[1]) == {f"s{i}" for i in range(6)}


def ran_ok(store: Store, worker: Worker, orchestrator: Orchestrator) -> dict[str, Any]:
    """A new execution of CHAIN run by `worker` (ended `ok`): its context."""
    execution_id = orchestrator.start_execution(CHAIN)
    run_all(worker, claimed(store, worker))
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    return record.context


def test_steps_not_seen_yet_are_chained_while_the_recent_python_tasks_ran_short(
    store: Store, pool: PythonPool
) -> None:
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool)  # as after short python tasks
    assert ran_ok(store, worker, orchestrator)["v"] == 6
    assert (commits(worker), worker.stats.continued) == (1, 6)


def test_only_python_tasks_without_secrets_sinks_or_a_loop_are_chained(
    store: Store, pool: PythonPool
) -> None:
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool)
    execution_id = taught(store, worker, orchestrator, CHAIN)
    assert worker._continuation is not None and worker._chain is not None
    engine = worker._continuation.decider.engine(CHAIN, None)
    s1 = Task("t", execution_id, "s1", "python", spec={}, args={}, context={}, key="s1")
    assert worker._chain.may_run(engine, s1)
    for other in (
        dataclasses.replace(s1, sinks=({"kind": "file"},)),
        dataclasses.replace(s1, secrets=("token",)),
        dataclasses.replace(s1, index=0),
        dataclasses.replace(s1, kind="http"),
        dataclasses.replace(s1, execution_id="not-known-here"),  # its workload is not at hand
    ):
        assert not worker._chain.may_run(engine, other), other


def chained_once_taught(
    store: Store, pool: PythonPool, *, chain_steps: int = 8, chain_ms: float = ROOMY_MS
) -> tuple[Worker, str]:
    """A worker that has seen CHAIN's steps, and a second execution it ran (done, `ok`)."""
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool, chain_steps=chain_steps, chain_ms=chain_ms)
    taught(store, worker, orchestrator, CHAIN)
    execution_id = orchestrator.start_execution(CHAIN)
    run_all(worker, claimed(store, worker))
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert record.context["v"] == 6
    return worker, execution_id


def test_a_chain_keeps_to_its_length(store: Store, pool: PythonPool) -> None:
    worker, execution_id = chained_once_taught(store, pool, chain_steps=2)
    # s0 with s1 and s2; then s3 (leased by that commit) with s4 and s5.
    assert commits(worker) == 6 + 2
    rows = [store.get_task(task_id) is not None for task_id in task_ids(store, execution_id)]
    assert rows == [True, False, False, True, False, False]


def test_a_chain_keeps_to_its_time(store: Store, pool: PythonPool) -> None:
    worker, _ = chained_once_taught(store, pool, chain_ms=0)
    assert commits(worker) == 6 + 6  # no time to run anything past a task: one each


def test_a_step_that_last_ran_long_is_not_chained(store: Store, pool: PythonPool) -> None:
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool)
    taught(store, worker, orchestrator, CHAIN)
    chain = worker._chain
    assert chain is not None
    record_of = functools.partial(Chain.observe, chain)  # not as short as `worker_of` says

    def slow_s3(playbook: object, task: Task, outcome: Outcome) -> None:
        took = 2 * ROOMY_MS if task.step == "s3" else 1.0  # s3 past the chain's time
        record_of(playbook, task, dataclasses.replace(outcome, duration_ms=took))

    chain.observe = slow_s3  # type: ignore[method-assign]
    taught_again = orchestrator.start_execution(CHAIN)  # s3 last ran long now
    run_all(worker, claimed(store, worker))
    before = commits(worker)
    execution_id = orchestrator.start_execution(CHAIN)
    run_all(worker, claimed(store, worker))

    for done in (taught_again, execution_id):
        record = store.get_execution(done)
        assert record is not None and record.status is ExecutionStatus.OK, record
    # s0 with s1 and s2; s3 on its own (leased by that commit), then s4 and s5 with it.
    assert commits(worker) - before == 2
    rows = [store.get_task(task_id) is not None for task_id in task_ids(store, execution_id)]
    assert rows == [True, False, False, True, False, False]


FAILING = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain_fails}
workflow:
  - step: first
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
    next: second
  - step: second
    tool:
      kind: python
      code: |
        def main(context, args):
            with open(args['path'], 'a') as fh:
                fh.write('ran\\n')
            raise ValueError('second refuses')
      args: {path: "PATH"}
"""


def test_a_chained_step_that_fails_is_reported_once_through_the_inbox(
    store: Store, pool: PythonPool, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool)
    text = FAILING.replace("PATH", str(runs))
    engine = worker._continuation.decider.engine(text, None) if worker._continuation else None
    assert engine is not None and worker._chain is not None
    second = Task("seen", "e", "second", "python", spec={}, args={}, context={}, key="second")
    worker._chain.observe(engine, second, Outcome("seen", ok=True, duration_ms=1.0))
    execution_id = orchestrator.start_execution(text)
    run_all(worker, claimed(store, worker))
    assert orchestrator.run_once() >= 1  # the server decides the failure

    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.FAIL, record
    assert runs.read_text() == "ran\n"  # run in the chain, reported by its lease: once
    assert (worker.stats.continued, worker.stats.completed) == (1, 1)
    failed = [e for e in store.load_events(execution_id) if e.step == "second"]
    assert any("second refuses" in str(e.payload) for e in failed)


def test_a_chain_whose_commit_is_refused_writes_nothing_it_ran(
    store: Store, pool: PythonPool
) -> None:
    """The execution is canceled while the chain runs its second step: the commit fails
    on its sequence, nothing the chain ran is written, and the first task's outcome goes
    to the inbox, where the server decides it after the cancel."""
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool)
    taught(store, worker, orchestrator, CHAIN)
    execution_id = orchestrator.start_execution(CHAIN)
    chain = worker._chain
    assert chain is not None
    run: Callable[[object, Task, float], Outcome | Overran | None] = chain.run

    def cancel_then_run(playbook: object, task: Task, within_s: float) -> Outcome | Overran | None:
        if task.step == "s2":
            assert orchestrator.cancel(execution_id)
            assert orchestrator.run_once() == 1  # decided: the worker is now behind
        return run(playbook, task, within_s)

    chain.run = cancel_then_run  # type: ignore[method-assign]
    run_all(worker, claimed(store, worker))
    orchestrator.run_once()

    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.CANCELED, record
    assert (worker.stats.continued, worker.stats.completed) == (0, 1)
    steps = {step for _, _, step in history(store, execution_id) if step}
    assert steps & {"s1", "s2", "s3"} == set()  # ran in the chain, never written


LONG_MIDDLE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain_long_middle}
workflow:
  - step: first
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
    next: slow
  - step: slow
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            print('slow began')
            time.sleep(0.6)
            with open(args['path'], 'a') as fh:
                fh.write('ran\\n')
            return 2
      args: {path: "PATH"}
    next: last
  - step: last
    tool: {kind: python, code: "def main(context, args):\\n    return 3\\n"}
"""


def test_a_step_that_runs_past_the_chains_time_ends_it_without_holding_its_commit(
    store: Store, pool: PythonPool, tmp_path: Path
) -> None:
    """`slow` is not seen yet and the recent python tasks ran short, so the chain takes
    it; it runs past the chain's time: the commit of `first` goes while `slow` still
    runs, leasing `slow` to the worker, which takes its reply (run once, its printed
    lines kept) and chains `last` on it."""
    runs = tmp_path / "runs.txt"
    orchestrator = Orchestrator(store, owner="server")
    worker = worker_of(store, pool, chain_ms=25.0)  # `slow` sleeps 0.6 s
    assert worker._continuation is not None
    seen_at_commits: list[bool] = []  # whether `slow` had ended at each commit
    commit_many = worker._continuation.store.continue_many

    def watched(items: Sequence[Completion], *, worker_id: str, lease_s: float) -> list[Completed]:
        seen_at_commits.append(runs.exists())
        return commit_many(items, worker_id=worker_id, lease_s=lease_s)

    worker._continuation.store.continue_many = watched  # type: ignore[method-assign,assignment]
    execution_id = orchestrator.start_execution(LONG_MIDDLE.replace("PATH", str(runs)))
    run_all(worker, claimed(store, worker))

    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    assert runs.read_text() == "ran\n"  # run once: in its child, taken by its lease
    assert seen_at_commits == [False, True]  # `first` committed while `slow` ran
    rows = [store.get_task(task_id) is not None for task_id in task_ids(store, execution_id)]
    assert rows == [True, True, False]  # `slow` leased by the first commit, `last` chained
    printed = [e for e in store.load_events(execution_id) if e.step == "slow"]
    assert any("slow began" in str(e.payload) for e in printed)


class NoChildFree(PythonPool):
    """A pool whose children are never free at once for a task sent early."""

    def start_early(self, task: Task) -> bool:
        return False


def test_with_no_child_free_only_steps_seen_short_are_chained(store: Store) -> None:
    with NoChildFree(processes=2) as busy:
        orchestrator = Orchestrator(store, owner="server")
        worker = worker_of(store, busy)  # as after short python tasks
        assert ran_ok(store, worker, orchestrator)["v"] == 6
        assert commits(worker) == 6  # not seen yet, and no child to wait on: none chained

        worker._pace.ms = 5.0  # seen short since: chained, each waiting for a child
        assert ran_ok(store, worker, orchestrator)["v"] == 6
        assert commits(worker) == 6 + 1


def test_a_chained_task_a_middleware_ends_before_its_child_replies_frees_that_child(
    pool: PythonPool,
) -> None:
    """A task whose script file was not read fails in its chain before the python tool
    takes the reply of the child it was sent to: that child comes back to the pool."""
    chain = Chain(
        default_registry(pool),
        Pace(),
        Workloads(lambda execution_id: {}),
        lambda: False,
        NoopObserver(),
    )
    ok = Task("ok", "e", "s", "python", spec={"code": "def main():\n    return 1\n"},
              args={}, context={}, key="s")  # fmt: skip
    playbook = Playbookish()
    chain.observe(playbook, ok, Outcome("ok", ok=True, duration_ms=1.0))  # seen short
    unread = dataclasses.replace(ok, task_id="unread", spec={**ok.spec, "script": "x.py"})
    for attempt in range(3):  # as many times as the pool has children, and more
        assert pool.run(dataclasses.replace(ok, task_id=f"up{attempt}")).ok  # a child is up
        outcome = chain.run(playbook, dataclasses.replace(unread, attempt=attempt), 5.0)
        assert isinstance(outcome, Outcome) and outcome.error_type == "FatalError", outcome
        assert not pool._early  # sent early, never taken by its run: given up
        assert (len(pool._free), len(pool._busy)) == (2, 0)  # its child back in the pool
    again = chain.run(playbook, dataclasses.replace(ok, task_id="again"), 5.0)
    assert isinstance(again, Outcome) and again.ok, again


class Playbookish:
    """What stands for one playbook in a chain's durations (its engine, in a worker)."""
