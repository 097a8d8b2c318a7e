"""Retries (seed 001, seed 000 "When to Retry", SEMANTICS section 8): the error taxonomy, the
effective policy of a step, backoff delays and their jitter, and the engine's retry events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from engine_harness import Harness, TaskFailure
from hypothesis import given, settings
from hypothesis import strategies as st

from noetl.core import Event, EventType, ExecutionStatus, RequeueTask, Task
from noetl.dsl import load_playbook_text
from noetl.dsl.model import RetryPolicy
from noetl.engine.retry import (
    RetryAction,
    RetryDefaults,
    RetryRule,
    assess,
    backoff_delay,
    jitter_factor,
    jitter_key,
    retry_names,
    rule_for,
)
from noetl.errors import ErrorClass, classify, error_class

E = EventType

FLAKY = TaskFailure("connection reset by peer", "ConnectionError", retryable=True)


def failures(*results: Any) -> Any:
    """A handler answering successive attempts: raise what is an exception, return the rest."""
    remaining = list(results)

    def handler(task: Task) -> Any:
        result = remaining.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    return handler


def types(h: Harness, events: list[Event] | None = None) -> list[str]:
    return [e.type for e in (h.events if events is None else events)]


def rules(steps: str, defaults: RetryDefaults | None = None) -> dict[str, RetryRule]:
    h = Harness.of(steps, start=False, retry_defaults=defaults)
    return h.engine.retry_rules


# --- the error taxonomy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ({"ok": True}, None),
        ({"ok": False, "error_type": "ValueError"}, ErrorClass.OTHER),
        ({"ok": False, "error_type": "ValueError", "retryable": True}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "TaskTimeoutError"}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "TimeoutError"}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "ConnectError"}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "SerializationFailure"}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "DeadlockDetected"}, ErrorClass.TRANSIENT),
        ({"ok": False, "error_type": "FatalError", "retryable": True}, ErrorClass.FATAL),
        ({"ok": False, "error_type": "TemplateError"}, ErrorClass.FATAL),
        ({"ok": False, "error_type": "ValidationError"}, ErrorClass.FATAL),
        ({"ok": False, "error_type": "CancelError"}, ErrorClass.FATAL),
        ({"ok": False, "error_type": "CancelError", "retryable": True}, ErrorClass.TRANSIENT),
        (
            {"ok": False, "error_type": "HttpError", "this": {"status_code": 503}},
            ErrorClass.TRANSIENT,
        ),
        (
            {"ok": False, "error_type": "HttpError", "this": {"status_code": 429}},
            ErrorClass.TRANSIENT,
        ),
        (
            {"ok": False, "error_type": "HttpError", "this": {"status_code": 408}},
            ErrorClass.TRANSIENT,
        ),
        ({"ok": False, "error_type": "HttpError", "this": {"status_code": 404}}, ErrorClass.FATAL),
        (
            {
                "ok": False,
                "error_type": "HttpError",
                "retryable": True,
                "this": {"status_code": 400},
            },
            ErrorClass.FATAL,
        ),
        ({"ok": False, "error_type": "HttpError", "status_code": 502}, ErrorClass.TRANSIENT),
    ],
)
def test_error_classes(outcome: dict[str, Any], expected: ErrorClass | None) -> None:
    assert error_class(outcome) is expected
    assert classify(outcome) is (expected is ErrorClass.TRANSIENT)


# --- the policy of a step ----------------------------------------------------------------


def test_a_step_without_retry_has_the_engine_defaults() -> None:
    rule = rules("- step: a\n  tool: noop\n")["a"]
    assert rule == RetryRule(
        max_attempts=6,
        initial_delay=0.2,
        backoff_multiplier=2.0,
        max_delay=30.0,
        jitter=True,
        backoff="exponential",
    )
    assert not rule.configured
    custom = RetryDefaults(max_attempts=2, initial_delay=0.01, max_delay=1.0, jitter=False)
    rule = rules("- step: a\n  tool: noop\n", custom)["a"]
    assert (rule.max_attempts, rule.initial_delay, rule.max_delay, rule.jitter) == (
        2,
        0.01,
        1.0,
        False,
    )


def test_retry_true_int_false_and_block() -> None:
    found = rules(
        """
- step: yes
  tool: noop
  retry: true
- step: five
  tool: noop
  retry: 5
- step: never
  tool: noop
  retry: false
- step: block
  tool: noop
  retry:
    max_attempts: 4
    initial_delay: 0.5
    backoff_multiplier: 3
    max_delay: 10
    jitter: false
    backoff: linear
    retry_when: "{{ status_code == 503 }}"
    stop_when: "{{ attempt > 2 }}"
"""
    )
    model = RetryPolicy()  # the DSL's defaults fill what a block leaves out
    assert found["yes"] == RetryRule.of_block(model, "step")
    assert (found["yes"].max_attempts, found["yes"].initial_delay) == (3, 1.0)
    assert found["five"].max_attempts == 5
    assert found["five"].initial_delay == model.initial_delay
    assert found["never"].max_attempts == 1
    assert found["block"] == RetryRule(
        max_attempts=4,
        initial_delay=0.5,
        backoff_multiplier=3,
        max_delay=10,
        jitter=False,
        backoff="linear",
        retry_when="{{ status_code == 503 }}",
        stop_when="{{ attempt > 2 }}",
        source="step",
    )
    assert all(rule.configured for rule in found.values())


def test_the_tool_retry_overrides_the_step_retry() -> None:
    rule = rules(
        """
- step: a
  retry: 7
  tool: {kind: noop, retry: {max_attempts: 2, jitter: false}}
"""
    )["a"]
    assert (rule.source, rule.max_attempts, rule.jitter) == ("tool", 2, False)


def test_workbook_retry_applies_unless_the_call_site_sets_one() -> None:
    text = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: wb}
workbook:
  - name: fetch
    tool: {kind: noop, retry: 4}
workflow:
  - step: plain
    tool: {kind: workbook, name: fetch}
    next: own
  - step: own
    tool: {kind: workbook, name: fetch}
    retry: 2
"""
    playbook = load_playbook_text(text).require()
    plain = rule_for(playbook.step("plain"), playbook, RetryDefaults())
    own = rule_for(playbook.step("own"), playbook, RetryDefaults())
    assert (plain.source, plain.max_attempts) == ("workbook", 4)
    assert (own.source, own.max_attempts) == ("step", 2)


@pytest.mark.parametrize(
    "bad",
    [
        {"max_attempts": 0},
        {"initial_delay": -1},
        {"max_delay": -1},
        {"backoff_multiplier": 0.5},
        {"backoff": "random"},
    ],
)
def test_retry_defaults_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="retry defaults"):
        RetryDefaults(**bad)


# --- delays ------------------------------------------------------------------------------


def _rule(**kw: Any) -> RetryRule:
    base: dict[str, Any] = {
        "max_attempts": 10,
        "initial_delay": 1.0,
        "backoff_multiplier": 2.0,
        "max_delay": 5.0,
        "jitter": False,
        "backoff": "exponential",
    }
    return RetryRule(**{**base, **kw})


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ("exponential", [1.0, 2.0, 4.0, 5.0, 5.0]),
        ("linear", [1.0, 2.0, 3.0, 4.0, 5.0]),
        ("fixed", [1.0, 1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_delays_of_each_backoff(backoff: str, expected: list[float]) -> None:
    rule = _rule(backoff=backoff)
    assert [backoff_delay(rule, n, "k") for n in range(1, 6)] == expected


def test_jitter_is_deterministic_and_stays_under_the_cap() -> None:
    rule = _rule(jitter=True, max_delay=100.0)
    first = [backoff_delay(rule, n, jitter_key("e1", "a", n)) for n in range(1, 8)]
    again = [backoff_delay(rule, n, jitter_key("e1", "a", n)) for n in range(1, 8)]
    assert first == again
    for n, delay in enumerate(first, start=1):
        plain = 2.0 ** (n - 1)
        assert plain / 2 <= delay < plain
    factors = {jitter_factor(jitter_key("e1", "a", n)) for n in range(1, 20)}
    assert len(factors) == 19  # different attempts draw differently
    # another execution, step or loop item draws differently too
    keys = {jitter_key("e1", "a", 1), jitter_key("e2", "a", 1), jitter_key("e1", "b", 1)}
    keys |= {jitter_key("e1", "a", 1, 0), jitter_key("e1", "a", 1, 1)}
    assert len({jitter_factor(k) for k in keys}) == 5


def test_huge_attempts_do_not_overflow() -> None:
    assert backoff_delay(_rule(backoff_multiplier=10.0), 5000, "k") == 5.0
    assert backoff_delay(_rule(initial_delay=0.0, backoff_multiplier=10.0), 5000, "k") == 0.0


rule_strategy = st.builds(
    RetryRule,
    max_attempts=st.integers(1, 20),
    initial_delay=st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    backoff_multiplier=st.floats(1, 1e3, allow_nan=False, allow_infinity=False),
    max_delay=st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    jitter=st.booleans(),
    backoff=st.sampled_from(["exponential", "linear", "fixed"]),
)


@settings(max_examples=400, deadline=None)
@given(rule=rule_strategy, attempt=st.integers(1, 10_000), key=st.text(max_size=40))
def test_any_delay_is_between_zero_and_the_cap(rule: RetryRule, attempt: int, key: str) -> None:
    delay = backoff_delay(rule, attempt, key)
    assert 0 <= delay <= rule.max_delay


@settings(max_examples=300, deadline=None)
@given(
    rule=rule_strategy.filter(lambda r: r.backoff != "fixed"),
    attempt=st.integers(1, 2_000),
)
def test_delays_without_jitter_never_decrease(rule: RetryRule, attempt: int) -> None:
    plain = RetryRule(**{**_fields(rule), "jitter": False})
    assert backoff_delay(plain, attempt, "k") <= backoff_delay(plain, attempt + 1, "k")


def _fields(rule: RetryRule) -> dict[str, Any]:
    return {name: getattr(rule, name) for name in RetryRule.__slots__}


# --- assess (the decision alone) ---------------------------------------------------------


def _never(condition: Any, names: Any) -> bool:
    raise AssertionError("no template should be evaluated")


def test_assess_evaluates_no_template_for_a_success_without_retry_when() -> None:
    rule = _rule(stop_when="{{ true }}", source="step")
    verdict = assess(rule, {"ok": True, "this": 1}, 1, _never, step="a", key="k")
    assert verdict.action is RetryAction.FINISH
    fatal = {"ok": False, "error_type": "FatalError"}
    retry_when = _rule(retry_when="{{ true }}", source="step")
    assert assess(retry_when, fatal, 1, _never, step="a", key="k").action is RetryAction.FINISH


def test_retry_names() -> None:
    outcome = {"ok": True, "this": {"status_code": 503, "headers": {}, "data": {"x": 1}}}
    names = retry_names(outcome, 2, _rule(), "fetch")
    assert names == {
        "this": outcome["this"],
        "result": outcome["this"],
        "data": {"x": 1},
        "status_code": 503,
        "success": True,
        "error": None,
        "error_type": None,
        "retryable": False,
        "attempt": 2,
        "max_attempts": 10,
        "node_id": "fetch",
    }
    failed = {"ok": False, "this": None, "error": "refused", "error_type": "ConnectError"}
    names = retry_names(failed, 1, _rule(), "fetch")
    assert (names["status_code"], names["error"], names["retryable"], names["data"]) == (
        0,
        "refused",
        True,
        None,
    )


# --- the engine: timelines ---------------------------------------------------------------

ONE = """
- step: work
  tool: {kind: python, code: pass}
  retry: {max_attempts: 3, initial_delay: 1, backoff_multiplier: 2, jitter: false}
"""


def test_success_on_the_third_attempt_follows_seed_001() -> None:
    h = Harness.of(ONE, handlers={"work": failures(FLAKY, FLAKY, {"n": 1})})
    h.run()
    assert h.status is ExecutionStatus.OK
    assert types(h) == [
        E.WORKFLOW_STARTED,
        E.STEP_CALLED,
        E.STEP_STARTED,  # action_started (attempt 1)
        E.TOOL_PROCESSED,  # action_error (attempt 1)
        E.RETRY_STARTED,  # step_retry (attempt 2 after 1 s)
        E.TOOL_PROCESSED,  # action_error (attempt 2)
        E.RETRY_STARTED,  # step_retry (attempt 3 after 2 s)
        E.TOOL_PROCESSED,  # action_completed (attempt 3)
        E.STEP_FINISHED,  # step_completed
        E.WORKFLOW_FINISHED,
    ]
    retries = h.of_type(E.RETRY_STARTED)
    assert [e.payload for e in retries] == [
        {
            "task_id": "e1.work",
            "attempt": attempt,
            "max_attempts": 3,
            "delay_ms": delay_ms,
            "reason": "transient",
            "error": "connection reset by peer",
            "error_type": "ConnectionError",
        }
        for attempt, delay_ms in ((2, 1000), (3, 2000))
    ]
    assert h.requeued == [RequeueTask("e1.work", 2, 1.0), RequeueTask("e1.work", 3, 2.0)]
    processed = h.of_type(E.TOOL_PROCESSED)
    assert [e.payload.get("attempt") for e in processed] == [None, 2, 3]
    assert h.finished("work").payload == {"result": {"n": 1}, "status": "ok"}
    assert h.state.attempts == {}
    h.check_full_fold()


def test_exhausted_attempts_fail_the_step_with_the_seed_001_timeline() -> None:
    steps = ONE + "  next: [{step: after, when: \"{{ fail('work') }}\"}]\n- step: after\n"
    h = Harness.of(steps, handlers={"work": failures(FLAKY, FLAKY, FLAKY)})
    h.run()
    assert types(h) == [
        E.WORKFLOW_STARTED,
        E.STEP_CALLED,
        E.STEP_STARTED,
        E.TOOL_PROCESSED,
        E.RETRY_STARTED,
        E.TOOL_PROCESSED,
        E.RETRY_STARTED,
        E.TOOL_PROCESSED,
        E.RETRY_PROCESSED,  # step_retry_exhausted
        E.TASK_DEAD_LETTERED,  # the DLQ entry
        E.STEP_FINISHED,  # step_failed_terminal
        E.NEXT_EVALUATED,
        E.STEP_CALLED,
        E.STEP_STARTED,
        E.STEP_FINISHED,
        E.WORKFLOW_FINISHED,
    ]
    (exhausted,) = h.of_type(E.RETRY_PROCESSED)
    assert exhausted.step == "work"
    assert exhausted.payload == {
        "task_id": "e1.work",
        "status": "exhausted",
        "reason": "transient",
        "attempts": 3,
        "max_attempts": 3,
        "kind": "python",
        "error": "connection reset by peer",
        "error_type": "ConnectionError",
    }
    (dead,) = h.of_type(E.TASK_DEAD_LETTERED)
    assert dead.step == "work"
    assert dead.payload == {
        "task_id": "e1.work",
        "reason": "exhausted",
        "attempts": 3,
        "kind": "python",
        "error": "connection reset by peer",
        "error_type": "ConnectionError",
    }
    assert h.finished("work").payload["error"] == "connection reset by peer"
    assert h.step_status("work") == "failed"
    h.check_full_fold()


def test_exhausted_without_a_handler_fails_the_execution() -> None:
    h = Harness.of(ONE, handlers={"work": failures(FLAKY, FLAKY, FLAKY)})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    assert types(h)[-5:] == [
        E.RETRY_PROCESSED,
        E.TASK_DEAD_LETTERED,
        E.STEP_FINISHED,
        E.NEXT_EVALUATED,
        E.WORKFLOW_FINISHED,  # execution_failed
    ]


def test_the_default_policy_retries_only_transient_errors() -> None:
    steps = "- step: work\n  tool: {kind: python, code: pass}\n"
    defaults = RetryDefaults(max_attempts=2, jitter=False)
    h = Harness.of(steps, handlers={"work": failures(FLAKY, 1)}, retry_defaults=defaults)
    h.run()
    assert h.status is ExecutionStatus.OK
    assert h.requeued == [RequeueTask("e1.work", 2, 0.2)]
    for error in (ValueError("bad input"), TaskFailure("nope", "FatalError", retryable=True)):
        h = Harness.of(steps, handlers={"work": failures(error)})
        h.run()
        assert h.status is ExecutionStatus.FAIL
        assert not [t for t in types(h) if t.startswith("retry.")]
        assert h.requeued == []


def test_a_playbook_retry_retries_any_failure_but_a_fatal_one() -> None:
    h = Harness.of(ONE, handlers={"work": failures(ValueError("flaky"), 2)})
    h.run()
    assert h.status is ExecutionStatus.OK
    assert h.of_type(E.RETRY_STARTED)[0].payload["reason"] == "failed"
    h = Harness.of(ONE)
    h.outcome("e1.work", ok=False, error="HTTP 404", error_type="HttpError", this=_answer(404))
    assert h.status is ExecutionStatus.FAIL
    assert h.requeued == []


def test_retry_false_never_retries() -> None:
    steps = "- step: work\n  tool: {kind: python, code: pass}\n  retry: false\n"
    h = Harness.of(steps, handlers={"work": failures(FLAKY)})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    assert h.requeued == []
    (exhausted,) = h.of_type(E.RETRY_PROCESSED)
    assert (exhausted.payload["attempts"], exhausted.payload["max_attempts"]) == (1, 1)


# --- retry_when and stop_when ------------------------------------------------------------

HTTP = """
- step: fetch
  tool: {kind: http, url: "https://example.com/x"}
  retry:
    max_attempts: 3
    initial_delay: 0.5
    jitter: false
    retry_when: "{{ status_code == 503 }}"
  result: {pick: "{{ this.data }}", as: body}
"""


def _answer(status: int, data: Any = None) -> dict[str, Any]:
    return {"status_code": status, "headers": {}, "data": data}


def test_retry_when_retries_an_ok_503_answer() -> None:
    h = Harness.of(HTTP, handlers={"fetch": failures(_answer(503), _answer(200, "fine"))})
    h.run()
    assert h.status is ExecutionStatus.OK
    (retry,) = h.of_type(E.RETRY_STARTED)
    assert retry.payload == {
        "task_id": "e1.fetch",
        "attempt": 2,
        "max_attempts": 3,
        "delay_ms": 500,
        "reason": "retry_when",
    }
    assert h.state.context["body"] == "fine"


def test_retry_when_still_true_at_the_last_attempt_fails_the_step() -> None:
    h = Harness.of(HTTP, handlers={"fetch": failures(*[_answer(503)] * 3)})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    (exhausted,) = h.of_type(E.RETRY_PROCESSED)
    assert exhausted.payload["reason"] == "retry_when"
    assert exhausted.payload["error"] == "retry_when was still true after 3 attempts"
    assert "error_type" not in exhausted.payload
    assert h.finished("fetch").payload["error"] == "retry_when was still true after 3 attempts"


def test_retry_when_false_leaves_a_failure_alone() -> None:
    steps = HTTP.replace("status_code == 503", "status_code == 502")
    fail = TaskFailure("HTTP 503", "HttpError", retryable=True)
    h = Harness.of(steps, handlers={"fetch": failures(fail)})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    assert h.requeued == []
    assert not h.of_type(E.RETRY_PROCESSED)


def test_stop_when_stops_the_retries() -> None:
    steps = """
- step: work
  tool: {kind: python, code: pass}
  retry: {max_attempts: 5, jitter: false, stop_when: "{{ error == 'give up' }}"}
"""
    h = Harness.of(steps, handlers={"work": failures(ValueError("again"), ValueError("give up"))})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    assert types(h).count(E.RETRY_STARTED) == 1
    assert not h.of_type(E.RETRY_PROCESSED)
    assert h.finished("work").payload["error"] == "give up"


def test_retry_templates_see_the_retry_names_and_the_step_context() -> None:
    steps = """
- step: work
  bind: {limit: 2}
  tool: {kind: python, code: pass}
  retry:
    max_attempts: 5
    jitter: false
    retry_when: "{{ attempt < limit and node_id == 'work' and data == 'x' and success }}"
"""
    h = Harness.of(steps, handlers={"work": failures("x", "x", "x")})
    h.run()
    assert h.status is ExecutionStatus.OK
    assert [e.payload["attempt"] for e in h.of_type(E.RETRY_STARTED)] == [2]


def test_a_broken_retry_template_fails_the_task_naming_it() -> None:
    steps = """
- step: work
  tool: {kind: python, code: "def main(context, args): pass"}
  retry: {retry_when: "{{ nope.x }}"}
"""
    h = Harness.of(steps, handlers={"work": failures(ValueError("boom"))}, check_names=False)
    h.run()
    error = h.finished("work").payload["error"]
    assert error.startswith("retry.retry_when: ")
    assert error.endswith("(the tool failed: boom)")
    h = Harness.of(steps, handlers={"work": failures(1)}, check_names=False)
    h.run()
    assert h.finished("work").payload["error"].startswith("retry.retry_when: ")


# --- loops -------------------------------------------------------------------------------

LOOP = """
- step: lp
  loop: {collection: [a, b, c], mode: parallel}
  tool: {kind: python, code: pass, args: {v: "{{ item }}"}}
  retry: {max_attempts: 3, initial_delay: 1, jitter: true}
  result: {as: outs}
"""


def test_loop_items_retry_independently() -> None:
    h = Harness.of(LOOP)
    h.complete("lp", 0, this="A")
    h.outcome("e1.lp.1", ok=False, error="flaky", error_type="TimeoutError")
    h.complete("lp", 2, this="C")
    assert h.state.steps["lp"].status.value == "running"
    h.outcome("e1.lp.1", ok=False, error="flaky", error_type="TimeoutError")
    assert h.task("lp", 1).attempt == 3
    h.complete("lp", 1, this="B")
    assert h.status is ExecutionStatus.OK
    assert h.state.context["outs"] == ["A", "B", "C"]
    retries = h.of_type(E.RETRY_STARTED)
    assert [(e.payload["task_id"], e.payload["index"], e.payload["attempt"]) for e in retries] == [
        ("e1.lp.1", 1, 2),
        ("e1.lp.1", 1, 3),
    ]
    assert [c.task_id for c in h.requeued] == ["e1.lp.1", "e1.lp.1"]
    h.check_full_fold()


def test_a_sequential_loop_waits_for_the_retried_item() -> None:
    h = Harness.of(LOOP.replace("parallel", "sequential"))
    h.outcome("e1.lp.0", ok=False, error="flaky", error_type="TimeoutError")
    assert h.pending_ids() == ["e1.lp.0"]
    h.complete("lp", 0, this="A")
    assert h.pending_ids() == ["e1.lp.1"]


def test_an_exhausted_item_fails_the_loop() -> None:
    h = Harness.of(LOOP.replace("[a, b, c]", "[a, b]"))
    h.complete("lp", 0, this="A")
    for _ in range(3):
        h.outcome("e1.lp.1", ok=False, error="down", error_type="ConnectError")
    (exhausted,) = h.of_type(E.RETRY_PROCESSED)
    assert exhausted.payload["index"] == 1
    assert exhausted.payload["attempts"] == 3
    finished = h.of_type(E.LOOP_ITERATION_FINISHED)[-1].payload
    assert finished == {"index": 1, "ok": False, "error": "down"}
    assert h.step_status("lp") == "failed"


def test_parallel_items_draw_different_delays() -> None:
    h = Harness.of(LOOP)
    for index in range(3):
        h.outcome(f"e1.lp.{index}", ok=False, error="x", error_type="TimeoutError")
    delays = [c.delay_s for c in h.requeued]
    assert len(set(delays)) == 3
    assert all(0.5 <= d < 1.0 for d in delays)


# --- leases and retries share the attempts ----------------------------------------------


def _expire(h: Harness, task_id: str) -> None:
    h.deliver(Event(0, E.LEASE_EXPIRED.value, "e1", 0.0, None, {"task_id": task_id}))


def test_a_reclaim_counts_as_an_attempt() -> None:
    h = Harness.of(ONE)
    _expire(h, "e1.work")
    h.outcome("e1.work", ok=False, error="flaky", error_type="TimeoutError")
    assert h.of_type(E.RETRY_STARTED)[0].payload["attempt"] == 3
    h.outcome("e1.work", ok=False, error="flaky", error_type="TimeoutError")
    assert h.of_type(E.RETRY_PROCESSED)[0].payload["attempts"] == 3
    assert h.status is ExecutionStatus.FAIL


def test_losing_the_lease_too_often_ends_the_retries() -> None:
    h = Harness.of(ONE)
    for _ in range(3):
        _expire(h, "e1.work")
    (exhausted,) = h.of_type(E.RETRY_PROCESSED)
    assert exhausted.payload["reason"] == "lease_expired"
    assert exhausted.payload["error_type"] == "LeaseExpired"
    assert "max_attempts" not in exhausted.payload
    assert h.status is ExecutionStatus.FAIL


def test_lease_expiries_are_counted_apart_from_retries() -> None:
    h = Harness.of(ONE.replace("max_attempts: 3", "max_attempts: 9"))
    for _ in range(4):
        h.outcome("e1.work", ok=False, error="flaky", error_type="TimeoutError")
    _expire(h, "e1.work")  # attempt 6, the first expiry: reclaimed, not failed
    assert h.of_type(E.TASK_RECLAIMED)[0].payload["attempt"] == 6
    assert h.status is ExecutionStatus.RUNNING


# --- purity: the same log gives the same decisions ---------------------------------------

OUTCOMES = st.sampled_from(
    [
        {"ok": True, "this": _answer(200, 1)},
        {"ok": True, "this": _answer(503)},
        {"ok": False, "error": "t", "error_type": "TimeoutError"},
        {"ok": False, "error": "o", "error_type": "ValueError"},
        {"ok": False, "error": "f", "error_type": "FatalError"},
    ]
)
SHAPES = st.sampled_from(
    [
        "- step: s\n  tool: {kind: python, code: pass}\n",
        "- step: s\n  tool: {kind: python, code: pass}\n  retry: 4\n",
        "- step: s\n  tool: {kind: python, code: pass}\n"
        '  retry: {max_attempts: 4, retry_when: "{{ status_code == 503 or not success }}"}\n',
        "- step: s\n  loop: {collection: [1, 2], mode: parallel}\n"
        "  tool: {kind: python, code: pass}\n  retry: {max_attempts: 3, backoff: linear}\n",
    ]
)


def _drive(steps: str, answers: list[dict[str, Any]]) -> Harness:
    h = Harness.of(steps)
    for answer in answers:
        if not h.pending:
            break
        h.outcome(h.pending[0].task_id, **answer)
    return h


@settings(max_examples=150, deadline=None)
@given(steps=SHAPES, answers=st.lists(OUTCOMES, max_size=10))
def test_decisions_are_a_pure_function_of_the_log(
    steps: str, answers: list[dict[str, Any]]
) -> None:
    first = _drive(steps, answers)
    second = _drive(steps, answers)
    assert [e.to_dict() for e in first.events] == [e.to_dict() for e in second.events]
    assert first.commands == second.commands
    # replaying the inputs into a fresh engine gives the same events, byte for byte
    replay = Harness.of(steps)
    for event in first.inputs:
        replay.deliver(event)
    dump = [json.dumps(e.to_dict(), sort_keys=True) for e in first.events]
    assert [json.dumps(e.to_dict(), sort_keys=True) for e in replay.events] == dump
    first.check_full_fold()
    attempts = [c.attempt for c in first.requeued]
    assert all(a >= 2 for a in attempts)


# --- a retry a pipeline's policy rule asks for ---------------------------------------------


def test_a_rule_s_retry_is_decided_from_the_outcome_with_its_delay() -> None:
    """A pipeline's rule counted its tries and computed the delay: the engine takes them
    from the outcome (not the step's policy), as `retry.started` and a requeue."""
    h = Harness.of("- step: work\n  tool: noop\n", start=True)
    request = {"task": "fetch", "try": 1, "attempts": 3, "delay_s": 2.5}
    h.outcome(
        "e1.work", ok=False, error="HTTP 500", error_type="HttpError", retryable=True,
        retry=request,
    )  # fmt: skip
    assert h.requeued == [RequeueTask("e1.work", 2, 2.5)]
    [started] = h.of_type(E.RETRY_STARTED)
    assert started.payload["reason"] == "rule"
    assert started.payload["task"] == "fetch" and started.payload["try"] == 1
    assert started.payload["max_attempts"] == 3 and started.payload["delay_ms"] == 2500
    # a fatal error type does not stop a retry the rule asked for
    h = Harness.of("- step: work\n  tool: noop\n", start=True)
    h.outcome("e1.work", ok=False, error="x", error_type="TemplateError", retry=request)
    assert h.requeued == [RequeueTask("e1.work", 2, 2.5)]


def test_a_rule_s_exhausted_retries_end_in_the_dead_letter_queue() -> None:
    h = Harness.of("- step: work\n  tool: noop\n", start=True)
    h.outcome(
        "e1.work", ok=False, error="task 'fetch' failed after 3 attempts: HTTP 500",
        error_type="PolicyFailure", retry={"task": "fetch", "attempts": 3, "exhausted": True},
    )  # fmt: skip
    assert h.status is ExecutionStatus.FAIL
    assert h.requeued == []
    [processed] = h.of_type(E.RETRY_PROCESSED)
    assert processed.payload["reason"] == "rule" and processed.payload["task"] == "fetch"
    assert processed.payload["max_attempts"] == 3
    [dead] = h.of_type(E.TASK_DEAD_LETTERED)
    assert dead.payload["reason"] == "exhausted"


@pytest.mark.parametrize(
    ("delay", "expected"), [(-1, 0.0), (float("nan"), 0.0), ("5", 0.0), (1e9, 3600.0), (True, 0.0)]
)
def test_a_rule_s_delay_is_bounded(delay: Any, expected: float) -> None:
    h = Harness.of("- step: work\n  tool: noop\n", start=True)
    h.outcome("e1.work", ok=False, error="x", retry={"task": "a", "try": 1, "delay_s": delay})
    assert h.requeued == [RequeueTask("e1.work", 2, expected)]


def test_a_retry_request_on_a_success_is_ignored() -> None:
    h = Harness.of("- step: work\n  tool: noop\n", start=True)
    h.outcome("e1.work", ok=True, this=1, retry={"task": "a", "try": 1, "delay_s": 1})
    assert h.requeued == [] and h.status is ExecutionStatus.OK
