"""Contract: `Store.load_executions` reads many young executions as `load_execution` reads
one, and leaves out those it must not read (no such execution, a pruned history, a log
longer than asked); its bounds are checked before anything is read."""

from __future__ import annotations

import pytest

from noetl.core import Event
from noetl.store.base import Append, Store
from noetl.store.records import LOAD_MANY, LOAD_MANY_EVENTS
from tests.contract.test_queue_contract import last_seq, start
from tests.contract.test_retention_contract import CUTOFF, NEVER, finished_with_history


def grow(store: Store, execution_id: str, events: int) -> None:
    """Append `events` more events to the execution."""
    seq = last_seq(store, execution_id)
    more = [
        Event(seq + n, "step.done", execution_id, 2.0 + n, f"s{n}", {"n": n, "nul": "a\x00b"})
        for n in range(1, events + 1)
    ]
    store.commit([Append(execution_id, seq, more, now=3.0)])


def test_many_executions_load_as_each_loads_alone(store: Store) -> None:
    for execution_id, events in (("e1", 0), ("e2", 3), ("e3", 7)):
        start(store, execution_id=execution_id)
        grow(store, execution_id, events)

    loaded = store.load_executions(["e3", "e1", "e2", "e1"], max_events=64)

    assert sorted(loaded) == ["e1", "e2", "e3"]
    for execution_id, one in loaded.items():
        assert one == store.load_execution(execution_id)
    assert [event.seq for event in loaded["e3"][1]] == list(range(1, 9))
    assert loaded["e3"][1][-1].payload == {"n": 7, "nul": "a\x00b"}


def test_those_it_must_not_read_are_left_out(store: Store) -> None:
    start(store, execution_id="young")
    start(store, execution_id="long")
    grow(store, "long", 10)  # 11 events
    finished_with_history(store, "pruned")
    store.prune(CUTOFF, dead_letters_before=NEVER, batch=10)

    loaded = store.load_executions(["young", "long", "pruned", "nope"], max_events=10)

    assert list(loaded) == ["young"]
    assert list(store.load_executions(["long"], max_events=11)) == ["long"]
    assert store.load_executions([], max_events=10) == {}


@pytest.mark.parametrize(
    ("count", "max_events"), [(LOAD_MANY + 1, 10), (1, LOAD_MANY_EVENTS + 1), (1, -1)]
)
def test_its_bounds_are_checked(store: Store, count: int, max_events: int) -> None:
    with pytest.raises(ValueError, match=r"load_executions reads|max_events must be"):
        store.load_executions([f"e{n}" for n in range(count)], max_events=max_events)
