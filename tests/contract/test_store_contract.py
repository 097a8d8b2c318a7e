"""The Store contract: every adapter runs this one suite through the `store` fixture.

A new adapter joins by adding a parameter to `store`; a behaviour that only one adapter
can have (several processes on one file) is tested below the shared suite.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Event, ExecutionStatus
from noetl.store import (
    Append,
    ConcurrencyError,
    ExecutionRecord,
    NotFoundError,
    SqliteStore,
    Store,
)


def make_record(execution_id: str = "e1", **changes: Any) -> ExecutionRecord:
    fields: dict[str, Any] = {
        "execution_id": execution_id,
        "playbook_name": "demo",
        "playbook_path": "playbooks/demo.yaml",
        "playbook_text": "name: demo\nsteps: []\n",
        "created_at": 100.0,
        "updated_at": 100.0,
    }
    fields.update(changes)
    return ExecutionRecord(**fields)


def make_events(execution_id: str, first: int, count: int) -> list[Event]:
    return [
        Event(
            seq=seq,
            type="step.finished",
            execution_id=execution_id,
            ts=1000.0 + seq,
            step=f"s{seq}",
            payload={"seq": seq},
        )
        for seq in range(first, first + count)
    ]


def snapshot(store: Store, execution_id: str) -> tuple[Any, ...]:
    return (
        store.get_execution(execution_id),
        store.load_events(execution_id),
        store.get_steps(execution_id),
    )


# -- executions ---------------------------------------------------------------------------


def test_create_and_get_round_trip(store: Store) -> None:
    record = make_record(
        "ex-ü",
        playbook_path=None,
        playbook_text="name: ünï\n# 日本語\n",
        context={"vars": {"a": [{"b": "c"}]}},
        parent_execution_id="parent-1",
        created_at=12.5,
        updated_at=13.25,
    )
    store.create_execution(record)

    assert store.get_execution("ex-ü") == record
    assert store.get_execution("missing") is None


def test_create_existing_id_raises_and_keeps_the_first(store: Store) -> None:
    first = make_record("e1")
    store.create_execution(first)

    with pytest.raises(ConcurrencyError, match="e1 already exists"):
        store.create_execution(make_record("e1", playbook_name="other"))

    assert store.get_execution("e1") == first


def test_create_rejects_a_record_that_claims_events(store: Store) -> None:
    with pytest.raises(ValueError, match="last_seq 0"):
        store.create_execution(make_record("e1", last_seq=3))

    assert store.get_execution("e1") is None


# -- appending and loading events ---------------------------------------------------------


def test_appended_events_load_back_in_order(store: Store) -> None:
    store.create_execution(make_record("e1"))
    rich = Event(
        seq=1,
        type="workflow.started",
        execution_id="e1",
        ts=1.5,
        step=None,
        payload={
            "workload": {"deep": {"deeper": [1, [2, [3]], {"k": None}]}},
            "text": "naïve café — 漢字 😀",
            "quote": 'a "b" \\ c\n',
            "float": 0.1,
            "big": 2**53,
            "flag": False,
        },
    )
    first = [rich, *make_events("e1", 2, 2)]
    second = make_events("e1", 4, 3)
    store.commit([Append("e1", 0, first, now=5.0)])
    store.commit([Append("e1", 3, second, now=6.0)])

    assert store.load_events("e1") == first + second
    record = store.get_execution("e1")
    assert record is not None
    assert (record.last_seq, record.updated_at) == (6, 6.0)


def test_an_execution_loads_with_its_events_in_one_read(store: Store) -> None:
    record = make_record("e1", parent_execution_id="p0", created_at=1764414000.123456)
    store.create_execution(record)
    events = [
        Event(1, "workflow.started", "e1", 1764414000.654321, None, {"workload": {"n": 1}}),
        Event(2, "step.started", "e1", 1764414001.000001, "s1", {"text": "nul\x00 \ufdd0 ü"}),
        *make_events("e1", 3, 2),
    ]
    store.commit([Append("e1", 0, events, now=7.25, context={"v": [1, None]})])

    loaded = store.load_execution("e1")

    assert loaded is not None
    assert loaded == (store.get_execution("e1"), store.load_events("e1"))
    assert loaded[1] == events
    assert (loaded[0].last_seq, loaded[0].context, loaded[0].parent_execution_id) == (
        4,
        {"v": [1, None]},
        "p0",
    )
    store.create_execution(make_record("e2"))
    assert store.load_execution("e2") == (store.get_execution("e2"), [])
    assert store.load_execution("nope") is None


def test_a_long_log_loads_whole(store: Store) -> None:
    """PostgreSQL reads a log of more than 1,000 events as rows, not as one JSON text."""
    store.create_execution(make_record("e1"))
    events = make_events("e1", 1, 1500)
    store.commit([Append("e1", 0, events[:1000], now=2.0)])
    store.commit([Append("e1", 1000, events[1000:], now=3.0)])

    loaded = store.load_execution("e1")

    assert loaded is not None
    assert loaded[1] == events
    assert loaded[0].last_seq == 1500


def test_payloads_follow_json_semantics_and_are_copies(store: Store) -> None:
    store.create_execution(make_record("e1"))
    payload: dict[str, Any] = {"pair": (1, 2), "inner": {"x": 1}}
    store.commit([Append("e1", 0, [Event(1, "t", "e1", 1.0, payload=payload)], now=1.0)])
    payload["inner"]["x"] = 2

    loaded = store.load_events("e1")[0]
    assert loaded.payload == {"pair": [1, 2], "inner": {"x": 1}}
    loaded.payload["inner"]["x"] = 3
    assert store.load_events("e1")[0].payload == {"pair": [1, 2], "inner": {"x": 1}}


def test_load_events_after_seq_and_limit(store: Store) -> None:
    store.create_execution(make_record("e1"))
    store.commit([Append("e1", 0, make_events("e1", 1, 10), now=1.0)])

    def seqs(**kwargs: Any) -> list[int]:
        return [event.seq for event in store.load_events("e1", **kwargs)]

    assert seqs() == list(range(1, 11))
    assert seqs(after_seq=3) == [4, 5, 6, 7, 8, 9, 10]
    assert seqs(limit=2) == [1, 2]
    assert seqs(after_seq=3, limit=2) == [4, 5]
    assert seqs(after_seq=9, limit=5) == [10]
    assert seqs(after_seq=10) == []
    assert seqs(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        store.load_events("e1", limit=-1)


def test_two_appends_to_one_execution_in_one_commit_chain(store: Store) -> None:
    store.create_execution(make_record("e1"))
    store.commit(
        [
            Append("e1", 0, make_events("e1", 1, 2), now=1.0),
            Append("e1", 2, make_events("e1", 3, 1), now=2.0),
        ]
    )

    assert [event.seq for event in store.load_events("e1")] == [1, 2, 3]


def test_empty_commit_is_a_no_op(store: Store) -> None:
    store.create_execution(make_record("e1"))
    before = snapshot(store, "e1")

    store.commit([])

    assert snapshot(store, "e1") == before


# -- optimistic concurrency: a rejected commit writes nothing -----------------------------


def test_stale_expected_seq_raises_and_writes_nothing(store: Store) -> None:
    store.create_execution(make_record("e1"))
    store.commit([Append("e1", 0, make_events("e1", 1, 2), steps={"a": {"s": 1}}, now=1.0)])
    before = snapshot(store, "e1")

    stale = Append(
        "e1",
        1,
        make_events("e1", 2, 1),
        status=ExecutionStatus.OK,
        steps={"a": {"s": 2}, "b": {"s": 1}},
        context={"x": 1},
        now=9.0,
    )
    with pytest.raises(ConcurrencyError, match="expected last seq 1"):
        store.commit([stale])

    assert snapshot(store, "e1") == before


def test_bad_second_append_rolls_back_the_first(store: Store) -> None:
    store.create_execution(make_record("e1"))
    store.create_execution(make_record("e2"))
    before = (snapshot(store, "e1"), snapshot(store, "e2"))
    good = Append(
        "e1",
        0,
        make_events("e1", 1, 3),
        status=ExecutionStatus.OK,
        steps={"a": {"status": "ok"}},
        context={"done": True},
        now=7.0,
    )
    stale = Append("e2", 5, make_events("e2", 6, 1), now=7.0)

    with pytest.raises(ConcurrencyError):
        store.commit([good, stale])

    assert (snapshot(store, "e1"), snapshot(store, "e2")) == before


def test_unknown_execution_in_a_commit_rolls_back_the_others(store: Store) -> None:
    store.create_execution(make_record("e1"))
    before = snapshot(store, "e1")

    with pytest.raises(NotFoundError, match="nope"):
        store.commit(
            [
                Append("e1", 0, make_events("e1", 1, 1), steps={"a": {}}, now=1.0),
                Append("nope", 0, make_events("nope", 1, 1), now=1.0),
            ]
        )

    assert snapshot(store, "e1") == before


@pytest.mark.parametrize(
    ("expected_seq", "seqs"),
    [
        (0, [1, 3]),  # gap
        (0, [2]),  # does not start right after expected_seq
        (2, [3, 3]),  # repeated
        (0, [2, 1]),  # out of order
    ],
)
def test_events_must_continue_expected_seq_without_gaps(
    store: Store, expected_seq: int, seqs: list[int]
) -> None:
    store.create_execution(make_record("e1"))
    if expected_seq:
        store.commit([Append("e1", 0, make_events("e1", 1, expected_seq), now=1.0)])
    before = snapshot(store, "e1")
    events = [Event(seq, "t", "e1", 1.0) for seq in seqs]

    with pytest.raises(ValueError, match="without gaps"):
        store.commit([Append("e1", expected_seq, events, now=2.0)])

    assert snapshot(store, "e1") == before


def test_events_of_another_execution_are_rejected(store: Store) -> None:
    store.create_execution(make_record("e1"))

    with pytest.raises(ValueError, match="belongs to execution e2"):
        store.commit([Append("e1", 0, make_events("e2", 1, 1), now=1.0)])

    assert store.load_events("e1") == []


# -- projections ---------------------------------------------------------------------------


def test_status_transitions_and_finished_at(store: Store) -> None:
    store.create_execution(make_record("e1"))

    def state() -> tuple[ExecutionStatus, float | None, float]:
        record = store.get_execution("e1")
        assert record is not None
        return record.status, record.finished_at, record.updated_at

    assert state() == (ExecutionStatus.RUNNING, None, 100.0)
    store.commit([Append("e1", 0, make_events("e1", 1, 1), now=101.0)])
    assert state() == (ExecutionStatus.RUNNING, None, 101.0)
    store.commit([Append("e1", 1, make_events("e1", 2, 1), status=ExecutionStatus.FAIL, now=102.0)])
    assert state() == (ExecutionStatus.FAIL, 102.0, 102.0)
    # no status given: status and finished_at stay
    store.commit([Append("e1", 2, make_events("e1", 3, 1), now=103.0)])
    assert state() == (ExecutionStatus.FAIL, 102.0, 103.0)
    # a running status clears finished_at
    store.commit([Append("e1", 3, [], status=ExecutionStatus.RUNNING, now=104.0)])
    assert state() == (ExecutionStatus.RUNNING, None, 104.0)
    store.commit([Append("e1", 3, [], status=ExecutionStatus.CANCELED, now=105.0)])
    assert state() == (ExecutionStatus.CANCELED, 105.0, 105.0)
    store.commit([Append("e1", 3, [], status=ExecutionStatus.OK, now=106.0)])
    assert state() == (ExecutionStatus.OK, 106.0, 106.0)


def test_unknown_status_is_rejected(store: Store) -> None:
    store.create_execution(make_record("e1"))

    with pytest.raises(ValueError, match="done"):
        store.commit([Append("e1", 0, [], status="done", now=1.0)])  # type: ignore[arg-type]

    record = store.get_execution("e1")
    assert record is not None
    assert record.status is ExecutionStatus.RUNNING


def test_context_is_replaced_only_when_given(store: Store) -> None:
    store.create_execution(make_record("e1", context={"a": 1}))

    store.commit([Append("e1", 0, make_events("e1", 1, 1), now=1.0)])
    record = store.get_execution("e1")
    assert record is not None
    assert record.context == {"a": 1}

    store.commit([Append("e1", 1, [], context={"b": {"c": ["ü"]}}, now=2.0)])
    record = store.get_execution("e1")
    assert record is not None
    assert record.context == {"b": {"c": ["ü"]}}


def test_steps_projection_upserts(store: Store) -> None:
    store.create_execution(make_record("e1"))
    store.create_execution(make_record("e2"))
    assert store.get_steps("e1") == {}

    store.commit(
        [
            Append(
                "e1",
                0,
                make_events("e1", 1, 1),
                steps={"a": {"status": "running"}, "b": {"status": "pending", "n": [1]}},
                now=1.0,
            ),
            Append("e2", 0, [], steps={"a": {"status": "ok"}}, now=1.0),
        ]
    )
    store.commit([Append("e1", 1, [], steps={"a": {"status": "ok", "this": {"x": "é"}}}, now=2.0)])

    assert store.get_steps("e1") == {
        "a": {"status": "ok", "this": {"x": "é"}},
        "b": {"status": "pending", "n": [1]},
    }
    assert store.get_steps("e2") == {"a": {"status": "ok"}}


# -- listing ------------------------------------------------------------------------------


def test_finished_among_names_the_finished_of_many_with_their_status(store: Store) -> None:
    ids = [f"e{n:04}" for n in range(2500)]  # over the thousand ids of one statement
    for execution_id in ids:
        store.create_execution(make_record(execution_id))
    ended = {"e0007": ExecutionStatus.CANCELED, "e1500": ExecutionStatus.OK}
    ended["e2499"] = ExecutionStatus.FAIL
    for execution_id, status in ended.items():
        store.commit([Append(execution_id, 0, [], status=status, now=50.0)])
    assert store.finished_among([*ids, "nobody"]) == ended
    assert store.finished_among(["e0001", "e0007"]) == {"e0007": ExecutionStatus.CANCELED}
    assert store.finished_among([]) == {}


def test_list_executions_newest_first_with_filter_and_paging(store: Store) -> None:
    created = {"a": 10.0, "b": 30.0, "c": 20.0, "d": 30.0, "e": 5.0}
    for execution_id, created_at in created.items():
        store.create_execution(make_record(execution_id, created_at=created_at))
    for execution_id, status in (("b", ExecutionStatus.OK), ("e", ExecutionStatus.OK)):
        store.commit([Append(execution_id, 0, [], status=status, now=50.0)])

    def ids(**kwargs: Any) -> list[str]:
        return [record.execution_id for record in store.list_executions(**kwargs)]

    # equal created_at: the one created later comes first
    assert ids() == ["d", "b", "c", "a", "e"]
    assert ids(limit=2) == ["d", "b"]
    assert ids(limit=2, offset=2) == ["c", "a"]
    assert ids(limit=2, offset=4) == ["e"]
    assert ids(offset=5) == []
    assert ids(limit=0) == []
    assert ids(status=ExecutionStatus.OK) == ["b", "e"]
    assert ids(status=ExecutionStatus.RUNNING, offset=1) == ["c", "a"]
    assert ids(status=ExecutionStatus.FAIL) == []
    assert store.list_executions(limit=1)[0] == store.get_execution("d")
    with pytest.raises(ValueError, match="offset"):
        store.list_executions(offset=-1)


# -- unknown executions -------------------------------------------------------------------


def test_unknown_execution(store: Store) -> None:
    assert store.get_execution("nope") is None
    with pytest.raises(NotFoundError, match="nope"):
        store.commit([Append("nope", 0, make_events("nope", 1, 1), now=1.0)])
    with pytest.raises(NotFoundError, match="nope"):
        store.load_events("nope")
    with pytest.raises(NotFoundError, match="nope"):
        store.get_steps("nope")
    assert store.list_executions() == []


# -- SQLite only: several connections on one file -----------------------------------------


def test_two_sqlite_stores_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    first, second = SqliteStore(path), SqliteStore(path)
    try:
        first.create_execution(make_record("e1"))
        first.commit([Append("e1", 0, make_events("e1", 1, 2), steps={"a": {}}, now=1.0)])
        assert second.load_events("e1") == make_events("e1", 1, 2)
        assert second.get_steps("e1") == {"a": {}}

        # both saw last_seq 2; the second writer loses
        second.commit([Append("e1", 2, make_events("e1", 3, 1), now=2.0)])
        with pytest.raises(ConcurrencyError, match="store has 3"):
            first.commit([Append("e1", 2, make_events("e1", 3, 1), steps={"b": {}}, now=3.0)])

        assert [event.seq for event in first.load_events("e1")] == [1, 2, 3]
        assert first.get_steps("e1") == {"a": {}}
        record = first.get_execution("e1")
        assert record is not None
        assert (record.last_seq, record.updated_at) == (3, 2.0)
    finally:
        first.close()
        second.close()


def test_racing_sqlite_writers_exactly_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    stores = [SqliteStore(path) for _ in range(4)]
    stores[0].create_execution(make_record("e1"))
    barrier = threading.Barrier(len(stores))
    outcomes: dict[int, str] = {}

    def write(index: int) -> None:
        events = [Event(1, "t", "e1", 1.0, payload={"writer": index})]
        barrier.wait()
        try:
            stores[index].commit([Append("e1", 0, events, now=1.0)])
            outcomes[index] = "ok"
        except ConcurrencyError:
            outcomes[index] = "stale"

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(stores))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        winners = [index for index, outcome in outcomes.items() if outcome == "ok"]
        assert sorted(outcomes.values()) == ["ok", "stale", "stale", "stale"]
        events = stores[0].load_events("e1")
        assert [(event.seq, event.payload) for event in events] == [(1, {"writer": winners[0]})]
    finally:
        for adapter in stores:
            adapter.close()
