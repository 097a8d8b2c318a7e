"""Seed 004 section 5: case modes and branch ordering (`test_case_evaluator`), exclusive mode
fires only the first match, inclusive mode fires every match and the first `next` ends the
step, and no branch acts twice (no duplicate callbacks)."""

from __future__ import annotations

from typing import Any

from engine_harness import Harness

from noetl.core import EventType, Task

E = EventType

THREE_TRUE = """
- step: start
  spec: {{case_mode: {mode}}}
  case:
    - when: "{{{{ workload.n > 0 }}}}"
      then: {{set: {{a: 1}}}}
    - when: "{{{{ workload.n > 1 }}}}"
      then: {{set: {{b: "{{{{ a | default(0) + 1 }}}}"}}}}
    - when: "{{{{ workload.n > 2 }}}}"
      then: {{set: {{c: 3}}}}
"""


def _evaluated(h: Harness, step: str = "start") -> list[dict[str, Any]]:
    return [e.payload for e in h.of_type(E.CASE_EVALUATED, step)]


def _acted(h: Harness, step: str = "start") -> list[int]:
    return [e.payload["branch"] for e in h.of_type(E.CASE_BRANCH_STARTED, step)]


# --- exclusive ---------------------------------------------------------------------------------


def test_exclusive_mode_fires_only_the_first_match() -> None:
    h = Harness.of(THREE_TRUE.format(mode="exclusive"), workload={"n": 5})

    assert h.status == "ok"
    [evaluated] = _evaluated(h)
    assert evaluated["matched"] == [0]
    assert evaluated["fired"] == [0]
    assert _acted(h) == [0]
    assert h.state.context == {"a": 1}


def test_exclusive_mode_is_the_default_and_passes_over_branches_that_do_not_match() -> None:
    default = THREE_TRUE.format(mode="exclusive").replace("  spec: {case_mode: exclusive}\n", "")
    assert "spec" not in default
    h = Harness.of(default, workload={"n": 0})
    assert _evaluated(h)[0]["matched"] == []
    assert h.state.context == {}

    h = Harness.of(
        """
        - step: start
          case:
            - when: "{{ workload.n > 10 }}"
              then: {set: {big: true}}
            - when: "{{ workload.n > 1 }}"
              then: {set: {medium: true}}
            - when: true
              then: {set: {any: true}}
        """,
        workload={"n": 5},
    )
    assert _evaluated(h)[0]["mode"] == "exclusive"
    assert _evaluated(h)[0]["fired"] == [1]
    assert h.state.context == {"medium": True}


# --- inclusive ---------------------------------------------------------------------------------


def test_inclusive_mode_fires_all_matches_in_order() -> None:
    h = Harness.of(THREE_TRUE.format(mode="inclusive"), workload={"n": 5})

    [evaluated] = _evaluated(h)
    assert evaluated["matched"] == [0, 1, 2]
    assert evaluated["fired"] == [0, 1, 2]
    assert _acted(h) == [0, 1, 2]
    # Branch 1 saw what branch 0 had set: branches act in order.
    assert h.state.context == {"a": 1, "b": 2, "c": 3}


def test_inclusive_mode_fires_only_the_matches() -> None:
    h = Harness.of(THREE_TRUE.format(mode="inclusive"), workload={"n": 2})
    assert _evaluated(h)[0]["fired"] == [0, 1]
    assert h.state.context == {"a": 1, "b": 2}


def test_inclusive_mode_the_first_next_ends_the_step() -> None:
    h = Harness.of(
        """
        - step: start
          spec: {case_mode: inclusive}   # next_policy end_step is the default
          case:
            - when: true
              then: {set: {first: 1}}
            - when: true
              then: {set: {second: 2}, next: left}
            - when: true
              then: {set: {third: 3}, next: right}
          next: own
        - step: left
        - step: right
        - step: own
        """
    )

    [evaluated] = _evaluated(h)
    assert (evaluated["matched"], evaluated["fired"], evaluated["suppressed"]) == (
        [0, 1, 2],
        [0, 1],
        [2],
    )
    assert _acted(h) == [0, 1]  # the suppressed branch did not act at all
    assert h.state.context == {"first": 1, "second": 2}
    [routed] = h.of_type(E.NEXT_EVALUATED, "start")
    assert routed.payload["taken"] == ["left"]
    assert routed.payload["winner_branch"] == 1
    assert routed.payload["suppressed_branches"] == [2]
    assert "edges" not in routed.payload  # the step's own next was not evaluated
    assert h.started_steps() == ["start", "left"]
    assert (h.step_status("right"), h.step_status("own")) == ("skipped", "skipped")


# --- order -------------------------------------------------------------------------------------

PRIORITIES = """
- step: start
  spec: {{case_mode: {mode}, branch_order: priority}}
  case:
    - when: true
      then: {{set: {{trail: "{{{{ (trail | default([])) + ['none'] }}}}"}}}}
    - when: true
      priority: 3
      then: {{set: {{trail: "{{{{ (trail | default([])) + ['p3'] }}}}"}}}}
    - when: true
      priority: 1
      then: {{set: {{trail: "{{{{ (trail | default([])) + ['p1'] }}}}"}}}}
    - when: true
      priority: 2
      then: {{set: {{trail: "{{{{ (trail | default([])) + ['p2'] }}}}"}}}}
    - when: true
      priority: 1
      then: {{set: {{trail: "{{{{ (trail | default([])) + ['p1_again'] }}}}"}}}}
"""


def test_branch_order_by_priority_lowest_first_then_branches_without_one() -> None:
    h = Harness.of(PRIORITIES.format(mode="inclusive"))

    [evaluated] = _evaluated(h)
    assert evaluated["order"] == [2, 4, 3, 1, 0]
    assert evaluated["fired"] == [2, 4, 3, 1, 0]
    assert h.state.context["trail"] == ["p1", "p1_again", "p2", "p3", "none"]


def test_exclusive_mode_with_priority_fires_the_highest_priority_match() -> None:
    h = Harness.of(PRIORITIES.format(mode="exclusive"))
    assert _evaluated(h)[0]["fired"] == [2]
    assert h.state.context == {"trail": ["p1"]}


def test_source_order_ignores_priority() -> None:
    h = Harness.of(PRIORITIES.format(mode="exclusive").replace("branch_order: priority", ""))
    assert _evaluated(h)[0]["order"] == [0, 1, 2, 3, 4]
    assert h.state.context == {"trail": ["none"]}


# --- conditions --------------------------------------------------------------------------------


def test_a_condition_that_cannot_be_evaluated_does_not_match_and_is_recorded() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: "{{ missing.name == 'x' }}"
              then: {set: {first: true}}
            - when: true
              then: {set: {second: true}}
        """,
        check_names=False,
    )
    [evaluated] = _evaluated(h)
    assert evaluated["errors"] == [
        {"branch": 0, "error": "case[0].when: undefined value: 'missing' is undefined"}
    ]
    assert evaluated["fired"] == [1]
    assert h.status == "ok"


def test_no_match_leaves_routing_to_the_steps_own_next() -> None:
    h = Harness.of(
        """
        - step: start
          case:
            - when: "{{ workload.go }}"
              then: {next: elsewhere}
          next: usual
        - step: usual
        - step: elsewhere
        """,
        workload={"go": False},
    )
    [routed] = h.of_type(E.NEXT_EVALUATED, "start")
    assert routed.payload["taken"] == ["usual"]
    assert routed.payload["winner_branch"] is None
    assert h.started_steps() == ["start", "usual"]


# --- no duplicate callbacks --------------------------------------------------------------------

ON_EVENT = """
- step: start
  tool: {kind: python, code: "def main(context, args):\\n    return None\\n"}
  spec: {eval_mode: on_event, case_mode: inclusive}
  case:
    - when: true
      then:
        set: {seen: "{{ (seen | default(0)) + 1 }}"}
        tool: {kind: noop, args: {note: once}}
    - when: "{{ this.status_code == 503 }}"
      then:
        retry: {max_attempts: 5, initial_delay: 0, jitter: false}
    - when: "{{ this.status_code == 200 }}"
      then: {set: {done_at: "{{ attempt }}"}}
"""


def test_a_duplicate_outcome_fires_no_branch_twice() -> None:
    h = Harness.of(ON_EVENT)
    task = h.task("start")
    h.outcome(task.task_id, ok=True, this={"status_code": 200})
    before = list(h.events)

    h.outcome(task.task_id, ok=True, this={"status_code": 200})  # delivered again

    assert h.events == before
    assert _acted(h) == [0, 2]
    branch_task = h.task("start").task_id  # branch 0's tool, still pending
    h.outcome(branch_task, ok=True, this={"note": "once"})
    h.outcome(branch_task, ok=True, this={"note": "once"})  # again: discarded
    assert len(h.of_type(E.CASE_BRANCH_FINISHED)) == 1
    assert len(h.of_type(E.STEP_FINISHED, "start")) == 1
    assert h.state.context == {"seen": 1, "done_at": 1}
    assert h.status == "ok"


def test_branches_that_acted_do_not_act_again_when_a_retry_reevaluates_the_case() -> None:
    statuses = iter([503, 503, 200])

    def answer(task: Task) -> Any:
        return task.args if task.kind == "noop" else {"status_code": next(statuses)}

    h = Harness.of(ON_EVENT, handlers={"start": answer})
    h.run()

    rounds = _evaluated(h)
    assert [(r["round"], r["matched"], r["fired"]) for r in rounds] == [
        (1, [0, 1], [0, 1]),
        (2, [1], [1]),
        (3, [2], [2]),
    ]
    assert [r.get("already_fired") for r in rounds] == [None, [0], [0]]
    assert _acted(h) == [0, 1, 1, 2]
    branch_tasks = [t for t in h.dispatched if t.task_id.endswith(".case0")]
    assert [t.task_id for t in branch_tasks] == ["e1.start.case0"]  # its tool ran once
    assert h.state.context == {"seen": 1, "done_at": 3}
    assert h.status == "ok"


def test_every_branch_acts_at_most_once_under_any_completion_order() -> None:
    def answer(task: Task) -> Any:
        return task.args if task.kind == "noop" else {"status_code": 200}

    for order in ("fifo", "lifo"):
        h = Harness.of(ON_EVENT, handlers={"start": answer})
        h.run(order)  # type: ignore[arg-type]
        acted = _acted(h)
        assert sorted(acted) == sorted(set(acted)) == [0, 2]
        h.check_full_fold()
