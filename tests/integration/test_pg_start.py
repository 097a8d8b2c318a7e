"""New executions on PostgreSQL: plain starts (first appends at sequence 0, nothing to
check, no rarer writes) go in as ONE statement, `noetl_start` (migration 0016); the rest
the pipelined way. The function refuses an id that exists, or a version taken for the
latest of its playbook when a newer one is registered (0017), and writes nothing then."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from noetl.store import PostgresStore, _pg_commit, postgres
from noetl.store._rows import prepare_initial
from noetl.store.base import Append, Enqueue, NewExecution, Timer
from tests.contract.test_queue_contract import make_record, make_task, started


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_database)
    yield store
    store.close()


def new(execution_id: str, *steps: str, timers: list[Timer] | None = None) -> NewExecution:
    initial = Append(
        execution_id,
        0,
        started(execution_id),
        enqueue=[Enqueue(make_task(step, execution_id)) for step in steps],
        timers=timers or [],
        now=1.0,
    )
    return NewExecution(make_record(execution_id), initial)


def test_plain_starts_are_one_call_of_the_start_function(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counted(conn: Any, rows: Any, prepared: Any, *, wake: bool) -> None:
        calls.append(len(rows))
        _pg_commit.start(conn, rows, prepared, wake=wake)

    monkeypatch.setattr(postgres, "start", counted)

    assert pg_store.create_executions([new("e1", "a"), new("e2", "a", "b"), new("e3")]) == [
        None,
        None,
        None,
    ]
    assert pg_store.create_executions([new("e4", "a")]) == [None]
    # A first append with a timer is not plain: the pipelined way writes it.
    timed = new("e5", "a", timers=[Timer(3600.0, {"step": "later"})])
    assert pg_store.create_executions([timed]) == [None]

    assert calls == [3, 1]
    claimed = sorted(lease.task.task_id for lease in pg_store.claim("w1", limit=10))
    assert claimed == ["e1.a", "e2.a", "e2.b", "e4.a", "e5.a"]


def test_the_start_function_refuses_an_id_that_exists_and_writes_nothing(
    pg_store: PostgresStore, pg_database: str
) -> None:
    assert pg_store.create_executions([new("e1", "a")]) == [None]
    items = [new("e2", "a"), new("e1", "z")]
    rows = [_pg_commit.execution_row(_pg_commit.new_row(i.record, None)) for i in items]
    prepared = [p for i in items if (p := prepare_initial(i.record, i.initial))]

    with psycopg.connect(pg_database, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            _pg_commit.start(conn, rows, prepared, wake=False)
        assert refused.value.sqlstate == _pg_commit.EXISTS
        assert conn.execute("SELECT execution_id FROM execution ORDER BY 1").fetchall() == [("e1",)]
        assert conn.execute("SELECT count(*) FROM execution_input").fetchone() == (1,)
        assert conn.execute("SELECT task_id FROM task_queue ORDER BY 1").fetchall() == [("e1.a",)]


def test_the_start_function_refuses_a_version_that_is_not_the_latest(
    pg_store: PostgresStore, pg_database: str
) -> None:
    for version in (1, 2):
        pg_store.register_playbook("playbooks/demo.yaml", "demo", f"name: demo\n# {version}\n", 1.0)
    items = [new("e1", "a"), new("e2", "a")]

    def call(latest: list[int | None]) -> None:
        rows = [
            _pg_commit.execution_row(_pg_commit.new_row(i.record, None, v))
            for i, v in zip(items, latest, strict=True)
        ]
        prepared = [p for i in items if (p := prepare_initial(i.record, i.initial))]
        _pg_commit.start(conn, rows, prepared, wake=False)

    with psycopg.connect(pg_database, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            call([2, 1])
        assert refused.value.sqlstate == _pg_commit.NEWER
        assert conn.execute("SELECT count(*) FROM execution").fetchone() == (0,)
        call([2, None])  # None: a start that read the catalog itself checks nothing
        assert conn.execute("SELECT count(*) FROM execution").fetchone() == (2,)


def test_the_start_function_of_0016_stays_for_servers_of_that_version(
    pg_store: PostgresStore, pg_database: str
) -> None:
    """A server of schema version 16 calls `noetl_start` with a lease time and rows of 11
    elements during a rolling upgrade: that function is still there, and checks nothing."""
    item = new("e1", "a")
    row = _pg_commit.execution_row(_pg_commit.new_row(item.record, None))
    old_row = row[: row.rindex(",")] + "]"  # without the 12th element (`latest`)
    prepared = [p for p in [prepare_initial(item.record, item.initial)] if p]

    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(
            "SELECT * FROM noetl_start(%s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb,"
            " %s::float8, %s::boolean)",
            ["[" + old_row + "]", *_pg_commit.writes(prepared), 30.0, False],
        )
        assert conn.execute("SELECT count(*) FROM execution").fetchone() == (1,)
    assert [lease.task.task_id for lease in pg_store.claim("w1", limit=10)] == ["e1.a"]
