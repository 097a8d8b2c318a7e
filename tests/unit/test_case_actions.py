"""What each `case` action does: tool (a task of the step: its own id, retries, sinks, dead
letter, replay), set, result, sink, retry, fail and skip."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness, TaskFailure, playbook_text
from ruamel.yaml import YAML

from noetl.core import EventType, Task
from noetl.dsl import build_graph
from noetl.dsl.model import Playbook
from noetl.engine import Engine
from noetl.sinks import sink_output

E = EventType


def _payloads(h: Harness, event_type: str, step: str | None = None) -> list[dict[str, Any]]:
    return [e.payload for e in h.of_type(event_type, step)]


# --- tool --------------------------------------------------------------------------------------

BRANCH_TOOL = """
- step: start
  case:
    - when: true
      then:
        tool:
          kind: python
          code: "def main(context, args):\\n    return args\\n"
          args: {n: 1}
          retry: {max_attempts: 3, initial_delay: 1, backoff: fixed, jitter: false}
        result: {as: branch_out}
  tool: {kind: noop, args: {got: "{{ branch_out }}"}}
  spec: {eval_mode: on_entry}
  next: after
- step: after
- step: undo
"""


def test_a_branch_tool_runs_as_a_task_of_the_step_before_its_own_tool() -> None:
    h = Harness.of(BRANCH_TOOL)
    [branch_task] = h.pending
    assert (branch_task.task_id, branch_task.step, branch_task.kind, branch_task.args) == (
        "e1.start.case0",
        "start",
        "python",
        {"n": 1},
    )
    assert h.step_status("start") == "running"
    h.complete("start", this={"n": 1})
    own = h.task("start")
    assert own.task_id == "e1.start"
    assert own.args == {"got": {"n": 1}}  # the step's tool saw what the branch saved
    h.run()
    assert h.status == "ok"
    assert h.state.context == {"branch_out": {"n": 1}}


def test_a_failing_branch_tool_is_retried_by_its_policy_then_dead_lettered() -> None:
    def fail(task: Task) -> Any:
        raise TaskFailure("db down", "RuntimeError")

    h = Harness.of(BRANCH_TOOL, handlers={"start": fail})
    h.run()

    retries = _payloads(h, E.RETRY_STARTED, "start")
    assert [(r["task_id"], r["attempt"], r["max_attempts"], r["delay_ms"]) for r in retries] == [
        ("e1.start.case0", 2, 3, 1000),
        ("e1.start.case0", 3, 3, 1000),
    ]
    [exhausted] = _payloads(h, E.RETRY_PROCESSED, "start")
    assert exhausted == {
        "task_id": "e1.start.case0",
        "status": "exhausted",
        "reason": "failed",
        "attempts": 3,
        "max_attempts": 3,
        "kind": "python",
        "error": "db down",
        "error_type": "RuntimeError",
    }
    [dead] = _payloads(h, E.TASK_DEAD_LETTERED, "start")
    assert dead == {
        "task_id": "e1.start.case0",
        "reason": "exhausted",
        "attempts": 3,
        "kind": "python",
        "error": "db down",
        "error_type": "RuntimeError",
    }
    assert _payloads(h, E.CASE_BRANCH_FINISHED, "start") == [
        {
            "branch": 0,
            "task_id": "e1.start.case0",
            "ok": False,
            "error": "case[0].then.tool: db down",
        }
    ]
    # The step failed without running its own tool, and nothing handled it.
    assert [t.task_id for t in h.dispatched] == ["e1.start.case0"]
    assert h.steps()["start"] == {"status": "failed", "error": "case[0].then.tool: db down"}
    assert h.status == "fail"


def test_a_dead_lettered_branch_task_replayed_lets_the_step_go_on() -> None:
    attempts: list[int] = []

    def flaky(task: Task) -> Any:
        attempts.append(task.attempt)
        if len(attempts) <= 3:
            raise TaskFailure("db down", "RuntimeError")
        return task.args if task.kind == "noop" else {"n": 2}

    h = Harness.of(BRANCH_TOOL, handlers={"start": flaky})
    h.run()
    assert h.status == "fail"
    dead = next(t for t in h.dispatched if t.task_id == "e1.start.case0")

    h.replay(dead)
    h.run()

    assert h.status == "ok"
    assert h.steps()["start"] == {"status": "ok"}
    assert h.state.context == {"branch_out": {"n": 2}}
    assert h.state.steps["start"].case is not None
    assert h.state.steps["start"].case.failed == {}


def test_a_branch_task_whose_worker_is_lost_is_reclaimed_then_dead_lettered() -> None:
    h = Harness.of(BRANCH_TOOL)
    task_id = h.task("start").task_id
    for _ in range(3):
        h.input(E.LEASE_EXPIRED, {"task_id": task_id, "worker_id": "w1"})
    assert [(r.task_id, r.attempt) for r in h.requeued] == [(task_id, 2), (task_id, 3)]
    [dead] = _payloads(h, E.TASK_DEAD_LETTERED, "start")
    assert (dead["task_id"], dead["reason"], dead["kind"]) == (task_id, "lease_expired", "python")
    assert h.steps()["start"]["status"] == "failed"
    assert h.steps()["start"]["error"].startswith("case[0].then.tool: the worker's lease expired")


def test_a_branch_tool_can_call_a_workbook_task() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: true
              then:
                tool: {kind: workbook, name: ping, args: {who: b}}
        """,
        workbook="""
        - name: ping
          tool: {kind: noop, args: {who: a, what: ping}}
        """,
    )
    task = h.task("start")
    assert (task.kind, task.args) == ("noop", {"who": "b", "what": "ping"})


# --- set ---------------------------------------------------------------------------------------


def test_set_puts_values_in_the_context_for_the_step_and_the_steps_after() -> None:
    h = Harness.of(
        """
        - step: start
          bind: {base: 10}
          case:
            - when: true
              then: {set: {limit: "{{ base * 2 }}", label: "max {{ base * 2 }}"}}
          tool: {kind: noop, args: {limit: "{{ limit }}"}}
          spec: {eval_mode: on_entry}
          next: later
        - step: later
          tool: {kind: noop, args: {label: "{{ label }}"}}
        """
    )
    assert h.task("start").args == {"limit": 20}
    h.run()
    assert [t.args for t in h.dispatched] == [{"limit": 20}, {"label": "max 20"}]
    assert h.state.context == {"limit": 20, "label": "max 20"}


def test_a_set_value_that_cannot_be_rendered_fails_the_step_naming_the_key() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: true
              then: {set: {ok_value: 1, bad: "{{ nothing.here }}"}}
          tool: noop
          spec: {eval_mode: on_entry}
        """,
        check_names=False,
    )
    assert h.dispatched == []
    [evaluated] = _payloads(h, E.CASE_EVALUATED)
    message = "case[0].then.set.bad: undefined value: 'nothing' is undefined"
    assert evaluated["verdict"] == {"branch": 0, "action": "error", "error": message}
    [started] = _payloads(h, E.CASE_BRANCH_STARTED)
    assert "context" not in started  # nothing of the branch applies
    assert h.steps()["start"] == {"status": "failed", "error": message}
    assert h.state.context == {}


# --- result ------------------------------------------------------------------------------------


def test_result_without_a_tool_saves_the_steps_output_on_event() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          spec: {eval_mode: on_event, case_mode: inclusive}
          case:
            - when: "{{ this.total > 10 }}"
              then:
                result: {pick: "{{ this.total }}", as: big_total}
            - when: true
              then:
                result: {pick: "{{ this.total }}", collect: {into: totals, mode: list}}
        """
    )
    h.complete("start", this={"total": 12})
    assert h.state.context == {"big_total": 12, "totals": [12]}
    assert _payloads(h, E.CASE_BRANCH_STARTED)[0]["context"] == {"big_total": 12}
    assert h.status == "ok"


def test_a_branch_tools_result_collects_into_a_map() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: true
              then:
                tool: {kind: noop, args: {id: k1, v: 1}}
                result:
                  pick: "{{ this.v }}"
                  collect: {into: by_id, mode: map, key: "{{ this.id }}"}
        """
    )
    h.run()
    assert h.state.context == {"by_id": {"k1": 1}}


# --- sink --------------------------------------------------------------------------------------


def test_a_branch_tools_sinks_go_to_the_worker_with_its_task() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: true
              then:
                tool: {kind: noop, args: {rows: [1, 2]}}
                result:
                  pick: "{{ this.rows }}"
                  sink:
                    - file: {path: "/tmp/{{ execution_id }}.json"}
                sink:
                  - file: {path: /tmp/audit.jsonl, format: jsonl, id: audit, async: true}
        """
    )
    task = h.task("start")
    assert task.pick == "{{ this.rows }}"
    assert [(s["id"], s["kind"], s["spec"], s["async"]) for s in task.sinks] == [
        ("file_0", "file", {"path": "/tmp/e1.json"}, False),
        ("audit", "file", {"path": "/tmp/audit.jsonl", "format": "jsonl"}, True),
    ]


def test_a_sink_without_a_tool_writes_the_steps_output_through_a_noop_task() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          spec: {eval_mode: on_event}
          case:
            - when: "{{ this.status == 'ready' }}"
              then:
                result: {pick: "{{ this.rows }}"}
                sink:
                  - postgres: {table: ready_rows, mode: upsert, key: id}
        """
    )
    h.complete("start", this={"status": "ready", "rows": [{"id": 1}]})
    task = h.task("start")
    assert (task.task_id, task.kind, task.args) == ("e1.start.case0", "noop", {"out": [{"id": 1}]})
    assert [(s["kind"], s["spec"]["table"]) for s in task.sinks] == [("postgres", "ready_rows")]
    # What the worker's sinks write: the noop returns its args, the pick takes `out`.
    assert sink_output(task, task.args) == [{"id": 1}]
    h.complete("start", this=task.args)
    assert _payloads(h, E.CASE_BRANCH_FINISHED) == [
        {"branch": 0, "task_id": "e1.start.case0", "ok": True}
    ]
    assert h.status == "ok"


def test_a_failed_branch_sink_fails_the_step() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          spec: {eval_mode: on_event}
          case:
            - when: true
              then:
                sink: [{file: {path: /nowhere/x.json}}]
        """
    )
    h.complete("start", this={"x": 1})
    task = h.task("start")
    h.outcome(
        task.task_id,
        ok=False,
        error="sink 'file_0' (file) failed after 3 attempts: no such directory",
        error_type="SinkError",
        sinks=[{"id": "file_0", "kind": "file", "status": "failed"}],
    )
    [dead] = _payloads(h, E.TASK_DEAD_LETTERED)
    assert (dead["task_id"], dead["kind"], dead["sink_id"]) == ("e1.start.case0", "noop", "file_0")
    assert h.steps()["start"]["status"] == "failed"
    assert h.steps()["start"]["error"].startswith("case[0].then.sink: sink 'file_0'")


# --- retry -------------------------------------------------------------------------------------

RETRY = """
- step: call
  tool: {kind: python, code: "def main(context, args):\\n    return None\\n", retry: false}
  spec: {eval_mode: on_event}
  case:
    - when: "{{ this.status_code == 503 }}"
      then:
        retry: {max_attempts: 3, initial_delay: 2, backoff: linear, jitter: false}
    - when: "{{ this.status_code == 200 }}"
      then: {set: {answered_at: "{{ attempt }}"}}
"""


def test_retry_runs_the_steps_tool_again_with_the_actions_backoff() -> None:
    statuses = iter([503, 503, 200])
    h = Harness.of(RETRY, handlers={"call": lambda task: {"status_code": next(statuses)}})
    h.run()

    assert [(r.task_id, r.attempt, r.delay_s) for r in h.requeued] == [
        ("e1.call", 2, 2.0),
        ("e1.call", 3, 4.0),
    ]
    assert _payloads(h, E.RETRY_STARTED) == [
        {"task_id": "e1.call", "attempt": 2, "max_attempts": 3, "delay_ms": 2000, "reason": "case"},
        {"task_id": "e1.call", "attempt": 3, "max_attempts": 3, "delay_ms": 4000, "reason": "case"},
    ]
    assert [p["verdict"] for p in _payloads(h, E.CASE_EVALUATED)[:2]] == [
        {"branch": 0, "action": "retry"},
        {"branch": 0, "action": "retry"},
    ]
    assert h.state.context == {"answered_at": 3}
    assert h.steps()["call"] == {"status": "ok"}
    assert h.of_type(E.TASK_DEAD_LETTERED) == []


def test_retry_that_runs_out_of_attempts_fails_the_step_and_dead_letters_the_task() -> None:
    h = Harness.of(RETRY, handlers={"call": lambda task: {"status_code": 503}})
    h.run()

    message = "case[0].then.retry: still wanted after 3 attempts"
    [last] = [p for p in _payloads(h, E.CASE_EVALUATED) if p["round"] == 3]
    assert last["verdict"] == {"branch": 0, "action": "retry", "exhausted": True, "error": message}
    assert _payloads(h, E.RETRY_PROCESSED) == [
        {
            "task_id": "e1.call",
            "status": "exhausted",
            "reason": "case",
            "attempts": 3,
            "max_attempts": 3,
            "kind": "python",
            "error": message,
        }
    ]
    [dead] = _payloads(h, E.TASK_DEAD_LETTERED)
    assert (dead["reason"], dead["attempts"], dead["error"]) == ("exhausted", 3, message)
    assert h.steps()["call"] == {"status": "failed", "error": message}
    assert h.status == "fail"


def test_retry_of_a_failed_tool_names_its_error_when_it_runs_out() -> None:
    def down(task: Task) -> Any:
        raise TaskFailure("connection refused", "ConnectionError")

    h = Harness.of(
        RETRY.replace("this.status_code == 503", "not success"),
        handlers={"call": down},
    )
    h.run()
    assert h.steps()["call"]["error"] == (
        "case[0].then.retry: still wanted after 3 attempts (the tool failed: connection refused)"
    )
    # Attempts the case retried were not dead-lettered; only the last one is.
    assert [p["attempts"] for p in _payloads(h, E.TASK_DEAD_LETTERED)] == [3]


# --- fail --------------------------------------------------------------------------------------

FAIL = """
- step: start
  case:
    - when: "{{{{ workload.amount > 1000 }}}}"
      then: {{fail: "amount over the limit"{extra}}}
  tool: noop
  spec: {{eval_mode: on_entry}}
  next: done_step
- step: done_step
- step: handler
"""


def test_fail_fails_the_step_with_the_message_before_its_tool_runs() -> None:
    h = Harness.of(FAIL.format(extra=""), workload={"amount": 5000})
    assert h.dispatched == []
    assert h.steps()["start"] == {"status": "failed", "error": "amount over the limit"}
    [routed] = _payloads(h, E.NEXT_EVALUATED, "start")
    assert routed["unhandled_failure"] is True
    assert h.status == "fail"


def test_fail_with_next_routes_the_failure() -> None:
    h = Harness.of(FAIL.format(extra=", next: handler"), workload={"amount": 5000})
    assert h.step_status("start") == "failed"
    assert h.started_steps() == ["start", "handler"]
    assert h.status == "ok"


def test_fail_true_uses_a_default_message_and_no_match_runs_the_tool() -> None:
    no_message = FAIL.format(extra="").replace('"amount over the limit"', "true")
    h = Harness.of(no_message, workload={"amount": 5000})
    assert h.steps()["start"]["error"] == "case[0] failed the step"
    h = Harness.of(FAIL.format(extra=""), workload={"amount": 5})
    h.run()
    assert h.status == "ok"
    assert h.started_steps() == ["start", "done_step"]


# --- skip --------------------------------------------------------------------------------------

SKIP = """
- step: start
  case:
    - when: "{{{{ workload.dry_run }}}}"
      then: {{skip: true{extra}}}
  tool: noop
  spec: {{eval_mode: on_entry}}
  next: after
- step: after
- step: report
  when: "{{{{ done('start') }}}}"
"""


def test_skip_ends_the_step_as_skipped_without_its_tool_or_its_next() -> None:
    h = Harness.of(SKIP.format(extra=""), workload={"dry_run": True})
    assert h.dispatched == []
    assert _payloads(h, E.STEP_SKIPPED, "start") == [{"reason": "case", "branch": 0}]
    assert h.step_status("start") == "skipped"
    assert h.state.steps["start"].before_finish is None
    [routed] = _payloads(h, E.NEXT_EVALUATED, "start")
    assert routed["taken"] == []
    assert "unhandled_failure" not in routed
    assert h.status == "ok"
    assert h.step_status("after") == "skipped"


def test_skip_with_next_routes_and_skipped_counts_as_done() -> None:
    h = Harness.of(SKIP.format(extra=", next: report"), workload={"dry_run": True})
    assert h.started_steps() == ["start", "report"]
    assert h.status == "ok"


def test_skip_on_event_keeps_the_steps_output_out_of_the_context() -> None:
    h = Harness.of(
        """
        - step: start
          tool: noop
          result: {as: saved}
          spec: {eval_mode: on_event}
          case:
            - when: "{{ this.empty }}"
              then: {skip: true}
        """
    )
    h.complete("start", this={"empty": True})
    assert h.step_status("start") == "skipped"
    assert h.state.context == {}


@pytest.mark.parametrize("eval_mode", ["on_entry", "on_event"])
def test_a_retry_with_nothing_to_retry_fails_the_step(eval_mode: str) -> None:
    # The validator refuses this (E321); a playbook built without it fails at run time.
    text = playbook_text(
        f"""
        - step: start
          loop: {{collection: [1]}}
          tool: noop
          spec: {{eval_mode: {eval_mode}}}
          case:
            - when: true
              then: {{retry: true}}
        """
    )
    engine = Engine(build_graph(Playbook.model_validate(YAML(typ="safe").load(text))))
    h = Harness(engine=engine, state=engine.new_state("e1"))
    h.start()
    h.run()
    what = "on entry" if eval_mode == "on_entry" else "after a loop"
    assert h.steps()["start"]["error"] == (
        f"case[0].then.retry: there is no tool attempt to retry {what}"
    )
