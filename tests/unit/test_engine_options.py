"""EngineOptions: the engine's defaults for what a playbook leaves unsaid (retries, sink
retries, timeouts, failure policies), and a playbook that says something winning."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness, TaskFailure

from noetl.core import EventType, ExecutionStatus, Task
from noetl.dsl import load_playbook_text
from noetl.engine import EngineOptions
from noetl.engine.options import effective_policy
from noetl.engine.retry import RetryDefaults

E = EventType

FLAKY = TaskFailure("timed out", "TimeoutError", retryable=True)
BROKEN = TaskFailure("bad input", "ValueError")


def always(failure: Exception) -> Any:
    def handler(task: Task) -> Any:
        raise failure

    return handler


def tool_attempts(h: Harness, step: str) -> int:
    return len(h.of_type(E.TOOL_PROCESSED, step))


# --- retries -----------------------------------------------------------------------------


def test_the_options_retry_is_the_policy_of_a_step_without_retry() -> None:
    options = EngineOptions(retry=RetryDefaults(max_attempts=2, initial_delay=0, jitter=False))
    h = Harness.of(
        "- step: start\n  tool: {kind: python, code: pass}",
        handlers={"start": always(FLAKY)},
        options=options,
    )
    h.run()
    assert h.status is ExecutionStatus.FAIL
    assert tool_attempts(h, "start") == 2
    [exhausted] = h.of_type(E.RETRY_PROCESSED, "start")
    assert exhausted.payload["max_attempts"] == 2


def test_retry_defaults_given_directly_override_the_options() -> None:
    options = EngineOptions(retry=RetryDefaults(max_attempts=5))
    h = Harness.of(
        "- step: start\n  tool: {kind: python, code: pass}",
        start=False,
        options=options,
        retry_defaults=RetryDefaults(max_attempts=3),
    )
    assert h.engine.retry_rules["start"].max_attempts == 3


def test_a_step_retry_wins_over_the_options() -> None:
    options = EngineOptions(retry=RetryDefaults(max_attempts=9))
    h = Harness.of(
        "- step: start\n  retry: {max_attempts: 2, initial_delay: 0}\n"
        "  tool: {kind: python, code: pass}",
        handlers={"start": always(FLAKY)},
        options=options,
    )
    h.run()
    assert tool_attempts(h, "start") == 2


# --- sinks -------------------------------------------------------------------------------

SINKS = """
- step: start
  tool: {kind: python, code: pass}
  result:
    sink:
      - file: {path: a.json}
      - file: {path: b.json, id: own, retry: {max_attempts: 4}, timeout_ms: 500}
"""


def sinks_of(options: EngineOptions | None, policy: str = "") -> tuple[dict[str, Any], ...]:
    h = Harness.of(SINKS, options=options, policy=policy)
    return h.task("start").sinks


def test_a_sink_without_retry_or_timeout_gets_the_options_defaults() -> None:
    options = EngineOptions(
        sink_retry=RetryDefaults(max_attempts=8, initial_delay=0.2, max_delay=60),
        sink_timeout_ms=700,
    )
    plain, own = sinks_of(options)
    assert plain["retry"] == {
        "max_attempts": 8,
        "initial_delay": 0.2,
        "backoff_multiplier": 2.0,
        "max_delay": 60,
        "jitter": True,
        "backoff": "exponential",
    }
    assert plain["timeout_ms"] == 700
    assert own["retry"]["max_attempts"] == 4
    assert own["timeout_ms"] == 500


def test_without_options_a_sink_keeps_the_worker_defaults() -> None:
    plain, _ = sinks_of(None)
    assert plain["retry"] is None
    assert plain["timeout_ms"] is None


@pytest.mark.parametrize("where", ["playbook", "options"])
def test_on_sink_fail_fail_step_tries_a_sink_without_retry_once(where: str) -> None:
    options = EngineOptions(
        sink_retry=RetryDefaults(max_attempts=8),
        on_sink_fail="fail_step" if where == "options" else None,
    )
    policy = "on_sink_fail: fail_step" if where == "playbook" else ""
    plain, own = sinks_of(options, policy)
    assert plain["retry"] == {"max_attempts": 1}
    assert own["retry"]["max_attempts"] == 4  # its own retry still applies


def test_on_sink_fail_async_ignore_from_the_options_makes_every_sink_best_effort() -> None:
    plain, own = sinks_of(EngineOptions(on_sink_fail="async_ignore"))
    assert plain["async"] is True and own["async"] is True


def test_a_playbook_on_sink_fail_wins_over_the_options() -> None:
    plain, _ = sinks_of(EngineOptions(on_sink_fail="async_ignore"), "on_sink_fail: retry")
    assert plain["async"] is False


# --- timeouts ----------------------------------------------------------------------------

TIMEOUTS = """
- step: start
  next: [plain, own, looped, looped_own, child, via_workbook]
- step: plain
  tool: {kind: python, code: pass}
- step: own
  tool: {kind: http, url: "http://x", timeout_ms: 1234}
- step: looped
  loop: {collection: [1]}
  tool: {kind: python, code: pass}
- step: looped_own
  loop: {collection: [1], item_timeout_ms: 99}
  tool: {kind: python, code: pass}
- step: child
  tool: {kind: playbook, path: child.yaml}
- step: via_workbook
  tool: {kind: workbook, name: run_child}
"""
WORKBOOK = """
- name: run_child
  tool: {kind: playbook, path: child.yaml}
"""


def timeouts_of(options: EngineOptions | None) -> dict[str, int | None]:
    h = Harness.of(TIMEOUTS, options=options, workbook=WORKBOOK)
    return {t.step: t.timeout_ms for t in h.dispatched}


def test_default_timeouts_reach_tasks_that_set_none() -> None:
    options = EngineOptions(tool_timeout_ms=30_000, loop_item_timeout_ms=5_000)
    assert timeouts_of(options) == {
        "plain": 30_000,
        "own": 1234,
        "looped": 5_000,
        "looped_own": 99,
        "child": None,  # the playbook tool waits for its child as long as it takes
        "via_workbook": None,
    }


def test_a_loop_item_takes_the_tool_default_when_no_loop_default_is_set() -> None:
    assert timeouts_of(EngineOptions(tool_timeout_ms=700))["looped"] == 700


def test_without_options_tasks_carry_no_timeout_of_their_own() -> None:
    assert timeouts_of(None) == {
        "plain": None,
        "own": 1234,
        "looped": None,
        "looped_own": 99,
        "child": None,
        "via_workbook": None,
    }


# --- failure policies --------------------------------------------------------------------

TWO_BRANCHES = """
- step: start
  next: [a, b]
- step: a
  tool: {kind: python, code: pass}
- step: b
  tool: {kind: noop}
- step: cleanup
  tool: {kind: noop}
"""


def run_two_branches(options: EngineOptions | None, policy: str = "") -> Harness:
    h = Harness.of(TWO_BRANCHES, handlers={"a": always(BROKEN)}, options=options, policy=policy)
    h.run()
    return h


def test_nothing_set_halts() -> None:
    h = run_two_branches(None)
    assert h.status is ExecutionStatus.FAIL
    assert h.of_type(E.NEXT_EVALUATED, "a")[0].payload["on_step_fail"] == "halt"


def test_on_step_fail_continue_from_the_options_changes_the_outcome() -> None:
    h = run_two_branches(EngineOptions(on_step_fail="continue"))
    assert h.status is ExecutionStatus.OK
    assert h.step_status("a") == "failed"
    assert h.step_status("b") == "ok"


def test_a_playbook_policy_wins_over_the_options() -> None:
    h = run_two_branches(EngineOptions(on_step_fail="continue"), "on_step_fail: halt")
    assert h.status is ExecutionStatus.FAIL


def test_a_route_edge_default_calls_the_step_it_names() -> None:
    h = run_two_branches(EngineOptions(on_step_fail="route_edge:cleanup"))
    assert h.step_status("cleanup") == "ok"
    assert h.of_type(E.STEP_CALLED, "cleanup")[0].payload["by"] == "a"


def test_a_route_edge_default_naming_a_missing_step_halts() -> None:
    h = run_two_branches(EngineOptions(on_step_fail="route_edge:nowhere"))
    assert h.status is ExecutionStatus.FAIL
    assert h.engine.policy.on_step_fail == "halt"


def test_on_when_error_fail_step_from_the_options() -> None:
    steps = """
- step: start
  when: "{{ no_such_name.x }}"
  tool: {kind: noop}
"""
    parked = Harness.of(steps, check_names=False)
    assert parked.step_status("start") == "skipped"  # treat_as_false: parked, then skipped
    failed = Harness.of(steps, options=EngineOptions(on_when_error="fail_step"), check_names=False)
    assert failed.step_status("start") == "failed"


def test_effective_policy_fills_only_what_the_playbook_leaves_unset() -> None:
    text = """\
metadata: {name: p}
policy: {on_when_error: treat_as_false}
workflow:
  - step: start
    tool: noop
"""
    playbook = load_playbook_text(text).require()
    assert playbook.policy.on_step_fail is None
    assert playbook.policy.route_edge_target is None
    options = EngineOptions(on_step_fail="continue", on_when_error="fail_step")
    policy = effective_policy(playbook, options)
    assert (policy.on_step_fail, policy.on_sink_fail, policy.on_when_error) == (
        "continue",
        "retry",
        "treat_as_false",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tool_timeout_ms": 0}, "tool_timeout_ms"),
        ({"sink_timeout_ms": -1}, "sink_timeout_ms"),
        ({"on_step_fail": "stop"}, "on_step_fail"),
        ({"on_sink_fail": "drop"}, "on_sink_fail"),
        ({"on_when_error": "raise"}, "on_when_error"),
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineOptions(**kwargs)
