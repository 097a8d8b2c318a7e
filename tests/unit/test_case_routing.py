"""Routing a step with a `case`: the three `next_policy` values, branch edges with their
own `when`, a branch whose task failed, and `eval_mode: on_event` branching on `this`."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import EventType, Task

E = EventType

POLICY = """
- step: start
  spec: {{case_mode: inclusive, next_policy: {policy}}}
  case:
    - when: true
      then: {{set: {{a: 1}}, next: left}}
    - when: true
      then: {{set: {{b: 2}}, next: right}}
  next: own
- step: left
- step: right
- step: own
"""


def _routed(h: Harness, step: str = "start") -> dict[str, Any]:
    [event] = h.of_type(E.NEXT_EVALUATED, step)
    return event.payload


def test_end_step_takes_the_first_routing_branch_instead_of_the_steps_next() -> None:
    h = Harness.of(POLICY.format(policy="end_step"))
    assert _routed(h) == {
        "mode": "inclusive",
        "taken": ["left"],
        "branch_edges": [{"branch": 0, "to": "left", "fired": True}],
        "policy": "end_step",
        "winner_branch": 0,
        "suppressed_branches": [1],
    }
    assert h.state.context == {"a": 1}
    assert h.started_steps() == ["start", "left"]


def test_break_chain_routes_nowhere_once_a_branch_acted() -> None:
    h = Harness.of(POLICY.format(policy="break_chain"))
    assert _routed(h) == {
        "mode": "inclusive",
        "taken": [],
        "policy": "break_chain",
        "winner_branch": None,
        "suppressed_branches": [0, 1],
    }
    assert h.state.context == {"a": 1, "b": 2}  # every match acted
    assert h.started_steps() == ["start"]
    assert h.status == "ok"


def test_break_chain_without_a_match_routes_by_the_steps_next() -> None:
    h = Harness.of(POLICY.format(policy="break_chain").replace("when: true", "when: false"))
    assert _routed(h)["taken"] == ["own"]


def test_defer_takes_every_branch_route_and_then_the_steps_next() -> None:
    h = Harness.of(POLICY.format(policy="defer"))
    routed = _routed(h)
    assert routed["taken"] == ["left", "right", "own"]
    assert routed["edges"] == [{"to": "own", "fired": True}]
    assert [e["to"] for e in routed["branch_edges"]] == ["left", "right"]
    assert routed["winner_branch"] is None
    assert sorted(h.started_steps()) == ["left", "own", "right", "start"]


def test_a_failed_step_under_break_chain_is_not_handled() -> None:
    h = Harness.of(
        """
        - step: start
          spec: {next_policy: break_chain}
          case:
            - when: true
              then: {fail: stop here, next: handler}
        - step: handler
        """
    )
    routed = _routed(h)
    assert (routed["taken"], routed["unhandled_failure"]) == ([], True)
    assert h.status == "fail"


def test_branch_edges_are_evaluated_when_the_step_finishes_with_its_result() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop, args: {size: 50}}
          result: {as: res}
          case:
            - when: true
              then:
                next:
                  mode: exclusive
                  to:
                    - {step: big, when: "{{ res.size > 100 }}"}
                    - {step: medium, when: "{{ res.size > 10 }}"}
                    - small
        - step: big
        - step: medium
        - step: small
        """
    )
    h.run()
    assert _routed(h)["branch_edges"] == [
        {"branch": 0, "to": "big", "fired": False},
        {"branch": 0, "to": "medium", "fired": True},
    ]
    assert h.started_steps() == ["start", "medium"]


def test_the_route_of_a_branch_whose_task_failed_is_not_taken() -> None:
    def answer(task: Task) -> Any:
        if task.task_id.endswith("case0"):
            raise RuntimeError("notify failed")
        return task.args

    h = Harness.of(
        """
        - step: start
          tool: noop
          spec: {eval_mode: on_event, next_policy: defer}
          case:
            - when: true
              then:
                tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
                next: notified
          next:
            - {step: cleanup, when: "{{ fail('start') }}"}
        - step: notified
        - step: cleanup
        """,
        handlers={"start": answer},
    )
    h.run()
    routed = _routed(h)
    assert routed["branch_edges"] == [{"branch": 0, "to": "notified", "fired": False}]
    assert routed["taken"] == ["cleanup"]  # the step's own edge handles the failure
    assert h.steps()["start"]["error"] == "case[0].then.tool: notify failed"
    assert h.status == "ok"


# --- on_event with `this` ----------------------------------------------------------------------

ON_STATUS = """
- step: fetch
  tool: {kind: http, spec: {url: "https://api.example.com/items"}, retry: false}
  spec: {eval_mode: on_event}
  case:
    - when: "{{ status_code == 200 and this.data | length > 0 }}"
      then: {set: {count: "{{ this.data | length }}"}, next: process}
    - when: "{{ status_code == 200 }}"
      then: {set: {count: 0}, next: nothing_to_do}
    - when: "{{ status_code == 404 }}"
      then: {next: create}
    - when: "{{ result.status_code >= 500 }}"
      then: {fail: "the API is down"}
  next: default_route
- step: process
- step: nothing_to_do
- step: create
- step: default_route
"""


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"ok": True, "this": {"status_code": 200, "data": [1, 2]}}, ("ok", ["process"])),
        ({"ok": True, "this": {"status_code": 200, "data": []}}, ("ok", ["nothing_to_do"])),
        (
            {
                "ok": False,
                "this": {"status_code": 404},
                "error": "HTTP 404",
                "error_type": "HttpError",
            },
            ("failed", ["create"]),
        ),
        (
            {
                "ok": False,
                "this": {"status_code": 500},
                "error": "HTTP 500",
                "error_type": "HttpError",
                "retryable": True,
            },
            ("failed", []),
        ),
        ({"ok": True, "this": {"status_code": 204}}, ("ok", ["default_route"])),
    ],
)
def test_on_event_branches_on_the_http_status_of_this(
    answer: dict[str, Any], expected: tuple[str, list[str]]
) -> None:
    h = Harness.of(ON_STATUS)
    h.outcome(h.task("fetch").task_id, **answer)
    status, taken = expected
    assert h.step_status("fetch") == status
    assert _routed(h, "fetch")["taken"] == taken
    if taken == ["process"]:
        assert h.state.context == {"count": 2}
    if status == "failed" and not taken:
        assert h.steps()["fetch"]["error"] == "the API is down"
        assert h.status == "fail"


def test_on_event_sees_the_final_outcome_after_the_steps_own_retries() -> None:
    answers = iter(
        [
            {"ok": False, "this": None, "error": "timeout", "error_type": "TimeoutError"},
            {"ok": True, "this": {"n": 1}},
        ]
    )
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop, retry: {max_attempts: 2, initial_delay: 0}}
          spec: {eval_mode: on_event}
          case:
            - when: "{{ success and attempt == 2 }}"
              then: {set: {second_try: true}}
        """
    )
    h.outcome(h.task("start").task_id, **next(answers))
    assert h.of_type(E.CASE_STARTED) == []  # not final yet: the policy retries
    h.outcome(h.task("start").task_id, **next(answers))
    [started] = h.of_type(E.CASE_STARTED)
    assert (started.payload["attempt"], started.payload["outcome"]) == (
        2,
        {"ok": True, "this": {"n": 1}},
    )
    assert h.state.context == {"second_try": True}


def test_on_event_on_a_loop_sees_the_list_of_outputs() -> None:
    h = Harness.of(
        """
        - step: scores
          loop: {collection: [1, 2, 3], mode: parallel}
          tool: {kind: noop, args: {v: "{{ item * 10 }}"}}
          result: {pick: "{{ this.v }}", as: values}
          spec: {eval_mode: on_event}
          case:
            - when: "{{ this | sum > 50 }}"
              then: {set: {total: "{{ this | sum }}"}, next: high}
            - when: true
              then: {next: low}
        - step: high
        - step: low
        """
    )
    h.run()
    [started] = h.of_type(E.CASE_STARTED)
    assert started.payload["trigger"] == "loop.finished"
    assert started.payload["outcome"] == {"ok": True, "this": [10, 20, 30]}
    assert h.state.context == {"values": [10, 20, 30], "total": 60}
    assert h.started_steps() == ["scores", "high"]


def test_an_on_entry_case_on_a_loop_step_runs_before_its_items() -> None:
    h = Harness.of(
        """
        - step: scores
          spec: {eval_mode: on_entry}
          case:
            - when: true
              then:
                tool: {kind: noop, args: {factor: 3}}
                result: {pick: "{{ this.factor }}", as: factor}
          loop: {collection: [1, 2]}
          tool: {kind: noop, args: {v: "{{ item * factor }}"}}
          result: {pick: "{{ this.v }}", as: values}
        """
    )
    h.run()
    assert h.state.context == {"factor": 3, "values": [3, 6]}
    assert h.status == "ok"
