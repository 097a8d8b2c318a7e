"""Dead letters, replay from the DLQ, force-complete and a loop's total budget (pure engine)."""

from __future__ import annotations

import pytest
from engine_harness import Harness, TaskFailure

from noetl.core import CancelTasks, Event, EventType, ExecutionStatus, RequeueTask, StartTimer
from noetl.engine.recovery import LOOP_TIMEOUT
from noetl.engine.retry import RetryDefaults

E = EventType

CHAIN = """
- step: a
  tool: {kind: python, code: pass}
  result: {as: a_out}
  next: b
- step: b
  tool: {kind: python, code: pass, args: {n: 1}}
  result: {as: b_out}
  next: c
- step: c
  tool: {kind: python, code: pass, args: {b: "{{ b_out }}"}}
  result: {as: c_out}
"""


def test_a_task_that_fails_for_good_is_dead_lettered_with_what_its_entry_needs() -> None:
    h = Harness.of(CHAIN)
    h.complete("a", this=1)
    decision = h.outcome(
        "e1.b", ok=False, error="bad row\n  inline code, line 2", error_type="KeyError"
    )
    (dead,) = [e for e in decision.events if e.type == E.TASK_DEAD_LETTERED]
    assert dead.step == "b"
    assert dead.payload == {
        "task_id": "e1.b",
        "reason": "failed",
        "attempts": 1,
        "kind": "python",
        "error": "bad row\n  inline code, line 2",
        "error_type": "KeyError",
    }
    assert h.status is ExecutionStatus.FAIL
    h.check_full_fold()


@pytest.mark.parametrize(
    ("error_type", "reason"),
    [("FatalError", "fatal"), ("UndecodableTask", "undecodable"), ("ValueError", "failed")],
)
def test_the_reason_of_a_dead_letter_follows_the_error_class(error_type: str, reason: str) -> None:
    h = Harness.of(CHAIN)
    h.complete("a")
    decision = h.outcome("e1.b", ok=False, error="x", error_type=error_type)
    (dead,) = [e for e in decision.events if e.type == E.TASK_DEAD_LETTERED]
    assert dead.payload["reason"] == reason


def test_a_sink_failure_names_the_sink() -> None:
    h = Harness.of(CHAIN)
    h.complete("a")
    sinks = [{"id": "pg_0", "kind": "postgres", "status": "failed"}]
    decision = h.outcome("e1.b", ok=False, error="sink broke", error_type="SinkError", sinks=sinks)
    (dead,) = [e for e in decision.events if e.type == E.TASK_DEAD_LETTERED]
    assert dead.payload["sink_id"] == "pg_0"
    assert dead.payload["reason"] == "fatal"


def test_a_lost_worker_dead_letters_the_task_after_its_expiries() -> None:
    h = Harness.of(CHAIN)
    for _ in range(3):
        decision = h.input(E.LEASE_EXPIRED, {"task_id": "e1.a", "attempt": 1, "worker_id": "w"})
    (dead,) = [e for e in decision.events if e.type == E.TASK_DEAD_LETTERED]
    assert dead.payload["reason"] == "lease_expired"
    assert dead.payload["attempts"] == 3


def test_successes_and_retried_attempts_are_not_dead_lettered() -> None:
    flaky = iter([TaskFailure("reset", "ConnectionError"), None])

    def handler(task: object) -> object:
        failure = next(flaky)
        if failure is not None:
            raise failure
        return 1

    h = Harness.of(CHAIN, handlers={"a": handler, "b": lambda t: 2, "c": lambda t: 3})
    h.run()
    assert h.status is ExecutionStatus.OK
    assert h.of_type(E.RETRY_STARTED)
    assert h.of_type(E.TASK_DEAD_LETTERED) == []


def test_dead_letters_can_be_turned_off() -> None:
    h = Harness.of(CHAIN, start=False)
    h.engine.dead_letters = False
    h.start()
    h.complete("a")
    h.fail("b")
    assert h.of_type(E.TASK_DEAD_LETTERED) == []
    assert h.status is ExecutionStatus.FAIL


# --- replay ----------------------------------------------------------------------------------


def failed_chain() -> Harness:
    h = Harness.of(CHAIN)
    h.complete("a", this=1)
    h.fail("b", error="upstream down")
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["c"] == {"status": "skipped"}
    return h


def test_replay_reopens_a_failed_execution_and_continues_from_that_step() -> None:
    h = failed_chain()
    task = next(t for t in h.dispatched if t.task_id == "e1.b")
    decision = h.replay(task)
    assert h.trace(decision.events) == [(E.WORKFLOW_REOPENED, None), (E.TASK_REPLAYED, "b")]
    reopened = decision.events[0].payload
    assert reopened["previous"] == "fail"
    assert reopened["restore"] == {"c": "pending"}
    assert reopened["restart"] == []
    assert decision.commands == [RequeueTask("e1.b", 1, 0.0, task=task)]
    assert h.status is ExecutionStatus.RUNNING
    assert h.steps()["b"] == {"status": "running"}
    assert h.steps()["c"] == {"status": "pending"}
    h.complete("b", this=2)
    assert h.task("c").args == {"b": 2}
    h.complete("c", this=3)
    assert h.status is ExecutionStatus.OK
    assert h.state.context == {"a_out": 1, "b_out": 2, "c_out": 3}
    # the earlier step kept its result and never ran again
    assert [t.step for t in h.dispatched].count("a") == 1
    h.check_full_fold()


def test_replay_runs_the_patched_task_and_records_what_was_patched() -> None:
    h = failed_chain()
    task = next(t for t in h.dispatched if t.task_id == "e1.b")
    decision = h.replay(task, n=5)
    replayed = decision.events[-1].payload
    assert replayed["patched"] == ["args.n"]
    assert replayed["task"]["args"] == {"n": 5}
    assert h.task("b").args == {"n": 5}
    assert h.task("b").task_id == "e1.b"  # the original message id


def test_a_replayed_task_gets_its_attempts_back() -> None:
    h = Harness.of(CHAIN, retry_defaults=RetryDefaults(max_attempts=2, jitter=False))
    h.complete("a")
    for _ in range(2):
        h.outcome("e1.b", ok=False, error="reset", error_type="ConnectionError")
    assert h.status is ExecutionStatus.FAIL
    h.replay(next(t for t in h.dispatched if t.task_id == "e1.b"))
    decision = h.outcome("e1.b", ok=False, error="reset", error_type="ConnectionError")
    (retry,) = [e for e in decision.events if e.type == E.RETRY_STARTED]
    assert retry.payload["attempt"] == 2
    h.check_full_fold()


def test_a_replay_while_the_task_runs_again_is_refused() -> None:
    h = failed_chain()
    task = next(t for t in h.dispatched if t.task_id == "e1.b")
    h.replay(task)
    decision = h.replay(task)
    assert h.trace(decision.events) == [(E.OPERATOR_REFUSED, "b")]
    assert decision.events[0].payload["reason"] == "task e1.b is running"
    assert decision.commands == []


def test_a_canceled_execution_is_not_reopened() -> None:
    h = Harness.of(CHAIN)
    task = h.task("a")
    h.cancel()
    decision = h.replay(task)
    assert h.trace(decision.events) == [(E.OPERATOR_REFUSED, "a")]
    assert decision.events[0].payload["reason"] == "the execution was canceled"
    assert h.status is ExecutionStatus.CANCELED


def test_a_step_that_did_not_fail_is_not_replayed() -> None:
    h = failed_chain()
    task = next(t for t in h.dispatched if t.task_id == "e1.a")
    decision = h.replay(task)
    assert decision.events[0].payload["reason"] == "step 'a' is ok, not failed"
    assert h.status is ExecutionStatus.FAIL


def test_a_rolled_back_execution_is_not_reopened() -> None:
    steps = """
    - step: book
      tool: {kind: python, code: pass}
      compensate: unbook
      next: pay
    - step: pay
      tool: {kind: python, code: pass}
    - step: unbook
      tool: {kind: python, code: pass}
    """
    h = Harness.of(steps, policy="rollback: on_fail")
    h.complete("book")
    h.fail("pay")
    h.complete("unbook")
    assert h.status is ExecutionStatus.FAIL
    decision = h.replay(next(t for t in h.dispatched if t.step == "pay"))
    assert "rolled back" in decision.events[0].payload["reason"]


FAN = """
- step: start
  next: [a, b]
- step: a
  tool: {kind: python, code: pass}
  next: join
- step: b
  tool: {kind: python, code: pass}
  next: join
- step: join
  when: "{{ done('a') and done('b') }}"
  tool: {kind: noop}
"""


def test_reopening_runs_again_the_branches_the_failure_canceled() -> None:
    h = Harness.of(FAN)
    h.fail("a")
    assert h.steps()["b"] == {"status": "canceled"}
    decision = h.replay(next(t for t in h.dispatched if t.step == "a"))
    reopened = decision.events[0].payload
    assert reopened["restart"] == ["b"]
    assert reopened["restore"] == {"join": "pending"}
    assert sorted(h.pending_ids()) == ["e1.a", "e1.b"]
    h.complete("a")
    assert h.steps()["join"] == {"status": "parked"}
    h.complete("b")
    h.run()
    assert h.status is ExecutionStatus.OK
    assert h.steps()["join"] == {"status": "ok"}
    h.check_full_fold()


LOOP = """
- step: items
  loop: {collection: "{{ [10, 20, 30] }}", element: x}
  tool: {kind: python, code: pass, args: {x: "{{ x }}"}}
  result:
    collect: {into: outs, mode: list}
  next: after
- step: after
  tool: {kind: noop}
"""


def test_replay_of_a_failed_loop_item_finishes_the_loop() -> None:
    h = Harness.of(LOOP)
    h.complete("items", 0, this="a")
    h.fail("items", 1)
    h.complete("items", 2, this="c")
    assert h.status is ExecutionStatus.FAIL
    item = next(t for t in h.dispatched if t.task_id == "e1.items.1")
    decision = h.replay(item)
    assert decision.events[-1].payload["index"] == 1
    assert decision.events[-1].payload["item"] == 20
    assert h.state.steps["items"].completed == 2
    h.complete("items", 1, this="b")
    assert h.steps()["items"]["status"] == "ok"
    assert h.state.context["outs"] == ["a", "b", "c"]
    h.run()
    assert h.status is ExecutionStatus.OK
    h.check_full_fold()


# --- force-complete ----------------------------------------------------------------------------


def test_force_complete_of_a_parked_step_routes_on() -> None:
    steps = """
    - step: start
      next: [gate, slow]
    - step: slow
      tool: {kind: python, code: pass}
    - step: gate
      when: "{{ workload.open }}"
      tool: {kind: noop}
      result: {as: gate_out}
      next: after
    - step: after
      tool: {kind: python, code: pass, args: {g: "{{ gate_out }}"}}
    """
    h = Harness.of(steps, workload={"open": False}, start=False)
    h.start()
    assert h.steps()["gate"] == {"status": "parked"}
    decision = h.force("gate", status="ok", result={"v": 1}, reason="opened by hand", by="ops")
    assert h.trace(decision.events)[:3] == [
        (E.STEP_FORCE_COMPLETED, "gate"),
        (E.STEP_STARTED, "gate"),
        (E.STEP_FINISHED, "gate"),
    ]
    assert decision.events[0].payload == {
        "status": "ok",
        "by": "ops",
        "reason": "opened by hand",
        "previous": "parked",
        "result": {"v": 1},
    }
    assert h.task("after").args == {"g": {"v": 1}}
    h.complete("after")
    h.complete("slow")
    assert h.status is ExecutionStatus.OK
    h.check_full_fold()


def test_force_complete_of_a_stuck_step_cancels_its_task() -> None:
    h = Harness.of(CHAIN)
    decision = h.force("a", status="ok", result=7)
    assert decision.events[0].payload["canceled"] == ["e1.a"]
    assert CancelTasks(("e1.a",)) in decision.commands
    assert h.state.context["a_out"] == 7
    assert h.task("b").step == "b"
    # the stuck task's late result changes nothing
    assert h.outcome("e1.a", ok=True, this=1).events == []


def test_force_failed_follows_the_failure_policy() -> None:
    h = Harness.of(CHAIN)
    h.force("a", status="failed", reason="gave up")
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["a"]["error"] == "marked failed by an operator: gave up"


def test_force_complete_of_a_finished_step_is_refused() -> None:
    h = Harness.of(CHAIN)
    h.complete("a")
    decision = h.force("a")
    assert h.trace(decision.events) == [(E.OPERATOR_REFUSED, "a")]
    assert decision.events[0].payload["reason"] == "step 'a' is ok already"


# --- a loop's total budget ---------------------------------------------------------------------

TIMED_LOOP = """
- step: items
  loop:
    collection: "{{ range(10) | list }}"
    mode: parallel
    max_concurrency: 2
    total_timeout_ms: 1500
  tool: {kind: python, code: pass}
"""


def test_a_loop_past_its_total_budget_stops_and_fails() -> None:
    h = Harness.of(TIMED_LOOP)
    (timer,) = h.timers
    assert timer == StartTimer(1.5, {"kind": LOOP_TIMEOUT, "step": "items", "loop_seq": 4})
    h.complete("items", 0)
    decision = h.fire(timer)
    assert h.trace(decision.events)[:3] == [
        (E.LOOP_TIMED_OUT, "items"),
        (E.TASK_CANCELED, None),
        (E.LOOP_FINISHED, "items"),
    ]
    assert decision.events[0].payload["canceled"] == ["e1.items.1", "e1.items.2"]
    assert h.status is ExecutionStatus.FAIL
    error = h.steps()["items"]["error"]
    assert "total budget of 1500 ms (1 of 10 items done)" in error
    assert h.pending == []
    h.check_full_fold()


def test_a_timer_of_a_loop_that_finished_in_time_changes_nothing() -> None:
    steps = TIMED_LOOP.replace("range(10)", "range(2)")
    h = Harness.of(steps)
    (timer,) = h.timers
    h.complete("items", 0)
    h.complete("items", 1)
    assert h.status is ExecutionStatus.OK
    assert h.fire(timer).events == []
    stale = Event(0, E.TIMER_FIRED, "e1", 0.0, None, {**timer.payload, "loop_seq": 99})
    assert h.engine.decide(h.state, stale, 5.0).events == []
