"""The time limit middleware and its watchdog (noetl.worker.time_limit), and the deadline
tools read (noetl.tools.deadline), with small tools that sleep."""

from __future__ import annotations

import threading
import time
from typing import Any

from noetl.core import Outcome, Task
from noetl.tools.deadline import Deadline
from noetl.worker.time_limit import TimeLimit, Watchdog
from noetl.worker.tools import ToolRegistry


def make_task(kind: str = "slow", timeout_ms: int | None = 100, task_id: str = "t1") -> Task:
    return Task(
        task_id=task_id,
        execution_id="e1",
        step="step",
        kind=kind,
        spec={},
        args={},
        context={},
        key="e1:step",
        timeout_ms=timeout_ms,
    )


class Sleeper:
    """Sleeps, then succeeds (or fails in its own words); no cancel."""

    kind = "slow"

    def __init__(self, seconds: float, outcome: dict[str, Any] | None = None) -> None:
        self.seconds = seconds
        self.outcome = outcome or {"ok": True, "this": "late"}

    def run(self, task: Task) -> Outcome:
        time.sleep(self.seconds)
        return Outcome(task.task_id, **self.outcome)


class Stoppable:
    """Waits until canceled (or 10 s); reports the cancel as its own failure."""

    kind = "stoppable"

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.canceled: list[str] = []

    def run(self, task: Task) -> Outcome:
        if self.stop.wait(10):
            return Outcome(task.task_id, ok=False, error="canceled", error_type="CancelError")
        return Outcome(task.task_id, ok=True)

    def cancel(self, task_id: str) -> bool:
        self.canceled.append(task_id)
        self.stop.set()
        return True


def test_a_success_past_the_deadline_is_a_retryable_timeout() -> None:
    outcome = ToolRegistry([Sleeper(0.25)]).run(make_task(timeout_ms=100))
    assert (outcome.ok, outcome.retryable, outcome.this) == (False, True, None)
    assert outcome.error_type == "TaskTimeoutError"
    assert outcome.error == "slow: the task ran past its timeout_ms (100)"


def test_a_success_in_time_or_without_a_timeout_is_kept() -> None:
    assert ToolRegistry([Sleeper(0.01)]).run(make_task(timeout_ms=2_000)).this == "late"
    assert ToolRegistry([Sleeper(0.15)]).run(make_task(timeout_ms=None)).this == "late"


def test_a_failure_the_tool_reported_itself_past_the_deadline_is_kept() -> None:
    own = {"ok": False, "error": "boom", "error_type": "ValueError"}
    outcome = ToolRegistry([Sleeper(0.2, own)]).run(make_task(timeout_ms=50))
    assert (outcome.error, outcome.error_type, outcome.retryable) == ("boom", "ValueError", False)


def test_a_cancellable_tool_is_asked_to_stop_a_grace_after_the_deadline() -> None:
    tool = Stoppable()
    registry = ToolRegistry([tool], cancel_grace_s=0.1)
    started = time.monotonic()
    outcome = registry.run(make_task("stoppable", timeout_ms=100))
    elapsed = time.monotonic() - started
    assert tool.canceled == ["t1"]
    assert 0.2 <= elapsed < 2
    assert outcome.error_type == "TaskTimeoutError" and outcome.retryable
    assert outcome.error == "stoppable: the task ran past its timeout_ms (100); it was stopped"


def test_a_task_done_in_time_is_never_canceled() -> None:
    tool = Stoppable()
    watchdog = Watchdog()
    limit = TimeLimit(tool.cancel, grace_s=0.05, watchdog=watchdog)
    outcome = limit(make_task("stoppable", timeout_ms=100), lambda t: Outcome(t.task_id, ok=True))
    assert outcome.ok
    assert watchdog.pending() == 0
    time.sleep(0.25)
    assert tool.canceled == []


def test_the_watchdog_fires_due_alarms_in_order_and_skips_canceled_ones() -> None:
    watchdog = Watchdog()
    fired: list[str] = []
    done = threading.Event()
    now = time.monotonic()
    watchdog.schedule(now + 0.15, lambda: (fired.append("late"), done.set()))
    dropped = watchdog.schedule(now + 0.05, lambda: fired.append("dropped"))
    watchdog.schedule(now + 0.1, lambda: fired.append("early"))
    watchdog.cancel(dropped)
    assert done.wait(5)
    assert fired == ["early", "late"]
    assert watchdog.pending() == 0


def test_a_raising_alarm_does_not_stop_the_watchdog() -> None:
    watchdog = Watchdog()
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("a tool's cancel failed")

    watchdog.schedule(time.monotonic(), boom)
    watchdog.schedule(time.monotonic() + 0.05, done.set)
    assert done.wait(5)


def test_many_canceled_alarms_are_dropped_rather_than_kept() -> None:
    watchdog = Watchdog()
    far = time.monotonic() + 3600
    for alarm in [watchdog.schedule(far, lambda: None) for _ in range(200)]:
        watchdog.cancel(alarm)
    assert watchdog.pending() == 0
    assert len(watchdog._heap) < 100


def test_deadline_of_a_task() -> None:
    task = make_task(timeout_ms=2_000)
    assert Deadline.start(make_task(timeout_ms=None)) is None
    assert Deadline.start(make_task(timeout_ms=0)) is None
    deadline = Deadline.start(task, now=10.0)
    assert deadline == Deadline("t1", 2_000, 12.0)
    assert deadline.remaining(now=11.5) == 0.5
    assert deadline.remaining_ms(now=11.5) == 500
    assert deadline.remaining(now=13.0) == 0.001  # never 0: a client may read it as "no limit"
    assert deadline.remaining_ms(now=13.0) == 1
    assert (deadline.expired(now=11.9), deadline.expired(now=12.0)) == (False, True)
    # the current deadline is the task's own only: another task's starts now
    token = deadline.enter()
    try:
        assert Deadline.of(task) is deadline
        other = Deadline.of(make_task(timeout_ms=2_000, task_id="t2"))
        assert other is not None and other.at > time.monotonic() + 1.5
    finally:
        Deadline.leave(token)
    fresh = Deadline.of(task)
    assert fresh is not None and fresh is not deadline
