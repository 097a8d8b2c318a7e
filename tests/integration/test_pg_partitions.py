"""PostgreSQL's `event_log` and `step_state`, partitioned by range of execution id
(migration 0018): where rows go, the partitions a pass makes ahead and the ones it drops,
and an upgrade that keeps every row. On a real server."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import psycopg
import pytest

from noetl.core import Event, ExecutionStatus, HistoryPrunedError
from noetl.store.base import Append, Enqueue
from noetl.store.migrate import discover, migrate_postgres
from noetl.store.postgres import PostgresStore
from noetl.store.records import PartitionReport
from tests.contract.test_queue_contract import last_seq, make_task, start
from tests.helpers.cli import noetl

DAY_MS = 86_400_000
TABLES = ("event_log", "step_state")


def id_at(ms: int, low: int = 1) -> str:
    """An execution id of the millisecond `ms`, as `new_execution_id` makes them."""
    return f"{ms:013d}{low:06d}"


def now_ms() -> int:
    return int(time.time() * 1000)


def rows_by_partition(url: str, execution_id: str) -> dict[str, set[str]]:
    """Per table, the partitions holding `execution_id`'s rows."""
    found: dict[str, set[str]] = {}
    with psycopg.connect(url) as conn:
        for table in TABLES:
            rows = conn.execute(
                f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE execution_id = %s",
                (execution_id,),
            ).fetchall()
            found[table] = {row[0] for row in rows}
    return found


def partitions(url: str, table: str) -> dict[str, tuple[str | None, str | None]]:
    """The range partitions of `table`: name -> (lower bound, upper bound)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT name, lo, hi FROM noetl_partitions(%s::regclass)", (table,))
        return {name: (lo, hi) for name, lo, hi in rows.fetchall()}


def started_with_a_step(store: PostgresStore, execution_id: str) -> None:
    """An execution with its first events and one step state."""
    start(store, Enqueue(make_task("a", execution_id=execution_id)), execution_id=execution_id)
    seq = last_seq(store, execution_id)
    event = Event(seq + 1, "step.done", execution_id, 2.0, "a", {})
    store.commit([Append(execution_id, seq, [event], steps={"a": {"status": "ok"}}, now=2.0)])


def finish(store: PostgresStore, execution_id: str) -> None:
    seq = last_seq(store, execution_id)
    event = Event(seq + 1, "workflow.finished", execution_id, 3.0, payload={})
    store.commit([Append(execution_id, seq, [event], status=ExecutionStatus.OK, now=1000.0)])


@pytest.fixture
def store(pg_database: str) -> Any:
    opened = PostgresStore(pg_database)
    yield opened
    opened.close()


def test_both_tables_are_partitioned_and_a_new_execution_writes_to_its_own_time(
    store: PostgresStore, pg_database: str
) -> None:
    with psycopg.connect(pg_database) as conn:
        kinds = conn.execute(
            "SELECT c.relname, p.partstrat FROM pg_partitioned_table p "
            "JOIN pg_class c ON c.oid = p.partrelid ORDER BY 1"
        ).fetchall()
    assert kinds == [("event_log", "r"), ("step_state", "r")]
    store.rotate_partitions(period_days=7, ahead_days=14)  # the template may be days old
    fresh, given = id_at(now_ms()), "my-own-id"

    started_with_a_step(store, fresh)
    started_with_a_step(store, given)

    for table in TABLES:
        (current,) = rows_by_partition(pg_database, fresh)[table]
        lo, hi = partitions(pg_database, table)[current]
        assert current.startswith(f"{table}_p") and lo is not None and hi is not None
        assert lo <= fresh < hi
        # an id that is no time goes to the default partition, and is kept like any other
        assert rows_by_partition(pg_database, given)[table] == {f"{table}_default"}
    assert store.get_steps(fresh) == {"a": {"status": "ok"}}
    assert [e.type for e in store.load_events(given)][-1] == "step.done"


def test_a_pass_makes_partitions_ahead_once_and_moves_in_the_rows_the_default_took(
    store: PostgresStore, pg_database: str
) -> None:
    ahead = id_at(now_ms() + 40 * DAY_MS, 7)  # past the partitions made so far
    started_with_a_step(store, ahead)
    events = len(store.load_events(ahead))
    assert rows_by_partition(pg_database, ahead)["event_log"] == {"event_log_default"}

    report = store.rotate_partitions(period_days=1, ahead_days=45)

    assert report.made
    for table in TABLES:
        (home,) = rows_by_partition(pg_database, ahead)[table]
        lo, hi = partitions(pg_database, table)[home]
        assert lo is not None and hi is not None and lo <= ahead < hi
        # a day each from the newest bound on: contiguous, never overlapping
        bounds = sorted((lo or "", hi or "") for lo, hi in partitions(pg_database, table).values())
        assert all(b[1] == c[0] for b, c in itertools.pairwise(bounds))
    assert len(store.load_events(ahead)) == events  # moved, not lost
    assert store.get_steps(ahead) == {"a": {"status": "ok"}}
    assert store.rotate_partitions(period_days=1, ahead_days=45).made == ()


def test_passes_at_once_make_each_partition_once(pg_database: str) -> None:
    stores = [PostgresStore(pg_database) for _ in range(4)]
    reports: list[PartitionReport] = []
    errors: list[BaseException] = []

    def one(s: PostgresStore) -> None:
        try:
            reports.append(s.rotate_partitions(period_days=1, ahead_days=60))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for s in stores:
        s.close()
    assert errors == []
    made = [name for report in reports for name in report.made]
    assert made and len(made) == len(set(made))


def test_a_partition_is_dropped_only_when_all_its_executions_are_pruned(
    store: PostgresStore, pg_database: str
) -> None:
    before = {table: f"{table}_before" for table in TABLES}
    _, bound = partitions(pg_database, "event_log")["event_log_before"]
    assert bound is not None
    old_ms = int(bound[:13]) - 40 * DAY_MS
    done, running = id_at(old_ms, 1), id_at(old_ms, 2)
    for execution_id in (done, running):
        started_with_a_step(store, execution_id)
        assert rows_by_partition(pg_database, execution_id)["event_log"] == {before["event_log"]}
    finish(store, done)
    assert store.prune(2000.0, dead_letters_before=0.0).executions == 1

    kept = store.rotate_partitions(period_days=7, ahead_days=14)

    assert not set(before.values()) & set(kept.dropped)  # `running` still lives there
    assert store.get_steps(running) == {"a": {"status": "ok"}}
    with pytest.raises(HistoryPrunedError):
        store.load_events(done)

    finish(store, running)
    store.prune(2000.0, dead_letters_before=0.0)
    dropped = store.rotate_partitions(period_days=7, ahead_days=14).dropped

    assert set(before.values()) <= set(dropped)
    for table in TABLES:
        assert f"{table}_before" not in partitions(pg_database, table)
    record = store.get_execution(running)  # the tombstones stay
    assert record is not None and record.pruned_at is not None
    with pytest.raises(HistoryPrunedError):
        store.get_steps(running)


def test_a_pass_refuses_a_period_under_a_day(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="period_days"):
        store.rotate_partitions(period_days=0, ahead_days=7)


def test_upgrading_a_database_keeps_every_row_and_the_order_of_steps(
    pg_empty_database: str,
) -> None:
    older = [m for m in discover("postgres") if m.version < 18]
    now = now_ms()
    ids = [id_at(now - DAY_MS), id_at(now - 1000, 2), id_at(now + 10 * DAY_MS, 3), "e1"]
    with psycopg.connect(pg_empty_database, autocommit=True) as conn:
        migrate_postgres(conn, older)
        for n, execution_id in enumerate(ids):
            conn.execute(
                "INSERT INTO execution (execution_id, playbook_name, created_at, updated_at) "
                "VALUES (%s, 'demo', now(), now())",
                (execution_id,),
            )
            for seq in (1, 2, 3):
                conn.execute(
                    "INSERT INTO event_log (execution_id, seq, type, ts, payload) "
                    "VALUES (%s, %s, 'e', now(), %s)",
                    (execution_id, seq, f'{{"n": {n}}}'),
                )
            for step in ("a", "b"):
                conn.execute(
                    "INSERT INTO step_state (execution_id, step, status, updated_at) "
                    "VALUES (%s, %s, '{}', now())",
                    (execution_id, step),
                )
        snapshot = {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall()) for table in TABLES
        }

        assert migrate_postgres(conn) == [18]

        for table in TABLES:
            assert sorted(conn.execute(f"SELECT * FROM {table}").fetchall()) == snapshot[table]
        where: dict[str, str] = dict(
            conn.execute(
                "SELECT execution_id, min(tableoid::regclass::text) FROM event_log GROUP BY 1"
            ).fetchall()
        )
        assert where[ids[0]] == where[ids[1]] == "event_log_before"
        assert where[ids[2]].startswith("event_log_p")  # a future id: moved to its own time
        assert where["e1"] == "event_log_default"
        # a new step comes after every old one
        conn.execute(
            "INSERT INTO step_state (execution_id, step, status, updated_at) "
            "VALUES (%s, 'c', '{}', now())",
            (ids[0],),
        )
        order = conn.execute(
            "SELECT step FROM step_state WHERE execution_id = %s ORDER BY created_order",
            (ids[0],),
        ).fetchall()
        assert [row[0] for row in order] == ["a", "b", "c"]
        # deleting an execution still takes its rows, in every partition
        conn.execute("DELETE FROM execution WHERE execution_id = ANY(%s)", (ids,))
        for table in TABLES:
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)


def test_noetl_db_partitions_makes_them_once_and_says_so(pg_database: str, tmp_path: Any) -> None:
    first = noetl("db", "partitions", "--db", pg_database, "--days", "30")
    again = noetl("db", "partitions", "--db", pg_database, "--days", "30")
    sqlite = noetl("db", "partitions", "--db", tmp_path / "noetl.db")

    for proc in (first, again, sqlite):
        assert proc.returncode == 0, proc.stderr
    made = [line.split()[1] for line in first.stdout.splitlines() if line.startswith("  made")]
    assert made and all(name.startswith(("event_log_p", "step_state_p")) for name in made)
    assert set(made) <= set(partitions(pg_database, "event_log")) | set(
        partitions(pg_database, "step_state")
    )
    assert "made 0, dropped 0 partition(s)" in again.stdout
    assert "not partitioned (PostgreSQL only)" in sqlite.stdout
    assert not (tmp_path / "noetl.db").exists()  # nothing to do: not even opened
