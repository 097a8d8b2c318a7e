"""Saga compensation: `policy.rollback: on_fail` with steps that declare `compensate`."""

from __future__ import annotations

from engine_harness import Harness

from noetl.core import EventType, ExecutionStatus

E = EventType

SAGA = """
- step: reserve
  tool: {kind: python, code: pass}
  compensate: release
  next: charge
- step: charge
  tool: {kind: python, code: pass}
  compensate: refund
  next: ship
- step: ship
  tool: {kind: python, code: pass}
- step: refund
  tool: {kind: python, code: pass}
- step: release
  tool: {kind: python, code: pass}
"""
ROLLBACK = "rollback: on_fail"


def test_compensations_run_in_reverse_completion_order() -> None:
    h = Harness.of(SAGA, policy=ROLLBACK)
    h.complete("reserve")
    h.complete("charge")
    decision = h.fail("ship", error="no courier")
    started = h.of_type(E.COMPENSATION_STARTED)
    assert [e.payload for e in started] == [{"failed_step": "ship", "queue": ["refund", "release"]}]
    assert h.status is ExecutionStatus.RUNNING
    assert [c.task.step for c in decision.commands if hasattr(c, "task")] == ["refund"]
    h.complete("refund")
    assert h.pending_ids() == ["e1.release"]
    h.complete("release")
    assert h.status is ExecutionStatus.FAIL
    assert h.started_steps() == ["reserve", "charge", "ship", "refund", "release"]
    assert h.steps()["refund"] == {"status": "ok"}
    assert h.steps()["release"] == {"status": "ok"}
    assert h.steps()["ship"]["status"] == "failed"


def test_only_completed_steps_are_compensated() -> None:
    h = Harness.of(SAGA, policy=ROLLBACK)
    h.complete("reserve")
    h.fail("charge")
    assert [e.payload["queue"] for e in h.of_type(E.COMPENSATION_STARTED)] == [["release"]]
    h.complete("release")
    assert h.status is ExecutionStatus.FAIL
    assert h.step_status("refund") == "skipped"


def test_a_failing_compensation_does_not_stop_the_others() -> None:
    h = Harness.of(SAGA, policy=ROLLBACK)
    h.complete("reserve")
    h.complete("charge")
    h.fail("ship")
    h.fail("refund", error="refund api down")
    assert h.pending_ids() == ["e1.release"]
    h.complete("release")
    assert h.status is ExecutionStatus.FAIL
    assert h.step_status("refund") == "failed"


def test_without_rollback_policy_nothing_is_compensated() -> None:
    h = Harness.of(SAGA)
    h.complete("reserve")
    h.complete("charge")
    h.fail("ship")
    assert h.of_type(E.COMPENSATION_STARTED) == []
    assert h.status is ExecutionStatus.FAIL
    assert h.step_status("refund") == "skipped"


def test_a_handled_failure_does_not_roll_back() -> None:
    steps = SAGA.replace(
        "- step: ship\n  tool: {kind: python, code: pass}\n",
        "- step: ship\n  tool: {kind: python, code: pass}\n"
        "  next: [{step: refund, when: \"{{ fail('ship') }}\"}]\n",
    )
    h = Harness.of(steps, policy=ROLLBACK)
    h.complete("reserve")
    h.complete("charge")
    h.fail("ship")
    assert h.of_type(E.COMPENSATION_STARTED) == []
    h.complete("refund")
    assert h.status is ExecutionStatus.OK
    assert h.step_status("release") == "skipped"


def test_compensation_cancels_other_in_flight_work() -> None:
    steps = """
- step: start
  next: [reserve, slow]
- step: reserve
  tool: {kind: python, code: pass}
  compensate: release
  next: charge
- step: slow
  tool: {kind: python, code: pass}
- step: charge
  tool: {kind: python, code: pass}
- step: release
  tool: {kind: python, code: pass}
"""
    h = Harness.of(steps, policy=ROLLBACK)
    h.complete("reserve")
    h.fail("charge")
    assert [e.payload["task_ids"] for e in h.of_type(E.TASK_CANCELED)] == [["e1.slow"]]
    assert h.step_status("slow") == "canceled"
    late = h.outcome("e1.slow", ok=True)
    assert late.events == []
    h.complete("release")
    assert h.status is ExecutionStatus.FAIL
