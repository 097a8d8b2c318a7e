"""The Store contract of distributed mode: task queue, inbox, playbooks and workers.

Every adapter runs this suite through the `store` fixture, so it speaks only the `Store`
protocol. Leases are judged by the store's clock; tests use tiny lease and hold times and
let them pass with `clock.advance` (the `clock` fixture: a fake clock for the embedded
adapters, a short sleep for PostgreSQL, whose leases are timed by the database clock).
Behaviour only one adapter can have (several SQLite connections on one file, memory
wake-ups) is tested below the shared suite.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Event, ExecutionStatus, Task
from noetl.store.base import (
    Append,
    ConcurrencyError,
    Enqueue,
    ExecutionRecord,
    InputKind,
    Lease,
    NotFoundError,
    Requeue,
    Store,
    TaskStatus,
    WorkerRecord,
)
from noetl.store.memory import MemoryStore
from noetl.store.sqlite import SqliteStore
from tests.helpers.clock import FakeClock, StoreClock

# Long enough to never pass during a test; short enough to pass by `clock.advance`.
LONG_S = 60.0
TINY_S = 0.01
PAST_TINY_S = 0.05


def make_record(execution_id: str = "e1") -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=execution_id,
        playbook_name="demo",
        playbook_path="playbooks/demo.yaml",
        playbook_text="name: demo\n",
        created_at=100.0,
        updated_at=100.0,
    )


def make_task(step: str, execution_id: str = "e1", **changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": f"{execution_id}.{step}",
        "execution_id": execution_id,
        "step": step,
        "kind": "python",
        "spec": {"code": "def main(): return 1"},
        "args": {"n": [1, "ü"]},
        "context": {"workload": {"x": 1}},
        "key": f"{execution_id}:{step}",
        "timeout_ms": 500,
    }
    fields.update(changes)
    return Task(**fields)


def started(execution_id: str = "e1") -> list[Event]:
    return [Event(1, "workflow.started", execution_id, 1.0, payload={"workload": {}})]


def start(store: Store, *enqueue: Enqueue, execution_id: str = "e1") -> None:
    """Create an execution whose first event (seq 1) enqueues `enqueue`."""
    initial = Append(execution_id, 0, started(execution_id), enqueue=list(enqueue), now=1.0)
    store.create_execution(make_record(execution_id), initial)


def last_seq(store: Store, execution_id: str = "e1") -> int:
    record = store.get_execution(execution_id)
    assert record is not None
    return record.last_seq


def change(store: Store, execution_id: str = "e1", **queue: Any) -> None:
    """Commit queue changes only (no events) at the execution's current sequence."""
    store.commit([Append(execution_id, last_seq(store, execution_id), [], now=2.0, **queue)])


def status(store: Store, task_id: str) -> str:
    row = store.get_task(task_id)
    assert row is not None
    return str(row["status"])


def claim_one(store: Store, worker_id: str = "w1", **kwargs: Any) -> Lease:
    leases = store.claim(worker_id, **kwargs)
    assert len(leases) == 1, leases
    return leases[0]


def steps_of(leases: list[Lease]) -> list[str]:
    return [lease.task.step for lease in leases]


# -- create_execution with its first append -----------------------------------------------


def test_create_execution_with_initial_append_enqueues_atomically(
    store: Store, clock: StoreClock
) -> None:
    task = make_task("a")
    before = clock()
    start(store, Enqueue(task, pool="default", priority=3))

    assert store.load_events("e1") == started()
    assert last_seq(store) == 1
    row = store.get_task("e1.a")
    assert row is not None
    assert row["not_before"] >= before - 5
    assert row == {
        "task_id": "e1.a",
        "execution_id": "e1",
        "step": "a",
        "pool": "default",
        "priority": 3,
        "status": TaskStatus.QUEUED,
        "attempt": 1,
        "lease_token": 0,
        "lease_expires_at": None,
        "worker_id": None,
        "cancel_requested": False,
        "not_before": row["not_before"],
        "payload": task.to_dict(),
    }
    lease = claim_one(store)
    assert lease.task == task
    assert (lease.token, lease.worker_id) == (1, "w1")


def test_create_execution_without_initial_creates_no_tasks(store: Store) -> None:
    store.create_execution(make_record("e1"))

    assert store.load_events("e1") == []
    assert store.claim("w1", limit=10) == []


def test_a_failing_create_execution_leaves_no_execution_and_no_task(store: Store) -> None:
    stale = Append("e1", 1, [Event(2, "t", "e1", 1.0)], enqueue=[Enqueue(make_task("a"))])
    with pytest.raises(ConcurrencyError):
        store.create_execution(make_record("e1"), stale)
    gapped = Append("e1", 0, [Event(2, "t", "e1", 1.0)], enqueue=[Enqueue(make_task("a"))])
    with pytest.raises(ValueError, match="without gaps"):
        store.create_execution(make_record("e1"), gapped)
    other = Append("e2", 0, started("e2"))
    with pytest.raises(ValueError, match="e2"):
        store.create_execution(make_record("e1"), other)

    assert store.get_execution("e1") is None
    assert store.get_task("e1.a") is None
    assert store.claim("w1", limit=10) == []


def test_create_execution_for_an_existing_id_adds_no_task(store: Store) -> None:
    start(store, Enqueue(make_task("a")))

    again = Append("e1", 0, started(), enqueue=[Enqueue(make_task("b"))], now=1.0)
    with pytest.raises(ConcurrencyError, match="already exists"):
        store.create_execution(make_record("e1"), again)

    assert store.get_task("e1.b") is None
    assert steps_of(store.claim("w1", limit=10)) == ["a"]


def test_a_task_of_another_execution_is_rejected(store: Store) -> None:
    store.create_execution(make_record("e1"))
    wrong = Append("e1", 0, [], enqueue=[Enqueue(make_task("a", execution_id="e2"))])

    with pytest.raises(ValueError, match="belongs to execution e2"):
        store.commit([wrong])

    assert store.get_task("e2.a") is None


# -- claiming -----------------------------------------------------------------------------


def test_claim_takes_only_its_pool(store: Store) -> None:
    start(store, Enqueue(make_task("cpu")), Enqueue(make_task("gpu"), pool="gpu"))

    assert steps_of(store.claim("w1", pool="gpu", limit=10)) == ["gpu"]
    assert store.claim("w1", pool="gpu", limit=10) == []
    assert store.claim("w1", pool="other", limit=10) == []
    assert steps_of(store.claim("w1", limit=10)) == ["cpu"]


def test_claim_waits_for_not_before(store: Store, clock: StoreClock) -> None:
    start(store, Enqueue(make_task("later"), delay_s=LONG_S))
    assert store.claim("w1", limit=10) == []

    change(store, enqueue=[Enqueue(make_task("soon"), delay_s=TINY_S)])
    clock.advance(PAST_TINY_S)

    assert steps_of(store.claim("w1", limit=10)) == ["soon"]
    assert store.claim("w1", limit=10) == []
    assert status(store, "e1.later") == TaskStatus.QUEUED


def test_claim_order_is_priority_then_age_then_insertion(store: Store) -> None:
    start(
        store,
        Enqueue(make_task("p0")),
        Enqueue(make_task("p5-first"), priority=5),
        Enqueue(make_task("p1"), priority=1),
        Enqueue(make_task("p5-second"), priority=5),
        Enqueue(make_task("neg"), priority=-1),
    )
    change(store, enqueue=[Enqueue(make_task("p5-third"), priority=5)])

    leases = store.claim("w1", limit=10)

    assert steps_of(leases) == ["p5-first", "p5-second", "p5-third", "p1", "p0", "neg"]


def test_a_requeued_task_goes_behind_older_ones(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    assert claim_one(store).task.step == "a"

    change(store, requeue=[Requeue("e1.a", attempt=2)])

    assert steps_of(store.claim("w1", limit=10)) == ["b", "a"]


def test_claim_respects_limit(store: Store) -> None:
    start(store, *(Enqueue(make_task(f"s{i}")) for i in range(5)))

    assert store.claim("w1", limit=0) == []
    assert steps_of(store.claim("w1", limit=2)) == ["s0", "s1"]
    assert steps_of(store.claim("w2")) == ["s2"]
    assert steps_of(store.claim("w3", limit=10)) == ["s3", "s4"]
    assert store.claim("w3", limit=10) == []
    with pytest.raises(ValueError, match="limit"):
        store.claim("w1", limit=-1)


def test_claim_leases_the_row(store: Store, clock: StoreClock) -> None:
    start(store, Enqueue(make_task("a")))
    before = clock()

    lease = claim_one(store, "w1", lease_s=LONG_S)

    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["worker_id"], row["lease_token"]) == (TaskStatus.LEASED, "w1", 1)
    assert row["lease_expires_at"] == pytest.approx(lease.expires_at, abs=1e-3)
    # epoch seconds from the store's clock: close to this machine's
    assert before + LONG_S - 5 < lease.expires_at < clock() + LONG_S + 5


def test_concurrent_claimers_never_share_a_task(store: Store) -> None:
    count, workers = 60, 6
    start(store, *(Enqueue(make_task(f"s{i}")) for i in range(count)))
    claimed: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(workers)

    def work(worker_id: str) -> None:
        barrier.wait()
        while leases := store.claim(worker_id, limit=3):
            with lock:
                claimed.extend((worker_id, lease.task.task_id, lease.token) for lease in leases)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    task_ids = [task_id for _, task_id, _ in claimed]
    assert sorted(task_ids) == sorted(f"e1.s{i}" for i in range(count))
    for worker_id, task_id, token in claimed:
        row = store.get_task(task_id)
        assert row is not None
        assert (row["worker_id"], row["lease_token"], token) == (worker_id, 1, 1)


# -- heartbeat, complete, fencing ----------------------------------------------------------


def test_heartbeat_extends_the_current_lease(store: Store, clock: StoreClock) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store, lease_s=TINY_S)

    answer = store.heartbeat("e1.a", lease.token, lease_s=LONG_S)

    assert (answer.alive, answer.cancel) == (True, False)
    row = store.get_task("e1.a")
    assert row is not None
    assert row["lease_expires_at"] > lease.expires_at + LONG_S / 2
    clock.advance(PAST_TINY_S)
    assert store.reap_expired() == 0
    assert status(store, "e1.a") == TaskStatus.LEASED


def test_stale_token_changes_nothing(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store)
    before = store.get_task("e1.a")

    for token in (lease.token - 1, lease.token + 1):
        assert store.heartbeat("e1.a", token, lease_s=LONG_S).alive is False
        assert store.complete("e1.a", token, {"task_id": "e1.a", "ok": True}) is False

    assert store.heartbeat("nope", 1).alive is False
    assert store.complete("nope", 1, {}) is False
    assert store.get_task("e1.a") == before
    assert store.claim_inputs("o1") == []


def test_complete_marks_done_and_adds_exactly_one_outcome(store: Store, clock: StoreClock) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store)
    outcome: dict[str, Any] = {"task_id": "e1.a", "ok": True, "this": {"rows": [1, "é"]}}

    assert store.complete("e1.a", lease.token, outcome) is True
    outcome["this"] = "mutated after the call"

    assert status(store, "e1.a") == TaskStatus.DONE
    inputs = store.claim_inputs("o1", lease_s=TINY_S)
    assert [(i.execution_id, i.kind, i.payload) for i in inputs] == [
        ("e1", InputKind.OUTCOME, {"task_id": "e1.a", "ok": True, "this": {"rows": [1, "é"]}})
    ]
    # a duplicate report is refused and adds nothing
    assert store.complete("e1.a", lease.token, {"task_id": "e1.a", "ok": False}) is False
    assert store.heartbeat("e1.a", lease.token).alive is False
    clock.advance(PAST_TINY_S)
    assert [i.id for i in store.claim_inputs("o2")] == [inputs[0].id]


# -- complete_and_commit: an outcome decided by the worker that ran it ---------------------


def test_complete_and_commit_finishes_appends_and_leases_in_one_step(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store, lease_s=LONG_S)
    follow = Append(
        "e1",
        1,
        [Event(2, "tool.processed", "e1", 2.0, "a", {"ok": True})],
        steps={"a": {"status": "ok"}},
        enqueue=[Enqueue(make_task("b")), Enqueue(make_task("c"))],
        now=2.0,
    )

    leases = store.complete_and_commit("e1.a", lease.token, follow, worker_id="w1", lease=["e1.b"])

    assert leases is not None
    assert [(x.task.task_id, x.worker_id, x.token) for x in leases] == [("e1.b", "w1", 1)]
    assert leases[0].task == make_task("b")
    assert status(store, "e1.a") == TaskStatus.DONE
    assert status(store, "e1.b") == TaskStatus.LEASED
    assert status(store, "e1.c") == TaskStatus.QUEUED
    assert last_seq(store) == 2
    assert store.get_steps("e1") == {"a": {"status": "ok"}}
    assert store.claim_inputs("o1") == []  # decided already: nothing for the orchestrator
    assert steps_of(store.claim("w2", limit=10)) == ["c"]
    assert store.heartbeat("e1.b", leases[0].token).alive is True


def test_complete_and_commit_leases_a_task_called_again_with_its_next_token(
    store: Store,
) -> None:
    # A step called again by the decision on its own outcome (a cycle): its row is
    # queued again and leased at once, with a token above every earlier lease's.
    start(store, Enqueue(make_task("a")))
    first = claim_one(store, lease_s=LONG_S)
    again = Append(
        "e1",
        1,
        [Event(2, "tool.processed", "e1", 2.0, "a", {"ok": True})],
        enqueue=[Enqueue(make_task("a", args={"round": 2})), Enqueue(make_task("b"))],
        now=2.0,
    )

    leases = store.complete_and_commit(
        "e1.a", first.token, again, worker_id="w2", lease=["e1.b", "e1.a"]
    )

    assert leases is not None
    assert [(x.task.task_id, x.worker_id) for x in leases] == [("e1.b", "w2"), ("e1.a", "w2")]
    assert leases[1].task == make_task("a", args={"round": 2})
    assert leases[1].token > first.token
    assert store.heartbeat("e1.a", first.token).alive is False
    assert store.heartbeat("e1.a", leases[1].token).alive is True
    assert store.claim("w3", limit=10) == []


def test_the_solo_hint_travels_with_the_task(store: Store) -> None:
    start(store, Enqueue(make_task("a"), solo=True), Enqueue(make_task("b")))

    leases = {lease.task.step: lease for lease in store.claim("w1", limit=10)}

    assert (leases["a"].solo, leases["b"].solo) == (True, False)
    assert leases["a"].task == make_task("a")  # the hint is not part of the task


def test_complete_and_commit_with_a_stale_token_writes_nothing(
    store: Store, clock: StoreClock
) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store, lease_s=TINY_S)
    clock.advance(PAST_TINY_S)
    assert store.reap_expired() == 1
    follow = Append("e1", 1, [Event(2, "t", "e1", 2.0)], enqueue=[Enqueue(make_task("b"))])

    assert store.complete_and_commit("e1.a", lease.token, follow, worker_id="w1") is None
    assert last_seq(store) == 1
    assert store.get_task("e1.b") is None
    assert status(store, "e1.a") == TaskStatus.EXPIRED


def test_complete_and_commit_on_a_stale_sequence_keeps_the_lease(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store, lease_s=LONG_S)
    change(store)  # nothing changes, but the check is still made at seq 1
    store.commit([Append("e1", 1, [Event(2, "cancel", "e1", 2.0)])])
    stale = Append("e1", 1, [Event(2, "t", "e1", 2.0)], enqueue=[Enqueue(make_task("b"))])

    with pytest.raises(ConcurrencyError) as caught:
        store.complete_and_commit("e1.a", lease.token, stale, worker_id="w1", lease=["e1.b"])

    assert caught.value.execution_ids == ("e1",)
    assert last_seq(store) == 2
    assert store.get_task("e1.b") is None
    assert status(store, "e1.a") == TaskStatus.LEASED  # so the outcome can still be reported
    assert store.complete("e1.a", lease.token, {"task_id": "e1.a", "ok": True}) is True


def test_a_concurrency_error_names_every_stale_execution(store: Store) -> None:
    for execution_id in ("e1", "e2", "e3"):
        start(store, execution_id=execution_id)

    with pytest.raises(ConcurrencyError) as caught:
        store.commit(
            [
                Append("e1", 0, [Event(1, "t", "e1", 1.0)]),
                Append("e2", 1, [Event(2, "t", "e2", 1.0)]),
                Append("e3", 5, []),
            ]
        )

    assert sorted(caught.value.execution_ids) == ["e1", "e3"]
    assert [last_seq(store, e) for e in ("e1", "e2", "e3")] == [1, 1, 1]


def test_the_compiled_playbook_is_kept_with_the_execution(store: Store) -> None:
    store.create_execution(make_record("e1"), compiled='{"k": "ü"}')
    store.create_execution(make_record("e2"))

    assert store.get_compiled("e1") == '{"k": "ü"}'
    assert store.get_compiled("e2") is None
    assert store.get_compiled("nope") is None


def test_complete_many_accepts_each_current_report_on_its_own(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")), Enqueue(make_task("c")))
    leases = {lease.task.step: lease for lease in store.claim("w1", limit=3, lease_s=LONG_S)}
    reports = [
        ("e1.a", leases["a"].token, {"task_id": "e1.a", "ok": True, "this": "é"}),
        ("e1.b", leases["b"].token + 5, {"task_id": "e1.b", "ok": True}),  # stale token
        ("e1.c", leases["c"].token, {"task_id": "e1.c", "ok": False, "error": "x"}),
        ("e1.nope", 1, {"task_id": "e1.nope", "ok": True}),
    ]

    assert store.complete_many(reports) == {"e1.a", "e1.c"}
    assert store.complete_many([]) == set()

    assert [status(store, f"e1.{s}") for s in "abc"] == ["done", "leased", "done"]
    payloads = sorted(
        (i.payload["task_id"], i.payload.get("this")) for i in store.claim_inputs("o1")
    )
    assert payloads == [("e1.a", "é"), ("e1.c", None)]
    assert store.complete_many(reports[:1]) == set()  # a duplicate report is refused


def test_complete_many_writes_nothing_when_one_outcome_cannot_be_stored(store: Store) -> None:
    """All or none, so a worker can send the reports again one by one and fail only the
    one the store refuses (noetl.worker.reporting)."""
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    leases = {lease.task.step: lease for lease in store.claim("w1", limit=2, lease_s=LONG_S)}
    reports = [
        ("e1.a", leases["a"].token, {"task_id": "e1.a", "ok": True, "this": 1}),
        ("e1.b", leases["b"].token, {"task_id": "e1.b", "ok": True, "this": {1, 2}}),
    ]
    with pytest.raises(TypeError, match="not JSON serializable"):
        store.complete_many(reports)
    assert [status(store, f"e1.{s}") for s in "ab"] == ["leased", "leased"]
    assert store.claim_inputs("o1") == []
    assert store.complete_many(reports[:1]) == {"e1.a"}


def test_an_expired_lease_is_reaped_and_its_holder_fenced_off(
    store: Store, clock: StoreClock
) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    lease = claim_one(store, "w1", lease_s=TINY_S)
    claim_one(store, "w2", lease_s=LONG_S)
    clock.advance(PAST_TINY_S)

    assert store.reap_expired() == 1
    assert store.reap_expired() == 0

    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["lease_token"], row["worker_id"]) == (TaskStatus.EXPIRED, 1, "w1")
    assert status(store, "e1.b") == TaskStatus.LEASED
    inputs = store.claim_inputs("o1")
    assert [(i.execution_id, i.kind, i.payload) for i in inputs] == [
        ("e1", InputKind.LEASE_EXPIRED, {"task_id": "e1.a", "attempt": 1, "worker_id": "w1"})
    ]
    assert store.heartbeat("e1.a", lease.token).alive is False
    assert store.complete("e1.a", lease.token, {"task_id": "e1.a", "ok": True}) is False
    assert store.claim_inputs("o2") == []
    assert store.claim("w3", limit=10) == []


def test_reap_expired_respects_limit(store: Store, clock: StoreClock) -> None:
    start(store, *(Enqueue(make_task(f"s{i}")) for i in range(3)))
    store.claim("w1", limit=3, lease_s=TINY_S)
    clock.advance(PAST_TINY_S)

    assert store.reap_expired(limit=2) == 2
    assert store.reap_expired(limit=2) == 1
    assert len(store.claim_inputs("o1")) == 3


def test_requeue_makes_a_task_claimable_again_with_a_higher_token(
    store: Store, clock: StoreClock
) -> None:
    start(store, Enqueue(make_task("a")))
    first = claim_one(store, "w1", lease_s=TINY_S)
    clock.advance(PAST_TINY_S)
    assert store.reap_expired() == 1
    (expired,) = store.claim_inputs("o1")

    change(store, requeue=[Requeue("e1.a", attempt=2)], inputs_done=[expired.id])

    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["attempt"], row["lease_expires_at"]) == (
        TaskStatus.QUEUED,
        2,
        None,
    )
    second = claim_one(store, "w2", lease_s=LONG_S)
    assert second.token > first.token
    assert second.task == make_task("a", attempt=2)
    assert store.complete("e1.a", first.token, {"ok": True}) is False
    assert store.complete("e1.a", second.token, {"ok": True}) is True


def test_requeue_honours_its_delay_and_clears_a_cancel_request(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    claim_one(store, lease_s=LONG_S)
    change(store, cancel_tasks=["e1.a"])

    change(store, requeue=[Requeue("e1.a", attempt=3, delay_s=LONG_S)])

    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["attempt"], row["cancel_requested"]) == (
        TaskStatus.QUEUED,
        3,
        False,
    )
    assert store.claim("w1", limit=10) == []


def test_enqueueing_a_task_id_again_requeues_it_with_growing_tokens(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    first = claim_one(store)
    assert store.complete("e1.a", first.token, {"ok": True}) is True

    change(store, enqueue=[Enqueue(make_task("a", args={"run": 2}), priority=1)])

    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["priority"], row["payload"]["args"]) == (
        TaskStatus.QUEUED,
        1,
        {"run": 2},
    )
    second = claim_one(store)
    assert second.token == first.token + 1
    assert second.task.args == {"run": 2}


# -- canceling ----------------------------------------------------------------------------


def test_cancel_tasks_cancels_queued_and_flags_leased(store: Store) -> None:
    start(store, Enqueue(make_task("queued")), Enqueue(make_task("leased"), priority=1))
    lease = claim_one(store)
    assert lease.task.step == "leased"
    assert store.heartbeat("e1.leased", lease.token).cancel is False

    change(store, cancel_tasks=["e1.queued", "e1.leased", "e1.unknown"])

    assert status(store, "e1.queued") == TaskStatus.CANCELED
    assert store.claim("w2", limit=10) == []
    row = store.get_task("e1.leased")
    assert row is not None
    assert (row["status"], row["cancel_requested"]) == (TaskStatus.LEASED, True)
    answer = store.heartbeat("e1.leased", lease.token)
    assert (answer.alive, answer.cancel) == (True, True)
    assert store.heartbeat("e1.leased", lease.token + 1).cancel is False


def test_cancel_leaves_finished_tasks_alone(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    lease = claim_one(store)
    store.complete("e1.a", lease.token, {"ok": True})
    before = store.get_task("e1.a")

    change(store, cancel_tasks=["e1.a"])

    assert store.get_task("e1.a") == before


def test_an_execution_changes_only_its_own_tasks_and_inputs(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    start(store, Enqueue(make_task("a", execution_id="e2")), execution_id="e2")
    input_id = store.post_input("e1", InputKind.CANCEL, {"by": "test"})
    before = store.get_task("e1.a")

    change(
        store,
        "e2",
        requeue=[Requeue("e1.a", attempt=5)],
        cancel_tasks=["e1.a"],
        inputs_done=[input_id],
    )

    assert store.get_task("e1.a") == before
    assert [i.id for i in store.claim_inputs("o1")] == [input_id]


# -- a rejected commit changes nothing -----------------------------------------------------


def test_concurrency_error_rolls_back_queue_changes_and_inbox_deletions(store: Store) -> None:
    start(store, Enqueue(make_task("queued")), Enqueue(make_task("leased"), priority=1))
    claim_one(store, lease_s=LONG_S)
    store.create_execution(make_record("e2"))
    input_id = store.post_input("e1", InputKind.CANCEL, {"by": "test"})
    before = {task_id: store.get_task(task_id) for task_id in ("e1.queued", "e1.leased")}
    changes: dict[str, Any] = {
        "enqueue": [Enqueue(make_task("new"))],
        "requeue": [Requeue("e1.leased", attempt=2)],
        "cancel_tasks": ["e1.queued", "e1.leased"],
        "inputs_done": [input_id],
    }

    # a stale append alone, with and without events
    for events in ([], [Event(1, "t", "e1", 1.0)]):
        with pytest.raises(ConcurrencyError):
            store.commit([Append("e1", 0, events, **changes)])
    # a good append followed by a stale one
    good = Append("e1", 1, [Event(2, "t", "e1", 1.0)], **changes)
    with pytest.raises(ConcurrencyError):
        store.commit([good, Append("e2", 7, [])])
    # an unknown execution after a good append
    with pytest.raises(NotFoundError):
        store.commit([good, Append("nope", 0, [])])

    assert last_seq(store) == 1
    assert store.get_task("e1.new") is None
    assert {task_id: store.get_task(task_id) for task_id in before} == before
    assert [i.id for i in store.claim_inputs("o1")] == [input_id]


def test_an_append_without_events_still_checks_expected_seq(
    store: Store, clock: StoreClock
) -> None:
    start(store)
    input_id = store.post_input("e1", InputKind.CANCEL, {"by": "test"})

    with pytest.raises(ConcurrencyError, match="store has 1"):
        store.commit([Append("e1", 0, [], inputs_done=[input_id])])
    assert [i.id for i in store.claim_inputs("o1", lease_s=TINY_S)] == [input_id]

    store.commit([Append("e1", 1, [], inputs_done=[input_id])])
    clock.advance(PAST_TINY_S)
    assert store.claim_inputs("o2") == []
    assert last_seq(store) == 1


# -- the inbox ------------------------------------------------------------------------------


def test_post_input_needs_an_existing_execution(store: Store) -> None:
    with pytest.raises(NotFoundError, match="nope"):
        store.post_input("nope", InputKind.CANCEL, {"by": "test"})

    assert store.claim_inputs("o1") == []


def test_claim_inputs_oldest_first_and_held_from_other_owners(
    store: Store, clock: StoreClock
) -> None:
    start(store)
    start(store, execution_id="e2")
    before = clock()
    ids = [
        store.post_input("e1", InputKind.CANCEL, {"n": 0}),
        store.post_input("e2", InputKind.OUTCOME, {"n": 1, "this": "ü"}),
        store.post_input("e1", InputKind.LEASE_EXPIRED, {"n": 2}),
    ]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3

    first = store.claim_inputs("o1", limit=2, lease_s=LONG_S)
    assert [(i.id, i.execution_id, i.kind, i.payload) for i in first] == [
        (ids[0], "e1", InputKind.CANCEL, {"n": 0}),
        (ids[1], "e2", InputKind.OUTCOME, {"n": 1, "this": "ü"}),
    ]
    assert all(before - 5 < i.created_at < clock() + 5 for i in first)
    assert [i.id for i in store.claim_inputs("o2", lease_s=LONG_S)] == [ids[2]]
    assert store.claim_inputs("o2") == []
    assert store.claim_inputs("o1") == []  # the holder does not get them twice either
    with pytest.raises(ValueError, match="limit"):
        store.claim_inputs("o1", limit=-1)


def test_a_hold_on_inputs_expires(store: Store, clock: StoreClock) -> None:
    start(store)
    ids = [store.post_input("e1", InputKind.CANCEL, {"n": n}) for n in range(3)]
    assert [i.id for i in store.claim_inputs("o1", limit=2, lease_s=TINY_S)] == ids[:2]
    clock.advance(PAST_TINY_S)

    assert [i.id for i in store.claim_inputs("o2", limit=10, lease_s=LONG_S)] == ids
    assert store.claim_inputs("o1") == []


def test_inputs_done_deletes_inputs(store: Store, clock: StoreClock) -> None:
    start(store)
    ids = [store.post_input("e1", InputKind.CANCEL, {"n": n}) for n in range(3)]
    store.claim_inputs("o1", lease_s=TINY_S)

    change(store, inputs_done=ids[:2])
    clock.advance(PAST_TINY_S)

    assert [i.id for i in store.claim_inputs("o2")] == ids[2:]
    # deleting again (a retried commit) is harmless
    change(store, inputs_done=ids[:2])
    assert last_seq(store) == 1


def test_wait_for_returns_false_when_nothing_arrives(store: Store) -> None:
    started_at = time.monotonic()

    assert store.wait_for("inputs", 0.02) is False
    assert store.wait_for("tasks", 0.0) is False

    assert time.monotonic() - started_at < 2.0
    with pytest.raises(ValueError, match="channel"):
        store.wait_for("nope", 0.0)


# -- playbooks --------------------------------------------------------------------------------


def test_playbook_versions(store: Store) -> None:
    v1 = store.register_playbook("etl/load.yaml", "load", "name: load\n", 10.0)
    same = store.register_playbook("etl/load.yaml", "load", "name: load\n", 11.0)
    v2 = store.register_playbook("etl/load.yaml", "load", "name: load\n# v2\n", 12.0)
    other = store.register_playbook("a/first.yaml", "first", "name: first\n", 13.0)
    back = store.register_playbook("etl/load.yaml", "load", "name: load\n", 14.0)

    assert (v1.path, v1.version, v1.name, v1.text, v1.created_at) == (
        "etl/load.yaml",
        1,
        "load",
        "name: load\n",
        10.0,
    )
    assert same == v1
    assert (v2.version, v2.created_at) == (2, 12.0)
    assert other.version == 1
    # the same text as an older (not the latest) version is a new version
    assert (back.version, back.text) == (3, "name: load\n")

    assert store.get_playbook("etl/load.yaml") == back
    assert store.get_playbook("etl/load.yaml", 1) == v1
    assert store.get_playbook("etl/load.yaml", 2) == v2
    assert store.get_playbook("etl/load.yaml", 4) is None
    assert store.get_playbook("etl/load.yaml", 0) is None
    assert store.get_playbook("missing.yaml") is None
    assert store.list_playbooks() == [other, back]


def test_no_playbooks(store: Store) -> None:
    assert store.list_playbooks() == []


# -- workers ----------------------------------------------------------------------------------


def make_worker(worker_id: str, pool: str = "default", **changes: Any) -> WorkerRecord:
    fields: dict[str, Any] = {
        "worker_id": worker_id,
        "pool": pool,
        "hostname": "host-1",
        "pid": 4242,
        "status": "running",
        "started_at": 50.0,
        "heartbeat_at": 50.0,
    }
    fields.update(changes)
    return WorkerRecord(**fields)


def test_workers_register_heartbeat_and_drain(store: Store, clock: StoreClock) -> None:
    cpu, gpu = make_worker("w-cpu"), make_worker("w-gpu", pool="gpu")
    store.register_worker(gpu)
    store.register_worker(cpu)
    assert store.list_workers() == [cpu, gpu]

    assert store.worker_heartbeat("w-cpu") == "running"
    (stamped, _) = store.list_workers()
    assert stamped.heartbeat_at > clock() - 5
    assert stamped == make_worker("w-cpu", heartbeat_at=stamped.heartbeat_at)

    assert store.request_drain("gpu") == 1
    assert store.worker_heartbeat("w-gpu") == "draining"
    assert store.worker_heartbeat("w-cpu") == "running"
    assert store.request_drain("nope") == 0
    assert store.request_drain() == 1
    assert store.request_drain() == 0
    assert [w.status for w in store.list_workers()] == ["draining", "draining"]

    # registering again replaces the row (a restarted worker)
    store.register_worker(make_worker("w-gpu", pool="gpu", pid=7, started_at=60.0))
    assert store.list_workers()[1] == make_worker("w-gpu", pool="gpu", pid=7, started_at=60.0)
    assert store.worker_heartbeat("w-gpu") == "running"
    store.register_worker(make_worker("w-gpu", pool="gpu", status="stopped"))
    assert store.request_drain() == 0


def test_unknown_and_invalid_workers(store: Store) -> None:
    assert store.list_workers() == []
    with pytest.raises(NotFoundError, match="w-none"):
        store.worker_heartbeat("w-none")
    with pytest.raises(ValueError, match="status"):
        store.register_worker(make_worker("w1", status="asleep"))
    assert store.list_workers() == []


# -- the embedded stores' clock ----------------------------------------------------------------


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
def test_an_embedded_store_without_a_clock_reads_the_system_clock(
    adapter: str, tmp_path: Path
) -> None:
    store: Store = MemoryStore() if adapter == "memory" else SqliteStore(tmp_path / "c.db")
    try:
        before = time.time()
        start(store, Enqueue(make_task("a")))
        lease = claim_one(store, lease_s=LONG_S)
        assert before + LONG_S <= lease.expires_at <= time.time() + LONG_S
    finally:
        store.close()


def test_a_given_clock_times_leases_and_inputs(tmp_path: Path) -> None:
    clock = FakeClock()
    for store in (MemoryStore(clock=clock), SqliteStore(tmp_path / "c.db", clock=clock)):
        try:
            start(store, Enqueue(make_task("a")))
            at = clock.now
            lease = claim_one(store, lease_s=LONG_S)
            assert at < lease.expires_at - LONG_S <= clock.now
            input_id = store.post_input("e1", InputKind.CANCEL, {})
            (posted,) = [i for i in store.claim_inputs("o1", limit=10) if i.id == input_id]
            assert posted.created_at <= clock.now
        finally:
            store.close()


# -- SQLite only: several connections on one file ---------------------------------------------


def test_two_sqlite_stores_never_claim_the_same_task(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    stores = [SqliteStore(path) for _ in range(2)]
    count, per_store = 60, 3
    try:
        start(stores[0], *(Enqueue(make_task(f"s{i}")) for i in range(count)))
        claimed: list[str] = []
        lock = threading.Lock()
        barrier = threading.Barrier(len(stores) * per_store)

        def work(adapter: SqliteStore, worker_id: str) -> None:
            barrier.wait()
            while leases := adapter.claim(worker_id, limit=2):
                with lock:
                    claimed.extend(lease.task.task_id for lease in leases)

        threads = [
            threading.Thread(target=work, args=(adapter, f"w{index}.{n}"))
            for index, adapter in enumerate(stores)
            for n in range(per_store)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)

        duplicates = [task_id for task_id, n in Counter(claimed).items() if n > 1]
        assert duplicates == []
        assert sorted(claimed) == sorted(f"e1.s{i}" for i in range(count))
    finally:
        for adapter in stores:
            adapter.close()


def test_a_lease_from_one_sqlite_store_is_fenced_in_another(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    clock = FakeClock()  # the processes of one machine share its clock
    first, second = SqliteStore(path, clock=clock), SqliteStore(path, clock=clock)
    try:
        start(first, Enqueue(make_task("a")))
        lease = claim_one(first, "w1", lease_s=TINY_S)
        clock.advance(PAST_TINY_S)
        assert second.reap_expired() == 1
        assert first.complete("e1.a", lease.token, {"ok": True}) is False
        (expired,) = second.claim_inputs("o1")
        change(second, requeue=[Requeue("e1.a", attempt=2)], inputs_done=[expired.id])
        assert claim_one(first, "w2").token == lease.token + 1
    finally:
        first.close()
        second.close()


def test_sqlite_wait_for_is_a_short_poll(tmp_path: Path) -> None:
    adapter = SqliteStore(tmp_path / "poll.db")
    try:
        started_at = time.monotonic()
        assert adapter.wait_for("tasks", LONG_S) is False
        assert time.monotonic() - started_at < 1.0
    finally:
        adapter.close()


# -- memory only: wake-ups --------------------------------------------------------------------


def test_memory_wait_for_wakes_on_new_tasks_and_inputs() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    store.create_execution(make_record("e1"))
    woken: dict[str, bool] = {}

    def wait(channel: str, timeout: float) -> None:
        woken[channel] = store.wait_for(channel, timeout)

    def woke(channel: str, action: Any, timeout: float = LONG_S) -> bool:
        thread = threading.Thread(target=wait, args=(channel, timeout))
        thread.start()
        # Act only once the waiter blocks, or the wake-up would go unseen.
        condition = store._wakeups[channel]
        deadline = time.monotonic() + 5
        while not condition._waiters and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.001)
        action()
        thread.join(timeout=5)
        return woken.pop(channel, False)

    assert woke("tasks", lambda: change(store, enqueue=[Enqueue(make_task("a"))]))
    lease = claim_one(store)
    assert woke("inputs", lambda: store.complete("e1.a", lease.token, {"ok": True}))
    assert woke("inputs", lambda: store.post_input("e1", InputKind.CANCEL, {}))
    assert woke("tasks", lambda: change(store, requeue=[Requeue("e1.a", 2)]))
    claim_one(store, lease_s=0.0)
    clock.advance(PAST_TINY_S)
    assert woke("inputs", store.reap_expired)
    # the other channel stays asleep
    assert not woke("tasks", lambda: store.post_input("e1", InputKind.CANCEL, {}), timeout=0.1)


def test_maintain_keeps_the_queue_working(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    lease = claim_one(store)
    assert store.complete(lease.task.task_id, lease.token, {"task_id": "e1.a", "ok": True})

    store.maintain()
    store.maintain()  # twice in a row is fine

    assert steps_of(store.claim("w1", limit=10)) == ["b"]
    assert [i.kind for i in store.claim_inputs("o1")] == [InputKind.OUTCOME]


# -- what the metrics exporter reads ------------------------------------------------------


def test_a_lease_says_when_its_task_became_due(store: Store, clock: StoreClock) -> None:
    before = clock()
    start(store, Enqueue(make_task("a")))

    lease = claim_one(store, lease_s=LONG_S)

    assert lease.ready_at is not None
    assert before - 5 < lease.ready_at <= lease.expires_at - LONG_S + 1e-3


def test_stats_count_running_executions_parked_steps_tasks_and_inputs(
    store: Store, clock: StoreClock
) -> None:
    assert store.stats().running == {}
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b"), pool="slow"))
    start(store, Enqueue(make_task("later", execution_id="e2"), delay_s=LONG_S), execution_id="e2")
    parked = Event(2, "step.parked", "e1", 3.0, "gate")
    store.commit(
        [
            Append(
                "e1",
                1,
                [parked],
                steps={"gate": {"status": "parked"}, "other": {"status": "ok"}},
                now=3.0,
            )
        ]
    )
    claim_one(store)  # e1.a (pool default) is leased now
    store.post_input("e2", InputKind.CANCEL, {"by": "test"})

    stats = store.stats()

    # e1 progressed at 3.0, e2 last at 1.0 (its start)
    assert stats.running == {"demo": (2, pytest.approx(1.0))}
    assert stats.parked == {"demo": 1}
    assert set(stats.tasks) == {("default", "leased"), ("default", "queued"), ("slow", "queued")}
    assert stats.tasks[("default", "leased")][0] == 1
    # e2.later is queued but not due: counted, without an age
    assert stats.tasks[("default", "queued")] == (1, None)
    count, due = stats.tasks[("slow", "queued")]
    assert count == 1
    assert due is not None and due <= clock()
    assert stats.inputs[0] == 1
    assert stats.inputs[1] is not None

    change(store, execution_id="e1", status=ExecutionStatus.OK)
    after = store.stats()
    assert after.running == {"demo": (1, pytest.approx(1.0))}
    assert after.parked == {}


def test_queued_tasks_counts_the_unclaimed_tasks_of_one_execution(store: Store) -> None:
    start(
        store,
        Enqueue(make_task("a")),
        Enqueue(make_task("b", task_id="e1.b.0")),
        Enqueue(make_task("b", task_id="e1.b.1"), pool="gpu"),
        Enqueue(make_task("b", task_id="e1.b.2"), pool="gpu"),
    )
    start(store, Enqueue(make_task("a", execution_id="e2")), execution_id="e2")
    assert store.queued_tasks("e1") == {("a", "default"): 1, ("b", "default"): 1, ("b", "gpu"): 2}

    lease = claim_one(store, pool="default", limit=1)
    store.complete(lease.task.task_id, lease.token, {"ok": True})
    claim_one(store, pool="gpu", limit=1)
    left = store.queued_tasks("e1")
    assert sum(left.values()) == 2 and left[("b", "gpu")] == 1
    assert store.queued_tasks("e2") == {("a", "default"): 1}
    assert store.queued_tasks("nope") == {}
