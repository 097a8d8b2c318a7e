"""The Store contract of what goes to the store together: a worker's continuations that
end together (`continue_many`) and the starts the API makes together
(`create_executions`).

Every adapter applies each item as `complete_and_commit` or `create_execution` would;
PostgreSQL applies them in one transaction, and one at a time when that transaction is
refused, so one refused item never holds back the others.
"""

from __future__ import annotations

import pytest

from noetl.core import Event, ExecutionStatus
from noetl.store.base import (
    Append,
    Completed,
    Completion,
    ConcurrencyError,
    Enqueue,
    ExecutionRecord,
    NewExecution,
    Store,
    TaskStatus,
    Timer,
)
from tests.contract.test_queue_contract import (
    LONG_S,
    PAST_TINY_S,
    TINY_S,
    claim_one,
    last_seq,
    make_record,
    make_task,
    start,
    started,
    status,
)
from tests.helpers.clock import StoreClock


def follow(execution_id: str, expected: int = 1, *steps: str) -> Append:
    """The step `a` of `execution_id` done, and `steps` queued after it."""
    return Append(
        execution_id,
        expected,
        [Event(expected + 1, "tool.processed", execution_id, 2.0, "a", {"ok": True})],
        steps={"a": {"status": "ok"}},
        enqueue=[Enqueue(make_task(step, execution_id)) for step in steps],
        now=2.0,
    )


def leased(result: Completed) -> list[str]:
    """The task ids a completion leased (it must have been applied)."""
    assert isinstance(result, list), result
    return [lease.task.task_id for lease in result]


def running(store: Store, *execution_ids: str) -> dict[str, int]:
    """Start each execution with its step `a` leased to w1: the tokens by execution."""
    tokens = {}
    for execution_id in execution_ids:
        start(store, Enqueue(make_task("a", execution_id)), execution_id=execution_id)
        tokens[execution_id] = claim_one(store, lease_s=LONG_S).token
    return tokens


def test_continuations_of_several_executions_commit_with_their_own_leases(store: Store) -> None:
    tokens = running(store, "e1", "e2", "e3")
    items = [
        Completion("e1.a", tokens["e1"], follow("e1", 1, "b", "c"), ["e1.b"]),
        Completion("e2.a", tokens["e2"], follow("e2", 1, "b"), ["e2.b"]),
        Completion("e3.a", tokens["e3"], follow("e3", 1)),  # its last step: nothing follows
    ]

    results = store.continue_many(items, worker_id="w9", lease_s=LONG_S)

    assert [leased(result) for result in results] == [["e1.b"], ["e2.b"], []]
    first = results[0]
    assert isinstance(first, list)
    assert (first[0].worker_id, first[0].task) == ("w9", make_task("b", "e1"))
    for execution_id in ("e1", "e2", "e3"):
        assert status(store, f"{execution_id}.a") == TaskStatus.DONE
        assert last_seq(store, execution_id) == 2
        assert store.get_steps(execution_id) == {"a": {"status": "ok"}}
    assert status(store, "e1.c") == TaskStatus.QUEUED  # not asked for: left to claims
    assert [lease.task.task_id for lease in store.claim("w2", limit=10)] == ["e1.c"]
    assert store.claim_inputs("o1") == []  # decided already: nothing for an orchestrator


def test_a_lost_lease_refuses_its_own_continuation_only(store: Store, clock: StoreClock) -> None:
    start(store, Enqueue(make_task("a", "e1")), execution_id="e1")
    lost = claim_one(store, lease_s=TINY_S)
    clock.advance(PAST_TINY_S)
    assert store.reap_expired() == 1
    tokens = running(store, "e2")
    items = [
        Completion("e1.a", lost.token, follow("e1", 1, "b"), ["e1.b"]),
        Completion("e2.a", tokens["e2"], follow("e2", 1, "b"), ["e2.b"]),
    ]

    results = store.continue_many(items, worker_id="w1", lease_s=LONG_S)

    assert results[0] is None
    assert leased(results[1]) == ["e2.b"]
    assert store.get_task("e1.b") is None  # nothing of the refused one was written
    assert last_seq(store, "e1") == 1
    assert last_seq(store, "e2") == 2


def test_a_stale_sequence_is_its_own_concurrency_error(store: Store) -> None:
    tokens = running(store, "e1", "e2")
    store.commit([Append("e1", 1, [Event(2, "cancel", "e1", 2.0)])])  # e1 moved on
    items = [
        Completion("e1.a", tokens["e1"], follow("e1", 1, "b"), ["e1.b"]),
        Completion("e2.a", tokens["e2"], follow("e2", 1, "b"), ["e2.b"]),
    ]

    results = store.continue_many(items, worker_id="w1", lease_s=LONG_S)

    assert isinstance(results[0], ConcurrencyError)
    assert results[0].execution_ids == ("e1",)
    assert status(store, "e1.a") == TaskStatus.LEASED  # so the outcome can still be reported
    assert store.get_task("e1.b") is None
    assert leased(results[1]) == ["e2.b"]
    assert status(store, "e2.a") == TaskStatus.DONE


def test_a_value_the_store_refuses_fails_its_own_continuation_only(store: Store) -> None:
    tokens = running(store, "e1", "e2")
    bad = Append("e1", 1, [Event(3, "tool.processed", "e1", 2.0, "a")], now=2.0)  # a gap
    items = [
        Completion("e1.a", tokens["e1"], bad),
        Completion("e2.a", tokens["e2"], follow("e2", 1, "b"), ["e2.b"]),
    ]

    results = store.continue_many(items, worker_id="w1", lease_s=LONG_S)

    assert isinstance(results[0], ValueError)
    assert "without gaps" in str(results[0])
    assert last_seq(store, "e1") == 1
    assert status(store, "e1.a") == TaskStatus.LEASED
    assert leased(results[1]) == ["e2.b"]


def test_two_continuations_of_one_execution_are_refused(store: Store) -> None:
    tokens = running(store, "e1")
    items = [
        Completion("e1.a", tokens["e1"], follow("e1", 1)),
        Completion("e1.a", tokens["e1"], follow("e1", 2)),
    ]

    with pytest.raises(ValueError, match="two completions of execution e1"):
        store.continue_many(items, worker_id="w1")

    assert last_seq(store, "e1") == 1
    assert store.continue_many([], worker_id="w1") == []


# -- create_executions: starts that arrive together -----------------------------------------


def new_execution(execution_id: str, *steps: str) -> NewExecution:
    initial = Append(
        execution_id,
        0,
        started(execution_id),
        enqueue=[Enqueue(make_task(step, execution_id)) for step in steps],
        now=1.0,
    )
    return NewExecution(make_record(execution_id), initial, compiled=f'{{"id": "{execution_id}"}}')


def test_executions_created_together_are_each_whole(store: Store) -> None:
    results = store.create_executions(
        [new_execution("e1", "a"), new_execution("e2", "a", "b"), new_execution("e3")]
    )

    assert results == [None, None, None]
    for execution_id in ("e1", "e2", "e3"):
        assert last_seq(store, execution_id) == 1
        assert store.get_compiled(execution_id) == f'{{"id": "{execution_id}"}}'
    claimed = sorted(lease.task.task_id for lease in store.claim("w1", limit=10))
    assert claimed == ["e1.a", "e2.a", "e2.b"]


def test_an_execution_that_exists_is_refused_alone(store: Store) -> None:
    start(store, Enqueue(make_task("a", "e2")), execution_id="e2")
    assert claim_one(store).task.task_id == "e2.a"

    results = store.create_executions(
        [new_execution("e1", "a"), new_execution("e2", "z"), new_execution("e3", "a")]
    )

    assert results[0] is None and results[2] is None
    assert isinstance(results[1], ConcurrencyError)
    assert "e2 already exists" in str(results[1])
    assert store.get_task("e2.z") is None  # nothing of the refused one was written
    assert last_seq(store, "e2") == 1
    claimed = sorted(lease.task.task_id for lease in store.claim("w1", limit=10))
    assert claimed == ["e1.a", "e3.a"]
    assert store.create_executions([]) == []


def test_a_lone_start_whose_id_exists_is_refused(store: Store) -> None:
    start(store, Enqueue(make_task("a", "e1")))

    [refused] = store.create_executions([new_execution("e1", "z")])

    assert isinstance(refused, ConcurrencyError)
    assert "e1 already exists" in str(refused)
    assert store.get_task("e1.z") is None
    assert last_seq(store, "e1") == 1


def test_executions_created_together_read_back_as_made(store: Store) -> None:
    odd = {"text": 'tab\tquote"nul\x00end', "nested": {"list": [1, 2.5, None, True]}, "é": "ü"}
    records = [
        ExecutionRecord(
            "p1", "parent", None, "name: parent\n", created_at=100.25, updated_at=100.5,
            context={"a": 1},
        ),
        ExecutionRecord(
            "c1", "child", "playbooks/child.yaml", "name: child\nsteps: [\"x\"]\n",
            created_at=101.0, updated_at=101.0, parent_execution_id="p1", context=odd,
        ),
    ]  # fmt: skip
    initial = [Append(r.execution_id, 0, started(r.execution_id), now=2.0) for r in records]

    results = store.create_executions(
        [NewExecution(r, a) for r, a in zip(records, initial, strict=True)]
    )

    assert results == [None, None]
    for made in records:
        stored = store.get_execution(made.execution_id)
        assert stored is not None
        assert (
            stored.playbook_name, stored.playbook_path, stored.playbook_text,
            stored.parent_execution_id, stored.context, stored.status, stored.last_seq,
        ) == (
            made.playbook_name, made.playbook_path, made.playbook_text,
            made.parent_execution_id, made.context, ExecutionStatus.RUNNING, 1,
        )  # fmt: skip
        assert stored.created_at == pytest.approx(made.created_at, abs=1e-6)
        assert stored.finished_at is None
        assert store.get_compiled(made.execution_id) is None


def test_a_start_with_a_timer_goes_in_with_the_rest(store: Store) -> None:
    timed = new_execution("e2", "a")
    timed = NewExecution(
        timed.record,
        Append("e2", 0, started("e2"), now=1.0, timers=[Timer(3600.0, {"step": "later"})]),
    )

    results = store.create_executions([new_execution("e1", "a"), timed])

    assert results == [None, None]
    assert (last_seq(store, "e1"), last_seq(store, "e2")) == (1, 1)
    assert [lease.task.task_id for lease in store.claim("w1", limit=10)] == ["e1.a"]
