"""One append for a worker's chain of decisions (`noetl.decision.appends.chain_appends`):
their events in order, each step's last state, and the last decision's writes; it refuses
appends that do not continue one another, or an earlier one that does more than dispatch."""

from __future__ import annotations

import dataclasses

import pytest

from noetl.core import Event, EventType, ExecutionStatus, Task
from noetl.decision.appends import chain_appends, plain
from noetl.store.base import Append, Enqueue, Requeue, Timer


def task(step: str) -> Task:
    return Task(f"t-{step}", "e", step, "python", spec={}, args={}, context={}, key=step)


def event(seq: int, step: str) -> Event:
    return Event(seq, EventType.STEP_STARTED, "e", float(seq), step, {"n": seq})


def decision(before: int, step: str, *, n: int = 2, **fields: object) -> Append:
    """An append continuing `before`: `n` events of `step`, its state, and its task."""
    events = [event(before + i + 1, step) for i in range(n)]
    return Append(
        execution_id="e",
        expected_seq=before,
        events=events,
        steps={step: {"status": "running", "seq": before}},
        enqueue=[Enqueue(task(step))],
        now=float(before),
        **fields,  # type: ignore[arg-type]
    )


def test_a_chain_is_its_events_in_order_each_steps_last_state_and_the_last_writes() -> None:
    first = decision(4, "a")
    second = dataclasses.replace(decision(6, "b", n=3), steps={"a": {"status": "ok"}, "b": {}})
    last = decision(9, "c", status=ExecutionStatus.OK, context={"v": 1})

    merged = chain_appends([first, second, last])

    assert merged.expected_seq == 4
    assert [e.seq for e in merged.events] == list(range(5, 12))
    assert merged.steps == {"a": {"status": "ok"}, "b": {}, "c": {"status": "running", "seq": 9}}
    # The earlier tasks ran in the chain: only the last decision's are queued.
    assert [item.task.step for item in merged.enqueue] == ["c"]
    assert (merged.status, merged.context, merged.now) == (ExecutionStatus.OK, {"v": 1}, 9.0)


def test_only_the_last_decision_of_a_chain_may_do_more_than_dispatch() -> None:
    assert plain(decision(0, "a"))
    for fields in (
        {"status": ExecutionStatus.OK},
        {"context": {"v": 1}},
        {"requeue": [Requeue("t", 2)]},
        {"cancel_tasks": ["t"]},
        {"inputs_done": [3]},
        {"timers": [Timer(1.0, {})]},
    ):
        busy = decision(2, "a", **fields)
        assert not plain(busy), fields
        with pytest.raises(ValueError, match="only the last append"):
            chain_appends([busy, decision(4, "b")])
        assert chain_appends([decision(0, "z"), busy]).requeue == busy.requeue


def test_a_chain_must_continue_itself() -> None:
    with pytest.raises(ValueError, match="continue one another"):
        chain_appends([decision(0, "a"), decision(3, "b")])  # a gap after seq 2
    other = dataclasses.replace(decision(2, "b"), execution_id="f")
    with pytest.raises(ValueError, match="continue one another"):
        chain_appends([decision(0, "a"), other])
