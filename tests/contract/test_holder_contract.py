"""The Store contract of input holders and of inputs consumed once, on every adapter.

An orchestrator claims inbox inputs as a holder (`open_holder`). When the holder is gone,
`release_orphaned_inputs` frees what it held at once, instead of after the hold expires;
and a commit never records a second decision on an input another commit consumed.
How each adapter tells that a holder of ANOTHER process is gone (PostgreSQL: its session;
SQLite: its process) is tested in tests/integration/test_input_holders.py; here a holder
is made gone by closing it.
"""

from __future__ import annotations

import pytest

from noetl.core import Event
from noetl.store.base import Append, ConcurrencyError, InputKind, Store, Timer
from tests.contract.test_queue_contract import LONG_S, last_seq, make_record, start


def post(store: Store, count: int, execution_id: str = "e1") -> list[int]:
    return [store.post_input(execution_id, InputKind.CANCEL, {"n": n}) for n in range(count)]


def test_a_holder_token_is_new_for_every_holder_of_an_owner(store: Store) -> None:
    first = store.open_holder("host:1")
    second = store.open_holder("host:1")  # a restarted server with the same pid

    assert first.token != second.token
    assert first.token.startswith("host:1#") and second.token.startswith("host:1#")
    assert first.alive() and second.alive()
    first.close()
    assert not first.alive()
    assert second.alive()
    second.close()


def test_inputs_of_a_gone_holder_are_freed_at_once(store: Store) -> None:
    start(store)
    ids = post(store, 3)
    dead = store.open_holder("server-a")
    live = store.open_holder("server-b")
    assert [i.id for i in store.claim_inputs(dead.token, limit=2, lease_s=LONG_S)] == ids[:2]
    assert [i.id for i in store.claim_inputs(live.token, lease_s=LONG_S)] == ids[2:]

    assert store.release_orphaned_inputs() == 0  # both alive: their holds stand
    assert store.claim_inputs(live.token) == []
    dead.close()

    assert store.release_orphaned_inputs() == 2
    assert [i.id for i in store.claim_inputs(live.token, lease_s=LONG_S)] == ids[:2]
    assert store.release_orphaned_inputs() == 0  # the live holder's hold stands
    live.close()


def test_holds_of_plain_owners_and_timers_are_left_to_expire(store: Store) -> None:
    start(store)
    post(store, 1)
    store.commit([Append("e1", 1, [], timers=[Timer(LONG_S, {"kind": "t"})], now=2.0)])
    assert len(store.claim_inputs("host:1", lease_s=LONG_S)) == 1

    assert store.release_orphaned_inputs() == 0
    assert store.claim_inputs("host:2") == []


def test_a_decision_on_an_input_consumed_elsewhere_is_refused(store: Store) -> None:
    start(store)
    start(store, execution_id="e2")
    (input_id,) = post(store, 1)
    (other,) = post(store, 1, execution_id="e2")
    first = Append("e1", 1, [Event(2, "t", "e1", 1.0)], inputs_done=[input_id])
    store.commit([first])

    # The same input decided again on the new state (another orchestrator held it too):
    # refused, with the input named, and nothing of the commit written.
    again = Append("e1", 2, [Event(3, "t", "e1", 1.0)], inputs_done=[input_id])
    e2 = Append("e2", 1, [Event(2, "t", "e2", 1.0)], inputs_done=[other])
    with pytest.raises(ConcurrencyError, match="consumed by another commit") as caught:
        store.commit([e2, again])
    assert caught.value.execution_ids == ("e1",)
    assert caught.value.input_ids == (input_id,)
    assert (last_seq(store), last_seq(store, "e2")) == (2, 1)
    assert [i.id for i in store.claim_inputs("o1")] == [other]

    # Without events, naming a consumed input is harmless (a retried commit).
    store.commit([Append("e1", 2, [], inputs_done=[input_id])])
    # An input of another execution is not this execution's to consume.
    with pytest.raises(ConcurrencyError) as caught:
        store.commit([Append("e1", 2, [Event(3, "t", "e1", 1.0)], inputs_done=[other])])
    assert caught.value.input_ids == (other,)
    assert last_seq(store) == 2


def test_a_stale_append_and_a_consumed_input_are_named_together(store: Store) -> None:
    start(store)
    store.create_execution(make_record("e2"))
    (input_id,) = post(store, 1)
    store.commit([Append("e1", 1, [Event(2, "t", "e1", 1.0)], inputs_done=[input_id])])

    with pytest.raises(ConcurrencyError) as caught:
        store.commit(
            [
                Append("e2", 5, [Event(6, "t", "e2", 1.0)]),
                Append("e1", 2, [Event(3, "t", "e1", 1.0)], inputs_done=[input_id]),
            ]
        )
    assert set(caught.value.execution_ids) == {"e1", "e2"}
    assert caught.value.input_ids == (input_id,)
