"""Seed 004 section 5 `test_event_sourcing` for `case`: the events a case emits, with their
payloads asserted exactly, the state as their fold, and replay determinism. A step without
a case emits exactly what it did before (see also tests/golden)."""

from __future__ import annotations

from typing import Any

from engine_harness import Harness

from noetl.core import Event, EventType
from noetl.engine import fold

E = EventType

ENTRY = """
- step: start
  bind: {who: ada}
  spec: {eval_mode: on_entry, case_mode: inclusive, next_policy: defer}
  case:
    - when: "{{ workload.n > 1 }}"
      then:
        set: {greeting: "hi {{ who }}"}
        tool: {kind: noop, args: {text: "{{ greeting }}"}}
        result: {pick: "{{ this.text }}", as: said}
    - when: "{{ workload.n > 100 }}"
      then: {set: {never: true}}
    - when: "{{ workload.n > 2 }}"
      then: {next: [audit]}
  tool: {kind: noop, args: {said: "{{ said }}"}}
  next: report
- step: audit
- step: report
"""


def _case_events(h: Harness, step: str = "start") -> list[tuple[str, dict[str, Any]]]:
    kinds = {
        E.CASE_STARTED,
        E.CASE_EVALUATED,
        E.CASE_BRANCH_STARTED,
        E.CASE_BRANCH_FINISHED,
        E.TOOL_STARTED,
        E.NEXT_EVALUATED,
        E.STEP_STARTED,
        E.STEP_FINISHED,
        E.STEP_SKIPPED,
        E.RETRY_STARTED,
        E.RETRY_PROCESSED,
        E.TASK_DEAD_LETTERED,
    }
    out = []
    for event in h.events:
        if event.step == step and event.type in kinds:
            payload = dict(event.payload)
            if "task" in payload:
                payload["task"] = payload["task"]["task_id"]
            out.append((event.type, payload))
    return out


def test_an_on_entry_case_emits_these_events() -> None:
    h = Harness.of(ENTRY, workload={"n": 5})
    branch_task = h.task("start")
    assert (branch_task.task_id, branch_task.key, branch_task.args) == (
        "e1.start.case0",
        "e1:start:case0",
        {"text": "hi ada"},
    )
    h.complete("start", this={"text": "hi ada"})
    own = h.task("start")
    assert (own.task_id, own.args) == ("e1.start", {"said": "hi ada"})
    h.complete("start", this={"said": "hi ada"})

    assert _case_events(h) == [
        ("step.started", {"bind": {"who": "ada"}}),
        (
            "case.started",
            {
                "round": 1,
                "trigger": "step.started",
                "eval_mode": "on_entry",
                "case_mode": "inclusive",
                "next_policy": "defer",
                "branch_order": "source",
            },
        ),
        (
            "case.evaluated",
            {
                "round": 1,
                "mode": "inclusive",
                "order": [0, 1, 2],
                "matched": [0, 2],
                "fired": [0, 2],
                "suppressed": [],
                "routes": [2],
            },
        ),
        (
            "case.branch.started",
            {
                "branch": 0,
                "round": 1,
                "actions": ["set", "tool", "result"],
                "context": {"greeting": "hi ada"},
                "task": "e1.start.case0",
            },
        ),
        ("case.branch.started", {"branch": 2, "round": 1, "actions": ["next"]}),
        (
            "case.branch.finished",
            {
                "branch": 0,
                "task_id": "e1.start.case0",
                "ok": True,
                "result": "hi ada",
                "context": {"said": "hi ada"},
            },
        ),
        ("tool.started", {"task": "e1.start"}),
        ("step.finished", {"result": {"said": "hi ada"}, "status": "ok"}),
        (
            "next.evaluated",
            {
                "mode": "inclusive",
                "taken": ["audit", "report"],
                "edges": [{"to": "report", "fired": True}],
                "branch_edges": [{"branch": 2, "to": "audit", "fired": True}],
                "policy": "defer",
                "winner_branch": None,
                "suppressed_branches": [],
            },
        ),
    ]
    assert h.status == "ok"
    assert h.state.context == {"greeting": "hi ada", "said": "hi ada"}


def test_an_on_event_case_emits_these_events() -> None:
    h = Harness.of(
        """
        - step: fetch
          tool: {kind: http, spec: {url: "https://example.com/x"}, retry: false}
          spec: {eval_mode: on_event}
          case:
            - when: "{{ status_code == 404 }}"
              then: {set: {missing: true}, next: not_found}
            - when: "{{ success }}"
              then: {next: found}
        - step: found
        - step: not_found
        """
    )
    task = h.task("fetch")
    h.outcome(
        task.task_id,
        ok=False,
        this={"status_code": 404, "headers": {}},
        error="HTTP 404 from example.com",
        error_type="HttpError",
        retryable=False,
    )

    assert _case_events(h, "fetch")[1:] == [
        (
            "case.started",
            {
                "round": 1,
                "trigger": "tool.processed",
                "eval_mode": "on_event",
                "case_mode": "exclusive",
                "next_policy": "end_step",
                "branch_order": "source",
                "task_id": "e1.fetch",
                "attempt": 1,
                "outcome": {
                    "ok": False,
                    "this": {"status_code": 404, "headers": {}},
                    "error": "HTTP 404 from example.com",
                    "error_type": "HttpError",
                },
            },
        ),
        (
            "case.evaluated",
            {
                "round": 1,
                "mode": "exclusive",
                "order": [0, 1],
                "matched": [0],
                "fired": [0],
                "suppressed": [],
                "routes": [0],
            },
        ),
        (
            "case.branch.started",
            {"branch": 0, "round": 1, "actions": ["set", "next"], "context": {"missing": True}},
        ),
        (
            "task.dead_lettered",
            {
                "task_id": "e1.fetch",
                "reason": "fatal",
                "attempts": 1,
                "kind": "http",
                "error": "HTTP 404 from example.com",
                "error_type": "HttpError",
            },
        ),
        ("step.finished", {"status": "failed", "error": "HTTP 404 from example.com"}),
        (
            "next.evaluated",
            {
                "mode": "inclusive",
                "taken": ["not_found"],
                "branch_edges": [{"branch": 0, "to": "not_found", "fired": True}],
                "policy": "end_step",
                "winner_branch": 0,
                "suppressed_branches": [],
            },
        ),
    ]
    # The branch handled the failure: the step failed, the execution goes on and ends ok.
    assert h.step_status("fetch") == "failed"
    assert h.started_steps() == ["fetch", "not_found"]
    assert h.status == "ok"


def test_the_state_is_the_fold_of_the_case_events() -> None:
    h = Harness.of(ENTRY, workload={"n": 5})
    h.run()
    h.check_full_fold()
    folded = fold(h.engine.new_state("e1"), [Event.from_dict(e.to_dict()) for e in h.events])
    case = folded.steps["start"].case
    assert case is not None
    assert (case.round, case.fired, case.routes, case.suppressed) == (1, [0, 2], [2], [])
    assert case.tasks == {"e1.start.case0": 0}
    assert folded == h.state


def test_the_same_inputs_give_the_same_case_events() -> None:
    h = Harness.of(ENTRY, workload={"n": 5})
    h.run()
    state = h.engine.new_state("e1")
    events = list(h.engine.start(state, h.workload, 0.0).events)
    for index, event in enumerate(h.inputs):
        events += h.engine.decide(state, event, float(index + 1)).events
    assert [e.to_dict() for e in events] == [e.to_dict() for e in h.events]
    assert state == h.state


def test_a_step_without_case_emits_no_case_event_and_the_same_payloads() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop, args: {x: 1}}
          next: [{step: b, when: "{{ ok('start') }}"}]
        - step: b
        """
    )
    h.run()
    assert h.engine.cases == {}
    assert not [e for e in h.events if e.type.startswith("case.") or e.type == "tool.started"]
    [routed] = h.of_type(E.NEXT_EVALUATED, "start")
    assert routed.payload == {
        "mode": "inclusive",
        "taken": ["b"],
        "edges": [{"to": "b", "fired": True}],
    }
    assert h.state.steps["start"].case is None
