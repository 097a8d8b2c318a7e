"""The orchestrator against a real SQLite store: batched commits and racing servers."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from noetl.core import ExecutionStatus
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import SqliteStore
from noetl.store.base import InputKind, Store

TWO_STEPS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: two}
workflow:
  - step: s1
    tool: {kind: noop, args: {n: 1}}
    next: s2
  - step: s2
    tool: {kind: noop, args: {n: 2}}
"""


def work(store: Store) -> int:
    """A fake worker: complete every queued task with its args."""
    leases = store.claim("w", limit=100, lease_s=30)
    for lease in leases:
        outcome = {"task_id": lease.task.task_id, "ok": True, "this": lease.task.args}
        assert store.complete(lease.task.task_id, lease.token, outcome)
    return len(leases)


def test_batch_falls_back_when_another_server_advanced_an_execution(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    first = Orchestrator(store, owner="a", input_lease_s=0.0)
    other = Orchestrator(store, owner="b", input_lease_s=0.0)
    one = first.start_execution(TWO_STEPS)
    two = first.start_execution(TWO_STEPS)
    # Only `one`'s first task reports, and the OTHER server decides on it: the first
    # server's cached state of `one` is now behind the log.
    leases = {le.task.execution_id: le for le in store.claim("w", limit=10)}
    for execution_id in (one, two):
        lease = leases[execution_id]
        outcome = {"task_id": lease.task.task_id, "ok": True}
        assert store.complete(lease.task.task_id, lease.token, outcome)
        if execution_id == one:
            assert other.run_once() == 1
    fallbacks: list[str] = []
    decide_one_by_one = first._decide_inputs

    def spy(execution_id, items, attempts=3):  # type: ignore[no-untyped-def]
        fallbacks.append(execution_id)
        decide_one_by_one(execution_id, items, attempts)

    first._decide_inputs = spy  # type: ignore[method-assign]
    for _ in range(10):
        work(store)
        first.run_once()
    # The batch commit failed on `one`'s stale state: only `one` was decided again, and
    # `two`'s decision was committed without it.
    assert fallbacks == [one]
    for execution_id in (one, two):
        record = store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.OK
        events = store.load_events(execution_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        started = collections.Counter(e.step for e in events if e.type == "step.started")
        assert started == {"s1": 1, "s2": 1}
    store.close()


def test_one_commit_for_inputs_of_many_executions(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    orchestrator = Orchestrator(store, owner="a")
    ids = [orchestrator.start_execution(TWO_STEPS) for _ in range(5)]
    commits: list[int] = []
    original = store.commit

    def counting(appends):  # type: ignore[no-untyped-def]
        commits.append(len(appends))
        original(appends)

    store.commit = counting  # type: ignore[method-assign]
    assert work(store) == 5
    assert orchestrator.run_once() == 5
    assert commits == [5]
    assert work(store) == 5
    assert orchestrator.run_once() == 5
    assert all(store.get_execution(i).status is ExecutionStatus.OK for i in ids)  # type: ignore[union-attr]
    store.close()


def test_a_prune_between_turns_leaves_running_executions_whole(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    orchestrator = Orchestrator(store, owner="a", input_lease_s=0.0)
    done = orchestrator.start_execution(TWO_STEPS)
    for _ in range(3):
        work(store)
        orchestrator.run_once()
    assert store.get_execution(done).status is ExecutionStatus.OK  # type: ignore[union-attr]
    running = orchestrator.start_execution(TWO_STEPS)
    assert work(store) == 1  # its first task reported, not decided yet

    report = store.prune(time.time() + 60, dead_letters_before=0.0)
    assert report.executions == 1
    # A late input for the pruned execution is dropped, not decided (nor retried forever).
    store.post_input(done, InputKind.CANCEL, {"by": "test"})
    for _ in range(3):
        orchestrator.run_once()
        work(store)
    orchestrator.run_once()

    record = store.get_execution(running)
    assert record is not None and record.status is ExecutionStatus.OK
    started = collections.Counter(
        e.step for e in store.load_events(running) if e.type == "step.started"
    )
    assert started == {"s1": 1, "s2": 1}
    assert store.claim_inputs("check", lease_s=1.0) == []
    store.close()
