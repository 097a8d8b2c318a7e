"""SEMANTICS section 4 (failure and policies) and cancellation, duplicate and late inputs."""

from __future__ import annotations

import pytest
from engine_harness import Harness

from noetl.core import CancelTasks, Event, EventType, ExecutionStatus

E = EventType

TWO_BRANCHES = """
- step: start
  next: [a, b]
- step: a
  tool: {kind: python, code: pass}
- step: b
  tool: {kind: python, code: pass}
  next: c
- step: c
  tool: {kind: noop}
"""


def test_halt_fails_the_execution_and_cancels_in_flight_tasks() -> None:
    h = Harness.of(TWO_BRANCHES)
    assert h.pending_ids() == ["e1.a", "e1.b"]
    decision = h.fail("a", error="a broke")
    assert h.trace(decision.events) == [
        (E.TOOL_PROCESSED, "a"),
        (E.TASK_DEAD_LETTERED, "a"),
        (E.STEP_FINISHED, "a"),
        (E.NEXT_EVALUATED, "a"),
        (E.TASK_CANCELED, None),
        (E.WORKFLOW_FINISHED, None),
    ]
    assert decision.events[1].payload == {
        "task_id": "e1.a",
        "reason": "failed",
        "attempts": 1,
        "kind": "python",
        "error": "a broke",
        "error_type": None,
    }
    assert decision.events[2].payload == {"status": "failed", "error": "a broke"}
    assert decision.events[3].payload == {
        "mode": "inclusive",
        "taken": [],
        "on_step_fail": "halt",
        "unhandled_failure": True,
    }
    assert decision.events[4].payload == {"task_ids": ["e1.b"]}
    assert decision.events[5].payload == {"status": "fail", "error": "step 'a' failed"}
    assert decision.commands == [CancelTasks(("e1.b",))]
    assert h.status is ExecutionStatus.FAIL
    assert h.steps() == {
        "start": {"status": "ok"},
        "a": {"status": "failed", "error": "a broke"},
        "b": {"status": "canceled"},
        "c": {"status": "skipped"},
    }
    assert h.state.tasks == {}
    # the late result of the canceled task is discarded: no event, no command
    late = h.outcome("e1.b", ok=True, this=1)
    assert late.events == []
    assert late.commands == []
    assert h.steps()["c"] == {"status": "skipped"}
    assert len(h.dispatched) == 2


def test_halt_dispatches_nothing_new_in_the_same_decision() -> None:
    h = Harness.of(
        """
        - step: start
          next: [bad, later]
        - step: bad
          tool: {kind: noop, args: {x: "{{ missing }}"}}
        - step: later
          tool: {kind: noop}
        """,
        check_names=False,
    )
    assert h.dispatched == []
    assert h.of_type(E.STEP_CALLED, "later") == []
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["later"] == {"status": "skipped"}
    assert h.of_type(E.TASK_CANCELED) == []


def test_halt_is_the_default_and_a_step_without_next_fails_the_execution() -> None:
    h = Harness.of("- step: start\n  tool: {kind: noop}")
    h.fail("start", error="x")
    assert h.status is ExecutionStatus.FAIL
    assert h.of_type(E.NEXT_EVALUATED, "start")[0].payload == {
        "mode": "inclusive",
        "taken": [],
        "on_step_fail": "halt",
        "unhandled_failure": True,
    }


def test_continue_ends_ok_and_keeps_the_step_failed() -> None:
    h = Harness.of(TWO_BRANCHES, policy="on_step_fail: continue")
    decision = h.fail("a", error="a broke")
    assert decision.commands == []
    assert h.of_type(E.NEXT_EVALUATED, "a")[0].payload == {
        "mode": "inclusive",
        "taken": [],
        "on_step_fail": "continue",
    }
    assert h.status.value == "running"
    h.complete("b")
    h.complete("c")
    assert h.status is ExecutionStatus.OK
    assert h.of_type(E.WORKFLOW_FINISHED)[0].payload == {"status": "ok"}
    assert h.steps() == {
        "start": {"status": "ok"},
        "a": {"status": "failed", "error": "a broke"},
        "b": {"status": "ok"},
        "c": {"status": "ok"},
    }


def test_route_edge_calls_the_named_step_and_ends_ok() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          next: ok_path
        - step: ok_path
        - step: cleanup
          tool: {kind: noop}
        """,
        policy="on_step_fail: route_edge:cleanup",
    )
    h.fail("start", error="x")
    assert h.of_type(E.NEXT_EVALUATED, "start")[0].payload == {
        "mode": "inclusive",
        "taken": [],
        "edges": [{"to": "ok_path", "fired": False}],
        "on_step_fail": "route_edge:cleanup",
    }
    assert h.of_type(E.STEP_CALLED, "cleanup")[0].payload == {"by": "start"}
    h.complete("cleanup")
    assert h.status is ExecutionStatus.OK
    assert h.steps() == {
        "start": {"status": "failed", "error": "x"},
        "ok_path": {"status": "skipped"},
        "cleanup": {"status": "ok"},
    }


def test_a_policy_does_not_apply_when_an_edge_handles_the_failure() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          next: [{step: undo, when: "{{ fail('start') }}"}]
        - step: undo
        - step: cleanup
        """,
        policy="on_step_fail: route_edge:cleanup",
    )
    h.fail("start")
    payload = h.of_type(E.NEXT_EVALUATED, "start")[0].payload
    assert payload["taken"] == ["undo"]
    assert "on_step_fail" not in payload
    assert h.steps()["cleanup"] == {"status": "skipped"}
    assert h.status is ExecutionStatus.OK


def test_on_when_error_treat_as_false_parks_and_may_still_run() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gated, maker]
        - step: gated
          when: "{{ made.ready }}"
          tool: {kind: noop}
        - step: maker
          tool: {kind: noop}
          result: {as: made}
        """
    )
    # `made` is undefined: the gate raises, which parks the step
    assert h.step_status("gated") == "parked"
    h.complete("maker", this={"ready": True})
    assert h.step_status("gated") == "running"
    h.complete("gated")
    assert h.status is ExecutionStatus.OK


def test_on_when_error_treat_as_false_quiesces_to_skipped() -> None:
    h = Harness.of(
        """
        - step: start
          next: gated
        - step: gated
          when: "{{ nope.x }}"
        """,
        check_names=False,
    )
    assert h.steps()["gated"] == {"status": "skipped"}
    assert h.status is ExecutionStatus.OK


def test_on_when_error_fail_step_fails_the_step_on_call() -> None:
    h = Harness.of(
        """
        - step: start
          next: gated
        - step: gated
          when: "{{ nope.x }}"
          tool: {kind: noop}
        """,
        policy="on_when_error: fail_step",
        check_names=False,
    )
    assert h.dispatched == []
    finished = h.finished("gated")
    assert finished.payload["status"] == "failed"
    assert finished.payload["error"].startswith("when: undefined value:")
    assert "nope" in finished.payload["error"]
    assert h.status is ExecutionStatus.FAIL  # halt: nobody handled the failure


def test_on_when_error_fail_step_on_re_evaluation_routes_the_failure() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gated, work]
        - step: gated
          when: "{{ done('work') and made.x }}"
          tool: {kind: noop}
          next: [{step: handler, when: "{{ fail('gated') }}"}]
        - step: work
          tool: {kind: noop}
        - step: handler
          tool: {kind: noop}
        """,
        policy="on_when_error: fail_step",
        check_names=False,
    )
    assert h.step_status("gated") == "parked"
    h.complete("work")  # now the gate raises on re-evaluation: the step fails
    assert h.steps()["gated"]["status"] == "failed"
    assert h.of_type(E.NEXT_EVALUATED, "gated")[0].payload["taken"] == ["handler"]
    assert h.of_type(E.STEP_CALLED, "handler")[0].payload == {"by": "gated"}
    assert h.pending_ids() == ["e1.handler"]
    assert h.status.value == "running"
    h.complete("handler")
    assert h.status is ExecutionStatus.OK


def test_on_when_error_fail_step_on_re_evaluation_without_edges_halts() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gated, work]
        - step: gated
          when: "{{ done('work') and made.x }}"
        - step: work
          tool: {kind: noop}
        """,
        policy="on_when_error: fail_step",
        check_names=False,
    )
    h.complete("work")
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["gated"]["status"] == "failed"


# --- cancellation ------------------------------------------------------------------------


def test_cancel_ends_canceled_and_cancels_in_flight_tasks() -> None:
    h = Harness.of(TWO_BRANCHES)
    decision = h.cancel("user asked")
    assert h.trace(decision.events) == [
        (E.CANCEL_REQUESTED, None),
        (E.TASK_CANCELED, None),
        (E.WORKFLOW_FINISHED, None),
    ]
    assert decision.events[0].payload == {"reason": "user asked"}
    assert decision.events[1].payload == {"task_ids": ["e1.a", "e1.b"]}
    assert decision.events[2].payload == {"status": "canceled", "error": "canceled"}
    assert decision.commands == [CancelTasks(("e1.a", "e1.b"))]
    assert h.status is ExecutionStatus.CANCELED
    assert h.steps() == {
        "start": {"status": "ok"},
        "a": {"status": "canceled"},
        "b": {"status": "canceled"},
        "c": {"status": "skipped"},
    }


def test_second_cancel_and_late_results_produce_nothing() -> None:
    h = Harness.of(TWO_BRANCHES)
    h.cancel()
    count = len(h.events)
    assert h.cancel().events == []
    again = h.outcome("e1.a", ok=True, this=1)
    assert again.events == []
    assert again.commands == []
    assert h.outcome("e1.b", ok=False, error="late").events == []
    assert len(h.events) == count
    assert h.status is ExecutionStatus.CANCELED


def test_cancel_after_the_end_produces_nothing() -> None:
    h = Harness.of("- step: start")
    assert h.status is ExecutionStatus.OK
    decision = h.cancel()
    assert decision.events == []
    assert decision.commands == []
    assert h.status is ExecutionStatus.OK


def test_cancel_reports_parked_steps_skipped() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gated, work]
        - step: gated
          when: "{{ done('work') }}"
        - step: work
          tool: {kind: noop}
        """
    )
    decision = h.cancel()
    assert decision.commands == [CancelTasks(("e1.work",))]
    assert h.steps() == {
        "start": {"status": "ok"},
        "gated": {"status": "skipped"},
        "work": {"status": "canceled"},
    }
    assert h.of_type(E.STEP_SKIPPED) == []  # the fold of workflow.finished says it


# --- duplicate and late outcomes ---------------------------------------------------------


def test_duplicate_tool_processed_produces_no_events() -> None:
    h = Harness.of(TWO_BRANCHES)
    first = h.outcome("e1.a", ok=True, this=1)
    assert len(first.events) == 2  # tool.processed, step.finished
    count = len(h.events)
    assert h.outcome("e1.a", ok=True, this=1).events == []
    assert h.outcome("e1.a", ok=False, error="again").events == []
    assert len(h.events) == count
    assert h.steps()["a"] == {"status": "ok"}


def test_unknown_task_id_produces_no_events() -> None:
    h = Harness.of(TWO_BRANCHES)
    decision = h.outcome("e1.zzz", ok=True)
    assert decision.events == []
    assert decision.commands == []
    bad = Event(0, EventType.TOOL_PROCESSED, "e1", 0.0, None, {"ok": True})
    assert h.deliver(bad).events == []


def test_late_outcome_after_ok_end_produces_no_events() -> None:
    h = Harness.of("- step: start\n  tool: {kind: noop}")
    h.complete("start")
    assert h.outcome("e1.start", ok=True).events == []


def test_only_outcomes_and_cancel_are_inputs() -> None:
    h = Harness.of(TWO_BRANCHES)
    event = Event(0, "step.finished", "e1", 0.0, "a", {"status": "ok"})
    with pytest.raises(ValueError, match=r"does not take .*step\.finished"):
        h.engine.decide(h.state, event, 1.0)
