"""SEMANTICS section 10 and the core contract: gapless events, state = fold(events), and the
same inputs always give the same events and commands (also under random completion orders).
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from engine_harness import Harness, playbook_text

from noetl.core import CancelTasks, EnqueueTask, Event, EventType, ExecutionStatus
from noetl.engine import fold

E = EventType

RICH = """
- step: start
  next: [a, b, lp]
- step: a
  tool: {kind: python, code: pass}
  result: {as: a_out}
  next:
    - {step: a_ok, when: "{{ ok('a') }}"}
    - {step: a_failed, when: "{{ fail('a') }}"}
- step: a_ok
  tool: {kind: noop}
- step: a_failed
- step: b
  tool: {kind: python, code: pass}
  result: {collect: {into: seen, mode: list}}
  next: join
- step: lp
  loop: {collection: [0, 1, 2, 3, 4], mode: parallel, max_concurrency: 2}
  tool: {kind: python, code: pass, args: {n: "{{ item }}"}}
  result: {collect: {into: seen, mode: list}, as: lp_out}
  next: join
- step: join
  when: "{{ done('lp') and done('b') }}"
  tool: {kind: noop, args: {seen: "{{ seen | default([]) }}"}}
  next:
    mode: exclusive
    to:
      - {step: big, when: "{{ (seen | default([])) | length > 4 }}"}
      - small
- step: big
- step: small
"""


def _random_run(seed: int) -> Harness:
    rng = random.Random(seed)

    def handler(task: object) -> object:
        if rng.random() < 0.25:
            raise RuntimeError(f"failed at {rng.randrange(100)}")
        return rng.randrange(100)

    h = Harness.of(
        RICH, handlers={"a": handler, "b": handler, "lp": handler}, policy="on_step_fail: continue"
    )
    while h.pending:
        assert h.state.steps["lp"].in_flight <= 2
        h.answer(h.pending[rng.randrange(len(h.pending))])
    return h


def _replay(h: Harness) -> tuple[list[Event], list[EnqueueTask | CancelTasks]]:
    """Feed the same inputs at the same times to a fresh engine."""
    state = h.engine.new_state(h.state.execution_id)
    decision = h.engine.start(state, h.workload, 0.0)
    events, commands = list(decision.events), list(decision.commands)
    for index, event in enumerate(h.inputs):
        decision = h.engine.decide(state, event, float(index + 1))
        events += decision.events
        commands += decision.commands
    assert state == h.state
    return events, commands


def test_seq_is_gapless_from_one_and_events_carry_time_and_execution() -> None:
    h = Harness.of(RICH, handlers={"a": lambda t: 1, "b": lambda t: 2, "lp": lambda t: 3})
    h.run()
    assert [e.seq for e in h.events] == list(range(1, len(h.events) + 1))
    assert h.state.seq == len(h.events)
    assert {e.execution_id for e in h.events} == {"e1"}
    assert h.events[0].type == E.WORKFLOW_STARTED
    assert h.events[0].payload == {"workload": {}}
    assert h.events[-1].type == E.WORKFLOW_FINISHED
    known = {t.value for t in EventType}
    assert {e.type for e in h.events} <= known
    # `ts` is the `now` of the decision that emitted the event: 0 for start, then 1, 2, ...
    assert {e.ts for e in h.events if e.seq <= 9} == {0.0}
    assert sorted({e.ts for e in h.events}) == [float(i) for i in range(len(h.inputs) + 1)]


def test_fold_of_the_json_log_gives_the_engine_state() -> None:
    h = Harness.of(RICH, handlers={"a": lambda t: 1, "b": lambda t: 2, "lp": lambda t: 3})
    h.run("lifo")
    text = json.dumps([e.to_dict() for e in h.events], sort_keys=True)
    events = [Event.from_dict(d) for d in json.loads(text)]
    folded = fold(h.engine.new_state("e1"), events)
    assert folded.status == h.state.status == ExecutionStatus.OK
    assert folded.step_summaries() == h.state.step_summaries()
    assert folded.context == h.state.context
    assert folded == h.state


def test_fold_rejects_a_gap_in_the_log() -> None:
    h = Harness.of("- step: start")
    events = list(h.events)
    del events[2]
    with pytest.raises(ValueError, match="does not follow"):
        fold(h.engine.new_state("e1"), events)


def test_events_round_trip_through_dicts() -> None:
    h = Harness.of(RICH, handlers={"a": lambda t: 1, "b": lambda t: 2, "lp": lambda t: 3})
    h.run()
    for event in h.events:
        assert Event.from_dict(json.loads(json.dumps(event.to_dict()))) == event


@pytest.mark.parametrize("seed", range(40))
def test_random_completion_orders_keep_every_rule(seed: int) -> None:
    h = _random_run(seed)
    # the execution always ends, with nothing left in flight
    assert h.status is ExecutionStatus.OK
    assert h.state.tasks == {}
    # a step runs at most once; a call to a running or finished step is ignored
    started = Counter(h.started_steps())
    assert all(count == 1 for count in started.values()), started
    replayed = h.engine.new_state("e1")
    for event in h.events:
        if event.type == E.STEP_CALLED:
            assert event.step is not None
            before = replayed.steps[event.step].status.value
            if before in ("running", "ok", "failed"):
                assert event.payload.get("ignored") == before
            else:
                assert "ignored" not in event.payload
        fold(replayed, [event])
    h.check_full_fold()
    # the join runs once, after both of its inputs, whatever the order
    if "join" in started:
        join_start = h.of_type(E.STEP_STARTED, "join")[0].seq
        assert h.finished("lp").seq < join_start
        assert h.finished("b").seq < join_start
    # exactly one branch of the exclusive routing, and only when join ran ok
    branches = {"big", "small"} & set(started)
    assert len(branches) == (1 if h.step_status("join") == "ok" else 0)
    # a's edges route both outcomes
    assert {"a_ok", "a_failed"} & set(started) == {
        "a_ok" if h.step_status("a") == "ok" else "a_failed"
    }
    # `as` on the loop lists the outputs in item order, whatever the completion order
    if h.step_status("lp") == "ok":
        outs = {e.payload["index"]: e.payload["out"] for e in h.of_type(E.LOOP_ITERATION_FINISHED)}
        assert h.state.context["lp_out"] == [outs[i] for i in range(5)]
    # the same inputs give the same events and commands
    events, commands = _replay(h)
    assert events == h.events
    assert commands == h.commands


def test_determinism_of_start_alone() -> None:
    text = playbook_text(RICH)
    first = Harness.from_text(text, handlers={})
    second = Harness.from_text(text, handlers={})
    assert first.start() == second.start()
