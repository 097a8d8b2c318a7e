"""The Store contract of `release`: a worker that stops at once hands its leased tasks back
to the queue, so another worker claims them now instead of after the lease runs out."""

from __future__ import annotations

from noetl.store.base import Enqueue, Store, TaskStatus
from tests.contract.test_queue_contract import LONG_S, change, claim_one, make_task, start, status


def test_a_released_task_is_claimable_at_once_and_its_old_holder_fenced_off(
    store: Store,
) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    held = claim_one(store, "w1", limit=1, lease_s=LONG_S)
    assert held.task.step == "a"

    assert store.release([(held.task.task_id, held.token)]) == {"e1.a"}
    row = store.get_task("e1.a")
    assert row is not None
    assert (row["status"], row["worker_id"], row["lease_expires_at"]) == (
        TaskStatus.QUEUED,
        None,
        None,
    )
    assert (row["attempt"], row["lease_token"]) == (held.task.attempt, held.token)

    again = store.claim("w2", limit=2, lease_s=LONG_S)
    assert [lease.task.step for lease in again] == ["a", "b"]  # due at once, first in line
    taken = again[0]
    assert (taken.worker_id, taken.token) == ("w2", held.token + 1)
    assert taken.task == held.task
    # The old holder learns it lost the task; its result changes nothing.
    assert store.heartbeat("e1.a", held.token, lease_s=LONG_S).alive is False
    assert store.complete("e1.a", held.token, {"task_id": "e1.a", "ok": True}) is False
    assert store.complete("e1.a", taken.token, {"task_id": "e1.a", "ok": True}) is True


def test_release_with_a_stale_token_or_of_a_finished_task_changes_nothing(store: Store) -> None:
    start(store, Enqueue(make_task("a")), Enqueue(make_task("b")))
    first = claim_one(store, "w1", limit=1, lease_s=LONG_S)
    second = claim_one(store, "w1", limit=1, lease_s=LONG_S)
    assert store.complete("e1.b", second.token, {"task_id": "e1.b", "ok": True})

    stale = [("e1.a", first.token - 1), ("e1.b", second.token), ("e1.nope", 1)]
    assert store.release(stale) == set()
    assert store.release([]) == set()
    assert (status(store, "e1.a"), status(store, "e1.b")) == (TaskStatus.LEASED, TaskStatus.DONE)
    assert store.heartbeat("e1.a", first.token, lease_s=LONG_S).alive is True


def test_a_released_task_whose_execution_asked_it_to_stop_is_canceled(store: Store) -> None:
    start(store, Enqueue(make_task("a")))
    held = claim_one(store, "w1", lease_s=LONG_S)
    change(store, cancel_tasks=["e1.a"])  # leased: flagged for its holder

    assert store.release([("e1.a", held.token)]) == {"e1.a"}
    assert status(store, "e1.a") == TaskStatus.CANCELED
    assert store.claim("w2", limit=5, lease_s=LONG_S) == []
