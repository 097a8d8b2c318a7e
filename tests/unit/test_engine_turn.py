"""The engine's handler table: each input type has one handler, called with a `Turn`;
after the end only a replay is taken."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import Event, EventType
from noetl.engine import engine as engine_module
from noetl.engine.engine import AFTER_END, HANDLERS
from noetl.engine.turn import Turn

E = EventType
INPUTS = {
    E.TOOL_PROCESSED,
    E.LEASE_EXPIRED,
    E.CANCEL_REQUESTED,
    E.STEP_FORCE_COMPLETED,
    E.TIMER_FIRED,
    E.TASK_REPLAYED,
}


def test_every_input_type_has_a_handler_and_nothing_else_does() -> None:
    assert set(HANDLERS) == INPUTS
    assert set(AFTER_END) == {E.TASK_REPLAYED}


@pytest.mark.parametrize("event_type", sorted(INPUTS))
def test_after_the_end_only_a_replay_is_taken(event_type: EventType) -> None:
    h = Harness.of("- step: start\n  tool: {kind: noop}")
    h.complete("start")
    assert h.state.terminal
    decision = h.input(event_type, {"task_id": "e1.start", "step": "start"})
    if event_type in AFTER_END:
        # taken: a replay without a task is refused, on the record
        assert [e.type for e in decision.events] == [E.OPERATOR_REFUSED.value]
    else:
        assert decision.events == [] and decision.commands == []


def test_decide_calls_the_handler_of_the_input_type_with_the_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[Any, Event]] = []

    def handler(turn: Turn, event: Event) -> None:
        seen.append((turn, event))
        turn.emit(E.CANCEL_REQUESTED, None, {"by": "the test"})

    table = {**HANDLERS, E.TIMER_FIRED: handler}
    monkeypatch.setattr(engine_module, "HANDLERS", table)
    h = Harness.of("- step: start\n  tool: {kind: noop}")
    decision = h.input(E.TIMER_FIRED, {"kind": "x"})
    [(turn, event)] = seen
    assert event.payload == {"kind": "x"}
    assert turn.state is h.state and turn.engine is h.engine and turn.now == h.clock
    assert turn.events == decision.events
    assert [e.type for e in decision.events] == [E.CANCEL_REQUESTED.value]
