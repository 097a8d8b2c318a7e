"""SEMANTICS section 2: calls, gates and parking (the Petri net), and quiescence.

Also the seed acceptance tests 1 (fan-out + join), 4 (idempotence) and 5 (skip gate).
"""

from __future__ import annotations

import pytest
from engine_harness import Harness

from noetl.core import EventType, ExecutionStatus

E = EventType

FAN_OUT_JOIN = """
- step: start
  next: [{step: A}, {step: B}]
- step: A
  tool: {kind: python, code: pass}
  result: {as: a_result}
  next: [{step: join}]
- step: B
  tool: {kind: python, code: pass}
  result: {as: b_result}
  next: [{step: join}]
- step: join
  when: "{{ done('A') and ok('B') }}"
  tool:
    kind: python
    code: pass
    args: {a: "{{ a_result }}", b: "{{ b_result }}"}
  result: {as: joined}
"""


def test_entry_step_named_start_runs_first_and_others_only_when_called() -> None:
    h = Harness.of(
        """
        - step: first
          tool: {kind: noop}
        - step: start
          tool: {kind: noop}
        - step: never
          tool: {kind: noop}
        """
    )
    assert h.trace() == [
        (E.WORKFLOW_STARTED, None),
        (E.STEP_CALLED, "start"),
        (E.STEP_STARTED, "start"),
    ]
    assert h.of_type(E.STEP_CALLED)[0].payload == {"by": "execution"}
    h.run()
    assert h.started_steps() == ["start"]
    assert h.steps() == {
        "first": {"status": "skipped"},
        "start": {"status": "ok"},
        "never": {"status": "skipped"},
    }
    assert h.status is ExecutionStatus.OK


def test_entry_is_the_first_step_without_start() -> None:
    h = Harness.of(
        """
        - step: one
          next: two
        - step: two
        """
    )
    assert h.started_steps() == ["one", "two"]
    assert h.of_type(E.STEP_CALLED, "one")[0].payload == {"by": "execution"}
    assert h.of_type(E.STEP_CALLED, "two")[0].payload == {"by": "one"}
    assert h.status is ExecutionStatus.OK


def test_step_without_tool_finishes_at_once_ok() -> None:
    h = Harness.of("- step: start")
    assert h.trace() == [
        (E.WORKFLOW_STARTED, None),
        (E.STEP_CALLED, "start"),
        (E.STEP_STARTED, "start"),
        (E.STEP_FINISHED, "start"),
        (E.WORKFLOW_FINISHED, None),
    ]
    assert h.finished("start").payload == {"status": "ok", "result": None}
    assert h.of_type(E.WORKFLOW_FINISHED)[0].payload == {"status": "ok"}


def test_calls_to_a_finished_step_are_ignored_off_a_cycle_and_run_it_again_on_one() -> None:
    h = Harness.of(
        """
        - step: start
          next: [A, B]
        - step: A
          next: C
        - step: B
          tool: {kind: noop}
          next: A
        - step: C
          tool: {kind: noop}
          result: {collect: {into: visits}}
          next: [{step: A, when: "{{ visits | length < 2 }}"}]
        """
    )
    # A ran at once (no tool) and called C; C is running.
    assert h.step_status("C") == "running"
    h.complete("B")  # B calls A, which is done: B is not on a cycle with A
    called_a = h.of_type(E.STEP_CALLED, "A")
    assert [e.payload for e in called_a] == [{"by": "start"}, {"by": "B", "ignored": "ok"}]
    h.complete("C")  # C -> A closes the cycle A -> C -> A: a new run of A (and of C)
    assert h.of_type(E.STEP_CALLED, "A")[2].payload == {"by": "C", "run": 2}
    assert h.of_type(E.STEP_CALLED, "C")[-1].payload == {"by": "A", "run": 2}
    assert len(h.of_type(E.STEP_STARTED, "A")) == 2
    h.run()
    assert h.status is ExecutionStatus.OK


def test_call_to_a_step_still_running_is_ignored_with_its_status() -> None:
    h = Harness.of(
        """
        - step: start
          next: [slow, fast]
        - step: slow
          tool: {kind: noop}
        - step: fast
          tool: {kind: noop}
          next: slow
        """
    )
    h.complete("fast")
    assert h.of_type(E.STEP_CALLED, "slow")[-1].payload == {"by": "fast", "ignored": "running"}
    assert len(h.of_type(E.STEP_STARTED, "slow")) == 1
    assert h.pending_ids() == ["e1.slow"]
    h.complete("slow")
    assert h.status is ExecutionStatus.OK


def test_an_endless_cycle_stops_at_max_runs() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          next: again
        - step: again
          tool: {kind: noop}
          next: start
        """,
        policy="max_runs: 3",
    )
    h.run()
    assert h.started_steps() == ["start", "again"] * 3 + ["start"]
    assert h.of_type(E.STEP_CALLED, "start")[-1].payload == {"by": "again", "run": 4}
    assert len(h.dispatched) == 6
    assert h.status is ExecutionStatus.FAIL
    assert "past policy.max_runs (3)" in h.of_type(E.STEP_FINISHED, "start")[-1].payload["error"]


def test_when_false_parks_and_absent_when_dispatches() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gated, open]
        - step: gated
          when: "{{ done('open') }}"
          tool: {kind: noop}
        - step: open
          tool: {kind: noop}
        """
    )
    assert h.trace()[-4:] == [
        (E.STEP_CALLED, "gated"),
        (E.STEP_PARKED, "gated"),
        (E.STEP_CALLED, "open"),
        (E.STEP_STARTED, "open"),
    ]
    assert h.step_status("gated") == "parked"
    decision = h.complete("open")
    # the gate is re-evaluated after `open` finished, and is true now
    assert h.trace(decision.events) == [
        (E.TOOL_PROCESSED, "open"),
        (E.STEP_FINISHED, "open"),
        (E.STEP_STARTED, "gated"),
    ]
    h.complete("gated")
    assert h.status is ExecutionStatus.OK
    assert h.steps() == {
        "start": {"status": "ok"},
        "gated": {"status": "ok"},
        "open": {"status": "ok"},
    }


def test_parked_step_is_woken_only_after_a_state_change_and_in_workflow_order() -> None:
    h = Harness.of(
        """
        - step: start
          next: [z_last, a_first, work]
        - step: z_last
          when: "{{ done('work') }}"
          tool: {kind: noop}
        - step: a_first
          when: "{{ done('work') }}"
          tool: {kind: noop}
        - step: work
          tool: {kind: noop}
        """
    )
    assert h.step_status("z_last") == "parked"
    assert h.step_status("a_first") == "parked"
    decision = h.complete("work")
    # woken in workflow order (z_last is declared first), not in call order
    assert [e.step for e in decision.events if e.type == E.STEP_STARTED] == ["z_last", "a_first"]


def test_a_second_call_to_a_parked_step_is_recorded_and_does_not_start_it() -> None:
    h = Harness.of(
        """
        - step: start
          next: [A, B]
        - step: A
          tool: {kind: noop}
          next: join
        - step: B
          tool: {kind: noop}
          next: join
        - step: C
          tool: {kind: noop}
        - step: join
          when: "{{ done('C') }}"
        """
    )
    h.complete("A")
    h.complete("B")
    assert [e.payload for e in h.of_type(E.STEP_CALLED, "join")] == [{"by": "A"}, {"by": "B"}]
    assert len(h.of_type(E.STEP_PARKED, "join")) == 1
    assert h.of_type(E.STEP_STARTED, "join") == []
    # the gate never becomes true: quiescence ends the execution with join skipped
    assert h.status is ExecutionStatus.OK
    assert h.step_status("join") == "skipped"
    assert h.step_status("C") == "skipped"
    assert h.trace()[-2:] == [(E.STEP_SKIPPED, "join"), (E.WORKFLOW_FINISHED, None)]
    assert h.of_type(E.STEP_SKIPPED, "join")[0].payload == {"reason": "gate false"}


def _fan_out(order: str) -> Harness:
    h = Harness.of(FAN_OUT_JOIN)
    assert h.pending_ids() == ["e1.A", "e1.B"]  # A and B run in parallel
    first, second = ("A", "B") if order == "AB" else ("B", "A")
    h.complete(first, this={"from": first})
    assert h.step_status("join") == "parked"
    assert h.pending_ids() == [f"e1.{second}"]
    h.complete(second, this={"from": second})
    assert h.pending_ids() == ["e1.join"]
    return h


def test_acceptance_1_fan_out_join_a_first() -> None:
    h = _fan_out("AB")
    assert h.task("join").args == {"a": {"from": "A"}, "b": {"from": "B"}}
    h.complete("join", this="both")
    assert len(h.of_type(E.STEP_STARTED, "join")) == 1
    assert len(h.of_type(E.STEP_CALLED, "join")) == 2
    assert h.state.context == {
        "a_result": {"from": "A"},
        "b_result": {"from": "B"},
        "joined": "both",
    }
    assert h.status is ExecutionStatus.OK


def test_acceptance_1_fan_out_join_b_first() -> None:
    h = _fan_out("BA")
    h.complete("join", this="both")
    assert len(h.of_type(E.STEP_STARTED, "join")) == 1
    assert h.state.context["joined"] == "both"
    assert h.status is ExecutionStatus.OK


@pytest.mark.parametrize("a_first", [True, False])
def test_acceptance_1_join_is_skipped_when_b_failed(a_first: bool) -> None:
    h = Harness.of(FAN_OUT_JOIN, policy="on_step_fail: continue")
    if a_first:
        h.complete("A", this=1)
        h.fail("B", error="b broke")
    else:
        h.fail("B", error="b broke")
        h.complete("A", this=1)
    # B's edge has no `when`, so it did not fire; A's call parked join (ok('B') is false)
    assert [e.payload for e in h.of_type(E.STEP_CALLED, "join")] == [{"by": "A"}]
    assert h.pending_ids() == []
    assert h.of_type(E.STEP_STARTED, "join") == []
    assert h.steps() == {
        "start": {"status": "ok"},
        "A": {"status": "ok"},
        "B": {"status": "failed", "error": "b broke"},
        "join": {"status": "skipped"},
    }
    assert h.state.context == {"a_result": 1}
    assert h.status is ExecutionStatus.OK


def test_acceptance_4_idempotence_second_call_ignored_context_not_duplicated() -> None:
    h = Harness.of(
        """
        - step: start
          next: [work, other]
        - step: other
          next: work
        - step: work
          tool: {kind: python, code: "def main(context, args): pass"}
          result: {collect: {into: seen, mode: list}}
        """,
        handlers={"work": lambda task: "once"},
    )
    calls = h.of_type(E.STEP_CALLED, "work")
    assert [e.payload for e in calls] == [{"by": "start"}, {"by": "other", "ignored": "running"}]
    h.run()
    assert len(h.of_type(E.STEP_STARTED, "work")) == 1
    assert len(h.dispatched) == 1
    assert h.state.context == {"seen": ["once"]}
    assert h.status is ExecutionStatus.OK


def test_acceptance_5_skip_gate_never_runs_and_ends_ok() -> None:
    h = Harness.of(
        """
        - step: conditional
          when: "{{ false }}"
          tool: {kind: python, code: pass}
          next: [{step: end}]
        - step: end
        """
    )
    assert h.dispatched == []
    assert h.trace() == [
        (E.WORKFLOW_STARTED, None),
        (E.STEP_CALLED, "conditional"),
        (E.STEP_PARKED, "conditional"),
        (E.STEP_SKIPPED, "conditional"),
        (E.WORKFLOW_FINISHED, None),
    ]
    assert h.steps() == {"conditional": {"status": "skipped"}, "end": {"status": "skipped"}}
    assert h.status is ExecutionStatus.OK


def test_acceptance_5_parked_gate_is_re_evaluated_when_it_becomes_true() -> None:
    h = Harness.of(
        """
        - step: start
          next: [conditional, flag]
        - step: conditional
          when: "{{ flag_value | default(false) }}"
          tool: {kind: python, code: pass}
        - step: flag
          tool: {kind: python, code: pass}
          result: {as: flag_value}
        """,
        handlers={"flag": lambda task: True, "conditional": lambda task: "ran"},
    )
    assert h.step_status("conditional") == "parked"
    h.answer_step("flag")
    assert h.step_status("conditional") == "running"
    h.run()
    assert h.steps()["conditional"] == {"status": "ok"}
    assert h.status is ExecutionStatus.OK


def test_quiescence_with_work_still_running_does_not_finish() -> None:
    h = Harness.of(
        """
        - step: start
          next: [never, work]
        - step: never
          when: "{{ false }}"
        - step: work
          tool: {kind: noop}
        """
    )
    assert h.status.value == "running"
    assert h.of_type(E.WORKFLOW_FINISHED) == []
    h.complete("work")
    assert h.status is ExecutionStatus.OK
    assert h.step_status("never") == "skipped"


def test_a_step_runs_at_most_once_even_when_woken_and_called_together() -> None:
    h = Harness.of(
        """
        - step: start
          next: [gate, a]
        - step: gate
          when: "{{ done('a') }}"
          tool: {kind: noop}
        - step: a
          tool: {kind: noop}
          next: gate
        """
    )
    h.complete("a")
    # `a` calls gate (parked, gate now true): started once by the re-evaluation
    assert len(h.of_type(E.STEP_STARTED, "gate")) == 1
    h.complete("gate")
    assert h.status is ExecutionStatus.OK
