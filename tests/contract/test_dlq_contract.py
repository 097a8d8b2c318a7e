"""The Store contract of the dead-letter queue, timers and poison messages (every adapter)."""

from __future__ import annotations

from typing import Any

import pytest

from noetl.core import Event
from noetl.store.base import (
    Append,
    DeadLetter,
    DeadLetterStatus,
    Enqueue,
    InputKind,
    NotFoundError,
    Store,
    Timer,
)
from tests.contract.test_queue_contract import last_seq, make_task, start
from tests.helpers.clock import StoreClock


def entry(message_id: str = "e1.load", execution_id: str = "e1", **changes: Any) -> DeadLetter:
    fields: dict[str, Any] = {
        "message_id": message_id,
        "execution_id": execution_id,
        "step": "load",
        "loop_index": None,
        "loop_key": None,
        "tool_kind": "http",
        "sink_id": None,
        "attempts": 3,
        "reason": "exhausted",
        "error_type": "HttpError",
        "last_error": "HTTP 503 from http://127.0.0.1:1/x",
        "last_stack": None,
        "payload": {"kind": "http", "spec": {"url": "http://127.0.0.1:1/x"}, "args": {}},
        "context_excerpt": '{"workload":{"n":1}}',
        "task": {"task_id": message_id, "step": "load", "args": {"n": [1, "ü"]}},
        "first_seen": 1000.25,
        "last_seen": 1000.25,
    }
    fields.update(changes)
    return DeadLetter(**fields)


def note(store: Store, *entries: DeadLetter, execution_id: str = "e1", **extra: Any) -> None:
    """Commit one event that writes `entries` (and `extra` Append fields)."""
    seq = last_seq(store, execution_id) + 1
    event = Event(seq, "task.dead_lettered", execution_id, 2.0, "load", {})
    store.commit(
        [Append(execution_id, seq - 1, [event], dead_letters=list(entries), now=2.0, **extra)]
    )


def test_a_dead_letter_is_written_with_its_decision_and_read_back(store: Store) -> None:
    start(store)
    written = entry(loop_index=7, loop_key={"id": "u7"}, sink_id="pg_0", last_stack="  line 2")
    note(store, written)
    assert store.get_dead_letter("e1.load") == written
    assert store.get_dead_letter("nope") is None
    assert store.list_dead_letters() == [written]
    assert store.dead_letter_counts() == {"pending": 1, "replayed": 0, "discarded": 0}


def test_dead_letters_list_newest_first_with_filters_and_pages(store: Store) -> None:
    start(store)
    start(store, execution_id="e2")
    note(store, entry("e1.a", last_seen=10.0), entry("e1.b", last_seen=30.0))
    note(store, entry("e2.c", execution_id="e2", last_seen=20.0), execution_id="e2")
    assert [d.message_id for d in store.list_dead_letters()] == ["e1.b", "e2.c", "e1.a"]
    assert [d.message_id for d in store.list_dead_letters(limit=1, offset=1)] == ["e2.c"]
    assert [d.message_id for d in store.list_dead_letters(execution_id="e1")] == ["e1.b", "e1.a"]
    assert store.discard_dead_letter("e1.a", "bad input")
    discarded = store.list_dead_letters(status=DeadLetterStatus.DISCARDED)
    assert [(d.message_id, d.discard_reason) for d in discarded] == [("e1.a", "bad input")]
    pending = store.list_dead_letters(status=DeadLetterStatus.PENDING)
    assert [d.message_id for d in pending] == ["e1.b", "e2.c"]


def test_a_dead_letter_of_another_execution_is_refused(store: Store) -> None:
    start(store)
    with pytest.raises(ValueError, match="belongs to execution e2"):
        note(store, entry("e2.x", execution_id="e2"))
    assert store.list_dead_letters() == []


def test_replay_posts_one_input_and_twice_replays_once(store: Store) -> None:
    start(store)
    note(store, entry())
    payload = {"message_id": "e1.load", "task": {"task_id": "e1.load"}, "by": "ops"}
    assert store.post_replay("e1.load", payload) is True
    assert store.post_replay("e1.load", payload) is False
    inputs = store.claim_inputs("server", limit=10)
    assert [(i.kind, i.execution_id, i.payload) for i in inputs] == [
        (InputKind.REPLAY, "e1", payload)
    ]
    replayed = store.get_dead_letter("e1.load")
    assert replayed is not None
    assert (replayed.status, replayed.replays) == (DeadLetterStatus.REPLAYED, 1)
    with pytest.raises(NotFoundError):
        store.post_replay("missing", payload)


def test_a_task_that_fails_again_is_pending_again_with_its_first_sighting(store: Store) -> None:
    start(store)
    note(store, entry(first_seen=5.0, last_seen=5.0))
    assert store.post_replay("e1.load", {"message_id": "e1.load"})
    note(store, entry(first_seen=9.0, last_seen=9.0, attempts=1, last_error="still down"))
    again = store.get_dead_letter("e1.load")
    assert again is not None
    assert again.status is DeadLetterStatus.PENDING
    assert (again.first_seen, again.last_seen, again.replays) == (5.0, 9.0, 1)
    assert (again.attempts, again.last_error) == (1, "still down")


def test_discard_needs_a_pending_entry(store: Store) -> None:
    start(store)
    note(store, entry())
    assert store.discard_dead_letter("e1.load", "poison") is True
    assert store.discard_dead_letter("e1.load", "again") is False
    assert store.post_replay("e1.load", {}) is False
    found = store.get_dead_letter("e1.load")
    assert found is not None
    assert (found.status, found.discard_reason) == (DeadLetterStatus.DISCARDED, "poison")
    with pytest.raises(NotFoundError):
        store.discard_dead_letter("missing", "x")


def test_a_refused_replay_puts_the_entry_back_to_pending(store: Store) -> None:
    start(store)
    note(store, entry())
    assert store.post_replay("e1.load", {})
    seq = last_seq(store)
    refused = Event(seq + 1, "operator.refused", "e1", 3.0, "load", {})
    store.commit(
        [
            Append(
                "e1",
                seq,
                [refused],
                dead_letter_status={"e1.load": DeadLetterStatus.PENDING},
                now=3.0,
            )
        ]
    )
    found = store.get_dead_letter("e1.load")
    assert found is not None
    assert found.status is DeadLetterStatus.PENDING


def test_a_timer_input_is_held_until_it_is_due(store: Store, clock: StoreClock) -> None:
    start(store)
    seq = last_seq(store)
    event = Event(seq + 1, "loop.started", "e1", 3.0, "load", {})
    timers = [Timer(0.3, {"kind": "loop_timeout", "step": "load"}), Timer(60.0, {"late": 1})]
    store.commit([Append("e1", seq, [event], timers=timers, now=3.0)])
    assert store.claim_inputs("server", limit=10) == []
    clock.advance(0.4)
    (due,) = store.claim_inputs("server", limit=10)
    assert (due.kind, due.payload) == (InputKind.TIMER, {"kind": "loop_timeout", "step": "load"})


def test_a_task_that_cannot_be_decoded_is_reported_not_leased(store: Store) -> None:
    """A poison message must not fail every claim that meets it: the store reports it as a
    fatal outcome (UndecodableTask) for the orchestrator and leases the others."""
    good = make_task("good")
    bad = make_task("bad")
    start(store, Enqueue(good), Enqueue(bad))
    poison(store, "e1.bad")
    leases = store.claim("w1", limit=10)
    assert [lease.task.task_id for lease in leases] == ["e1.good"]
    (reported,) = store.claim_inputs("server", limit=10)
    assert reported.kind is InputKind.OUTCOME
    assert reported.payload["task_id"] == "e1.bad"
    assert reported.payload["ok"] is False
    assert reported.payload["error_type"] == "UndecodableTask"
    assert "could not be decoded" in reported.payload["error"]
    row = store.get_task("e1.bad")
    assert row is not None
    assert row["status"] == "done"


def poison(store: Store, task_id: str) -> None:
    """Break a queued task's payload the way only a bug or a bad migration could."""
    from noetl.store.memory import MemoryStore
    from noetl.store.postgres import PostgresStore
    from noetl.store.sqlite import SqliteStore

    if isinstance(store, MemoryStore):
        store._tasks[task_id]["payload"] = '{"task_id": "' + task_id + '"}'
    elif isinstance(store, SqliteStore):
        with store._use() as conn:
            conn.execute(
                "UPDATE task_queue SET payload = ? WHERE task_id = ?",
                ('{"task_id": "' + task_id + '"}', task_id),
            )
    else:
        assert isinstance(store, PostgresStore)
        with store._connection() as conn:
            conn.execute(
                "UPDATE task_queue SET payload = jsonb_build_object('task_id', %s::text) "
                "WHERE task_id = %s",
                (task_id, task_id),
            )


def test_pending_dead_letters_count_one_execution_by_step(store: Store) -> None:
    start(store)
    start(store, execution_id="e2")
    note(store, entry("e1.a.0"), entry("e1.a.1"), entry("e1.b", step="check"))
    note(store, entry("e2.a", execution_id="e2"), execution_id="e2")
    assert store.pending_dead_letters("e1") == {"load": 2, "check": 1}
    assert store.discard_dead_letter("e1.a.0", "bad input")
    assert store.post_replay("e1.b", {"message_id": "e1.b", "task": {}, "by": "test"})
    assert store.pending_dead_letters("e1") == {"load": 1}
    assert store.pending_dead_letters("e2") == {"load": 1}
    assert store.pending_dead_letters("nope") == {}
