"""Expired leases: the task runs again (same id, next attempt) up to a limit, then fails."""

from __future__ import annotations

from engine_harness import Harness

from noetl.core import Event, EventType, ExecutionStatus, RequeueTask

E = EventType

ONE = """
- step: work
  tool: {kind: python, code: pass}
  next: [{step: after, when: "{{ fail('work') }}"}]
- step: after
  tool: {kind: noop}
"""


def expire(h: Harness, task_id: str, worker: str = "w1") -> list[object]:
    event = Event(
        0, E.LEASE_EXPIRED.value, "e1", 0.0, None, {"task_id": task_id, "worker_id": worker}
    )
    return list(h.deliver(event).commands)


def test_expired_lease_requeues_the_same_task_with_the_next_attempt() -> None:
    h = Harness.of(ONE)
    commands = expire(h, "e1.work")
    assert commands == [RequeueTask("e1.work", 2)]
    reclaimed = h.of_type(E.TASK_RECLAIMED)
    assert [e.payload for e in reclaimed] == [
        {"task_id": "e1.work", "attempt": 2, "worker_id": "w1"}
    ]
    assert h.state.attempts == {"e1.work": 2}
    h.complete("work", this=5)
    assert h.status is ExecutionStatus.OK
    assert h.state.attempts == {}


def test_too_many_expiries_fail_the_task() -> None:
    h = Harness.of(ONE)
    assert expire(h, "e1.work") == [RequeueTask("e1.work", 2)]
    assert expire(h, "e1.work") == [RequeueTask("e1.work", 3)]
    expire(h, "e1.work")
    finished = h.finished("work")
    assert finished.payload["status"] == "failed"
    assert "lease expired 3 times" in finished.payload["error"]
    assert "e1.work" not in h.state.tasks
    assert h.pending_ids()[-1] == "e1.after"


def test_expiry_of_an_unknown_or_finished_task_changes_nothing() -> None:
    h = Harness.of(ONE)
    h.complete("work")
    before = len(h.events)
    assert expire(h, "e1.work") == []
    assert expire(h, "nope") == []
    assert len(h.events) == before
