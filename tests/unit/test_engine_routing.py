"""SEMANTICS section 3: routing with `next` (every form, inclusive, exclusive, else)."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import EventType, ExecutionStatus

E = EventType

TARGETS = """
- step: b
- step: c
- step: d
"""


def _route(
    next_yaml: str, *, ok: bool = True, policy: str = "", check_names: bool = True
) -> Harness:
    """`start` runs a noop task (completed ok or failed), then routes with `next_yaml`."""
    h = Harness.of(
        f"""
        - step: start
          tool: {{kind: noop, args: {{x: 1}}}}
          next: {next_yaml}
        {TARGETS.replace(chr(10), chr(10) + " " * 8)}
        """,
        policy=policy,
        workload={"pick": "c"},
        check_names=check_names,
    )
    if ok:
        h.complete("start", this={"x": 1})
    else:
        h.fail("start", error="nope")
    return h


def _next_payload(h: Harness) -> dict[str, Any]:
    (event,) = h.of_type(E.NEXT_EVALUATED, "start")
    return event.payload


@pytest.mark.parametrize(
    ("form", "taken"),
    [
        ("b", ["b"]),
        ("[b, c]", ["b", "c"]),
        ("[{step: b}, {step: c, when: 'false'}, {step: d}]", ["b", "d"]),
        ("{step: c}", ["c"]),
        ("{mode: inclusive, to: [b, d]}", ["b", "d"]),
        ("{mode: exclusive, to: [b, d]}", ["b"]),
        ("{to: [c, d]}", ["c", "d"]),
        ("{spec: {mode: exclusive}, arcs: [{step: c}, {step: b}]}", ["c"]),
        ("{spec: {mode: inclusive}, arcs: [{step: c}, {step: b}]}", ["c", "b"]),
        ("{arcs: [d, b]}", ["d", "b"]),
    ],
)
def test_every_next_form(form: str, taken: list[str]) -> None:
    h = _route(form)
    assert _next_payload(h)["taken"] == taken
    # the taken steps are called in edge order, by `start`, and each runs
    calls = [(e.step, e.payload) for e in h.of_type(E.STEP_CALLED) if e.step != "start"]
    assert calls == [(name, {"by": "start"}) for name in taken]
    assert h.started_steps() == ["start", *taken]
    assert h.status is ExecutionStatus.OK


def test_list_forms_are_inclusive() -> None:
    for form in ("b", "[b, c]", "[{step: b}]", "{step: b}"):
        assert _next_payload(_route(form))["mode"] == "inclusive"


def test_inclusive_takes_every_firing_edge_and_records_each_one() -> None:
    h = _route(
        "[{step: b, when: \"{{ workload.pick == 'c' }}\"}, "
        "{step: c, when: \"{{ workload.pick == 'c' }}\"}, "
        "{step: d, when: \"{{ workload.pick == 'd' }}\"}]"
    )
    assert _next_payload(h) == {
        "mode": "inclusive",
        "taken": ["b", "c"],
        "edges": [
            {"to": "b", "fired": True},
            {"to": "c", "fired": True},
            {"to": "d", "fired": False},
        ],
    }


def test_exclusive_takes_only_the_first_firing_edge() -> None:
    h = _route(
        "{mode: exclusive, to: ["
        "{step: b, when: \"{{ workload.pick == 'b' }}\"}, "
        "{step: c, when: \"{{ workload.pick == 'c' }}\"}, "
        "{step: d, when: 'true'}]}"
    )
    assert _next_payload(h) == {
        "mode": "exclusive",
        "taken": ["c"],
        "edges": [{"to": "b", "fired": False}, {"to": "c", "fired": True}],
    }
    assert h.started_steps() == ["start", "c"]
    assert h.steps()["d"] == {"status": "skipped"}


@pytest.mark.parametrize(("pick", "taken"), [("b", ["b"]), ("c", ["c"]), ("x", ["d"])])
def test_exclusive_edge_without_when_after_conditional_ones_is_the_else(
    pick: str, taken: list[str]
) -> None:
    h = Harness.of(
        f"""
        - step: start
          next:
            mode: exclusive
            to:
              - {{step: b, when: "{{{{ workload.pick == 'b' }}}}"}}
              - {{step: c, when: "{{{{ workload.pick == 'c' }}}}"}}
              - d
        {TARGETS.replace(chr(10), chr(10) + " " * 8)}
        """,
        workload={"pick": pick},
    )
    assert _next_payload(h)["taken"] == taken
    assert h.started_steps() == ["start", *taken]


def test_edge_without_when_fires_only_on_success() -> None:
    h = _route("[b, c]", ok=False, policy="on_step_fail: continue")
    assert _next_payload(h) == {
        "mode": "inclusive",
        "taken": [],
        "edges": [{"to": "b", "fired": False}, {"to": "c", "fired": False}],
        "on_step_fail": "continue",
    }
    assert h.started_steps() == ["start"]
    assert h.status is ExecutionStatus.OK


def test_edge_with_when_fires_on_failure_too() -> None:
    h = _route("[b, {step: c, when: \"{{ fail('start') }}\"}, {step: d, when: 'true'}]", ok=False)
    assert _next_payload(h) == {
        "mode": "inclusive",
        "taken": ["c", "d"],
        "edges": [
            {"to": "b", "fired": False},
            {"to": "c", "fired": True},
            {"to": "d", "fired": True},
        ],
    }
    # the failure was handled by the edges: the execution ends ok, `start` stays failed
    assert h.status is ExecutionStatus.OK
    assert h.steps()["start"] == {"status": "failed", "error": "nope"}
    assert h.started_steps() == ["start", "c", "d"]


def test_fail_edge_does_not_fire_on_success() -> None:
    h = _route("[b, {step: c, when: \"{{ fail('start') }}\"}]")
    assert _next_payload(h)["taken"] == ["b"]


def test_exclusive_else_does_not_fire_on_failure() -> None:
    h = _route(
        "{mode: exclusive, to: [{step: b, when: \"{{ ok('start') }}\"}, c]}",
        ok=False,
        policy="on_step_fail: continue",
    )
    assert _next_payload(h)["taken"] == []
    assert h.started_steps() == ["start"]


def test_edge_conditions_see_the_values_the_step_saved() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          result: {as: got}
          next:
            mode: exclusive
            to:
              - {step: b, when: "{{ got.n > 5 }}"}
              - c
        - step: b
        - step: c
        """
    )
    h.complete("start", this={"n": 7})
    assert h.started_steps() == ["start", "b"]


def test_edge_condition_error_does_not_fire_and_is_recorded() -> None:
    h = _route("[{step: b, when: '{{ nope.x }}'}, c]", check_names=False)
    payload = _next_payload(h)
    assert payload["taken"] == ["c"]
    assert payload["edges"][0]["to"] == "b"
    assert payload["edges"][0]["fired"] is False
    assert "nope" in payload["edges"][0]["error"]
    assert payload["edges"][1] == {"to": "c", "fired": True}


def test_edges_are_evaluated_once_when_the_step_finishes() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          next: [{step: b, when: "{{ done('other') }}"}]
        - step: b
        - step: other
        """
    )
    h.complete("start")
    assert len(h.of_type(E.NEXT_EVALUATED, "start")) == 1
    assert _next_payload(h)["taken"] == []
    assert h.steps()["b"] == {"status": "skipped"}
    assert h.status is ExecutionStatus.OK


def test_terminal_step_without_next_emits_no_next_evaluated_on_success() -> None:
    h = Harness.of("- step: start\n  tool: {kind: noop}")
    h.complete("start")
    assert h.of_type(E.NEXT_EVALUATED) == []
    assert h.status is ExecutionStatus.OK


# --- cycles: a call along a cycle of the graph starts a new run -----------------------------

PAGES = """\
- step: start
  tool: noop
  next: [fetch]
- step: fetch
  tool:
    kind: python
    spec: {code: "def main(context, args): pass"}
    args: {page: "{{ (pages | default([]) | length) + 1 }}"}
  result:
    collect: {into: pages}
  next: [check]
- step: check
  tool: noop
  next:
    mode: exclusive
    to:
      - {step: fetch, when: "{{ pages | length < 3 }}"}
      - {step: done}
- step: done
  tool: {kind: noop, args: {pages: "{{ pages }}"}}
"""


def test_a_back_edge_starts_a_new_run_until_the_cycle_ends() -> None:
    h = Harness.of(PAGES, handlers={"fetch": lambda t: {"page": t.args["page"]}})
    h.run()
    assert h.status is ExecutionStatus.OK, h.steps()
    assert h.state.context["pages"] == [{"page": 1}, {"page": 2}, {"page": 3}]
    fetches = [e.payload.get("task", {}).get("task_id") for e in h.of_type("step.started", "fetch")]
    assert fetches == [
        f"{h.state.execution_id}.fetch",
        f"{h.state.execution_id}.fetch.run2",
        f"{h.state.execution_id}.fetch.run3",
    ]
    runs = [e.payload.get("run") for e in h.of_type("step.called", "fetch")]
    assert runs == [None, 2, 3]
    assert h.steps()["fetch"]["run"] == 3 and h.steps()["check"]["run"] == 3
    assert h.step_status("done") == "ok"
    assert h.finished("done").payload["result"] == {
        "pages": [{"page": 1}, {"page": 2}, {"page": 3}]
    }


def test_max_runs_fails_a_cycle_that_does_not_end() -> None:
    forever = PAGES.replace("pages | length < 3", "true")
    h = Harness.of(forever, policy="max_runs: 4", handlers={"fetch": lambda t: {"page": 0}})
    h.run()
    assert h.status is ExecutionStatus.FAIL
    error = h.of_type("step.finished", "fetch")[-1].payload["error"]
    assert "run 5" in error and "policy.max_runs (4)" in error and "'check'" in error
    assert len(h.of_type("step.started", "fetch")) == 5


def test_a_call_that_closes_no_cycle_still_runs_a_step_once() -> None:
    join = """\
- step: start
  tool: noop
  next: [a, b]
- step: a
  tool: noop
  next: [end]
- step: b
  tool: noop
  next: [end]
- step: end
  tool: noop
"""
    h = Harness.of(join)
    h.run("lifo")
    assert h.status is ExecutionStatus.OK
    assert len(h.of_type("step.started", "end")) == 1
    calls = h.of_type("step.called", "end")
    assert [e.payload.get("run") for e in calls] == [None, None]
    assert calls[0].payload.get("ignored") is None and calls[1].payload.get("ignored")
