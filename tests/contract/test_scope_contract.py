"""The Store contract of a command that works for one execution on a shared database:
claims, input claims and reaping scoped to some executions, an execution's family, and
giving a claimed task back. Every adapter runs it through the `store` fixture."""

from __future__ import annotations

import dataclasses

from noetl.store.base import Append, Enqueue, InputKind, Store, TaskStatus
from tests.contract.test_queue_contract import (
    LONG_S,
    PAST_TINY_S,
    TINY_S,
    change,
    claim_one,
    make_record,
    make_task,
    start,
    started,
    status,
    steps_of,
)
from tests.helpers.clock import StoreClock


def two_executions(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    start(store, Enqueue(make_task("a", execution_id="e2"), priority=5), execution_id="e2")


def test_a_scoped_claim_takes_only_the_named_executions_tasks(store: Store) -> None:
    two_executions(store)

    leases = store.claim("w1", limit=10, executions=["e1"])

    assert sorted(lease.task.task_id for lease in leases) == ["e1.a", "e1.b"]
    assert status(store, "e2.a") == TaskStatus.QUEUED
    assert store.claim("w1", limit=10, executions=["e1"]) == []
    assert store.claim("w1", limit=10, executions=[]) == []
    assert steps_of(store.claim("w2", limit=10)) == ["a"]  # an unscoped claim: the rest


def test_scoped_input_claims_and_reaping_leave_other_executions_alone(
    store: Store, clock: StoreClock
) -> None:
    two_executions(store)
    mine = store.post_input("e1", InputKind.CANCEL, {"n": 1})
    theirs = store.post_input("e2", InputKind.CANCEL, {"n": 2})

    assert [i.id for i in store.claim_inputs("cli", executions={"e1"}, lease_s=LONG_S)] == [mine]
    assert store.claim_inputs("cli", executions={"e1"}) == []
    assert store.claim_inputs("cli", executions=set()) == []

    store.claim("w1", limit=10, lease_s=TINY_S)
    clock.advance(PAST_TINY_S)
    assert store.reap_expired(executions=["e2"]) == 1
    assert status(store, "e2.a") == TaskStatus.EXPIRED
    assert status(store, "e1.a") == TaskStatus.LEASED  # not reaped by the scoped call
    assert store.reap_expired(executions=[]) == 0
    held = store.claim_inputs("server", limit=10, lease_s=LONG_S)
    assert [(i.execution_id, i.kind) for i in held] == [
        ("e2", InputKind.CANCEL),
        ("e2", InputKind.LEASE_EXPIRED),
    ]
    assert held[0].id == theirs


def test_the_family_of_an_execution_is_it_and_its_descendants(store: Store) -> None:
    def child(execution_id: str, parent: str) -> None:
        record = dataclasses.replace(make_record(execution_id), parent_execution_id=parent)
        store.create_execution(record, Append(execution_id, 0, started(execution_id), now=1.0))

    start(store)
    start(store, execution_id="other")
    child("c1", "e1")
    child("c2", "e1")
    child("g1", "c2")
    child("x1", "other")

    assert store.execution_family("e1") == ["e1", "c1", "c2", "g1"]
    assert store.execution_family("c2") == ["c2", "g1"]
    assert store.execution_family("g1") == ["g1"]
    assert store.execution_family("nope") == []


def test_a_released_task_is_queued_again_and_its_holder_fenced_off(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    lease = claim_one(store, "w1", limit=1, lease_s=LONG_S)
    other = claim_one(store, "w2", limit=1, lease_s=LONG_S)

    assert store.release([(lease.task.task_id, lease.token + 1)]) == set()  # a stale token
    assert store.release([(lease.task.task_id, lease.token)]) == {lease.task.task_id}
    assert store.release([(lease.task.task_id, lease.token)]) == set()  # once

    row = store.get_task(lease.task.task_id)
    assert row is not None
    assert (row["status"], row["attempt"], row["worker_id"]) == (TaskStatus.QUEUED, 1, None)
    assert store.heartbeat(lease.task.task_id, lease.token).alive is False
    assert store.complete(lease.task.task_id, lease.token, {"ok": True}) is False
    again = claim_one(store, "w3", limit=10)
    assert (again.task.task_id, again.task.attempt) == (lease.task.task_id, 1)
    assert again.token > lease.token
    assert status(store, other.task.task_id) == TaskStatus.LEASED
    assert store.claim_inputs("o1") == []  # a release is not an outcome


def test_a_released_task_whose_execution_asked_to_cancel_it_is_canceled(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store, "w1")
    change(store, cancel_tasks=["e1.a"])

    assert store.release([("e1.a", lease.token)]) == {"e1.a"}

    assert status(store, "e1.a") == TaskStatus.CANCELED
    assert store.claim("w2", limit=10) == []
