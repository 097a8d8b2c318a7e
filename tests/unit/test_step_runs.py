"""The runs of a step, folded from real engine logs (the harness drives the engine)."""

from __future__ import annotations

from engine_harness import Harness

from noetl.core import StepStatus
from noetl.engine import StepRun
from noetl.runtime.step_runs import runs_of, settle, step_history

CYCLE = """
- step: start
  next: [fetch]
- step: fetch
  tool: {kind: noop}
  result: {collect: {into: pages}}
  next: [check]
- step: check
  next:
    mode: exclusive
    to:
      - {step: fetch, when: "{{ pages | length < 3 }}"}
      - {step: done}
- step: done
"""


def runs(h: Harness, step: str) -> list[tuple[int, str | None, str, int]]:
    attempts, found = step_history(h.events, step)
    settle(found, attempts, h.state.steps[step])
    return [(r.run, r.by, r.status.value, r.attempts) for r in found]


def test_each_pass_of_a_cycle_is_a_run_with_its_own_attempts() -> None:
    h = Harness.of(CYCLE)
    h.complete("fetch")
    assert runs(h, "fetch") == [(1, "start", "ok", 1), (2, "check", "running", 1)]
    assert (runs_of(h.state.steps["fetch"]), h.state.steps["fetch"].run) == (2, 2)
    h.fail("fetch", error="page 2 broke")  # a failed run ends the cycle and the execution
    attempts, found = step_history(h.events, "fetch")
    assert [(a.task_id, a.run, a.status.value) for a in attempts] == [
        ("e1.fetch", 1, "ok"),
        ("e1.fetch.run2", 2, "failed"),
    ]
    settle(found, attempts, h.state.steps["fetch"])
    second = found[1]
    assert (second.status, second.error) == (StepStatus.FAILED, "page 2 broke")
    assert second.started_at is not None and second.finished_at is not None
    assert found[0].finished_at is not None and found[0].finished_at <= second.called_at


def test_a_cycle_run_to_its_end_and_the_steps_beside_it() -> None:
    h = Harness.of(CYCLE)
    h.run()
    assert [r[:3] for r in runs(h, "fetch")] == [
        (1, "start", "ok"),
        (2, "check", "ok"),
        (3, "check", "ok"),
    ]
    assert [r[:3] for r in runs(h, "check")] == [
        (1, "fetch", "ok"),
        (2, "fetch", "ok"),
        (3, "fetch", "ok"),
    ]
    assert runs(h, "done") == [(1, "check", "ok", 0)]
    assert runs_of(h.state.steps["check"]) == 3


def test_a_step_never_called_has_no_runs() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          next: [{step: later, when: "{{ false }}"}, {step: never, when: "{{ false }}"}]
        - step: later
        - step: never
        """
    )
    assert runs_of(h.state.steps["never"]) == 0
    assert runs(h, "never") == []
    assert runs_of(StepRun()) == 0
    h.run()
    assert h.state.steps["never"].status is StepStatus.SKIPPED
    assert (runs_of(h.state.steps["never"]), runs(h, "never")) == (0, [])
    assert (runs_of(h.state.steps["start"]), runs(h, "start")) == (1, [(1, "execution", "ok", 1)])


def test_the_latest_run_takes_what_the_end_of_the_execution_made_of_it() -> None:
    h = Harness.of(CYCLE)
    h.complete("fetch")
    h.cancel()
    # No event of fetch says so: its run 2 is canceled by the end of the execution.
    assert runs(h, "fetch") == [(1, "start", "ok", 1), (2, "check", "canceled", 1)]
