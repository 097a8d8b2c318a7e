"""The attempts of a step, folded from real engine logs (the harness drives the engine)."""

from __future__ import annotations

from engine_harness import Harness

from noetl.core import Event, EventType
from noetl.engine.retry import RetryDefaults
from noetl.runtime.step_view import AttemptStatus, step_attempts

E = EventType

LOOP = """
- step: items
  loop:
    collection: [10, 20, 30]
    mode: parallel
  tool:
    kind: noop
    args: {n: "{{ item }}"}
    retry: {max_attempts: 2, initial_delay: 0.25, jitter: false}
"""

ONE = """
- step: work
  tool: {kind: python, code: pass}
"""


def summary(h: Harness, step: str) -> list[tuple[str, int | None, int, str]]:
    return [(a.task_id, a.index, a.attempt, a.status) for a in step_attempts(h.events, step)]


def test_a_step_without_a_loop_has_one_attempt_with_its_output() -> None:
    h = Harness.of(ONE)
    (running,) = step_attempts(h.events, "work")
    assert (running.task_id, running.status, running.finished_at) == (
        "e1.work",
        AttemptStatus.RUNNING,
        None,
    )
    h.outcome("e1.work", ok=True, this={"rows": 3}, duration_ms=12.5)
    (done,) = step_attempts(h.events, "work")
    assert done.status is AttemptStatus.OK
    assert (done.index, done.attempt, done.output, done.duration_ms) == (None, 1, {"rows": 3}, 12.5)
    assert done.finished_at is not None and done.finished_at >= done.started_at
    assert step_attempts(h.events, "other") == []


def test_loop_items_and_retries_are_attempts_in_the_order_they_began() -> None:
    h = Harness.of(LOOP)
    h.complete("items", 0, this="a")
    h.outcome("e1.items.1", ok=False, error="ValueError: bad 20", error_type="ValueError")
    h.complete("items", 2, this="c")
    h.outcome("e1.items.1", ok=False, error="ValueError: still bad", error_type="ValueError")
    assert summary(h, "items") == [
        ("e1.items.0", 0, 1, "ok"),
        ("e1.items.1", 1, 1, "failed"),
        ("e1.items.2", 2, 1, "ok"),
        ("e1.items.1", 1, 2, "failed"),
    ]
    attempts = step_attempts(h.events, "items")
    first_failure, retry = attempts[1], attempts[3]
    assert (first_failure.error, first_failure.error_type) == ("ValueError: bad 20", "ValueError")
    assert first_failure.delay_ms is None
    assert retry.delay_ms == 250  # the retry waited its delay
    assert retry.error == "ValueError: still bad"
    assert attempts[0].output == "a"


def test_a_lost_lease_ends_an_attempt_and_names_the_worker() -> None:
    h = Harness.of(ONE)
    h.deliver(
        Event(0, E.LEASE_EXPIRED.value, "e1", 0.0, None, {"task_id": "e1.work", "worker_id": "w7"})
    )
    h.outcome("e1.work", ok=True, this=1)
    lost, again = step_attempts(h.events, "work")
    assert (lost.status, lost.worker_id, lost.attempt) == (AttemptStatus.LEASE_EXPIRED, "w7", 1)
    assert lost.finished_at is not None
    assert (again.status, again.attempt, again.worker_id) == (AttemptStatus.OK, 2, None)


def test_canceled_tasks_end_their_running_attempts() -> None:
    h = Harness.of(LOOP)
    h.complete("items", 0)
    h.cancel()
    assert summary(h, "items") == [
        ("e1.items.0", 0, 1, "ok"),
        ("e1.items.1", 1, 1, "canceled"),
        ("e1.items.2", 2, 1, "canceled"),
    ]


CHAIN = """
- step: a
  tool: {kind: python, code: pass}
  next: b
- step: b
  tool: {kind: python, code: pass, args: {n: 1}}
"""


def test_a_dead_lettered_task_and_its_replay() -> None:
    h = Harness.of(CHAIN, retry_defaults=RetryDefaults(max_attempts=2, jitter=False))
    h.complete("a")
    for _ in range(2):
        h.outcome("e1.b", ok=False, error="reset", error_type="ConnectionError")
    first, second = step_attempts(h.events, "b")
    assert (first.dead_lettered, second.dead_lettered) == (False, True)  # the last one
    assert second.status is AttemptStatus.FAILED and not second.replay
    h.replay(next(t for t in h.dispatched if t.task_id == "e1.b"), n=2)
    h.outcome("e1.b", ok=True, this="fixed")
    *_, replayed = step_attempts(h.events, "b")
    assert (replayed.attempt, replayed.replay, replayed.status) == (1, True, AttemptStatus.OK)
    assert (replayed.output, replayed.dead_lettered) == ("fixed", False)
    assert summary(h, "b") == [
        ("e1.b", None, 1, "failed"),
        ("e1.b", None, 2, "failed"),
        ("e1.b", None, 1, "ok"),
    ]


def test_to_dict_has_every_field_the_api_shows() -> None:
    h = Harness.of(ONE)
    h.outcome("e1.work", ok=False, error="boom", error_type="RuntimeError")
    (attempt,) = step_attempts(h.events, "work")
    assert attempt.to_dict().keys() == {
        "task_id",
        "index",
        "attempt",
        "status",
        "started_at",
        "finished_at",
        "error",
        "error_type",
        "duration_ms",
        "output",
        "stdout",
        "delay_ms",
        "worker_id",
        "dead_lettered",
        "replay",
        "run",
    }
    assert attempt.to_dict()["status"] == "failed"
