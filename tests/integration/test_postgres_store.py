"""PostgresStore against a real server: the schema the migrations make, `noetl db` run as a
real subprocess, concurrent claimers, LISTEN/NOTIFY wake-ups, errors people will meet.

The behaviour every adapter shares is in tests/contract; this file holds what only a
PostgreSQL server can show. Each test gets a database of its own (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from noetl.core import Event, ExecutionStatus, Task
from noetl.store import (
    Append,
    ConcurrencyError,
    ExecutionRecord,
    NotFoundError,
    PostgresStore,
    StoreUnavailableError,
    _pg_connector,
    migrate_schema,
    open_store,
    schema_status,
)
from noetl.store.base import Enqueue, InputKind
from noetl.store.managers.retention import RETENTION_LOCK
from noetl.store.migrate import Migration, discover, migrate_postgres
from tests.helpers.cli import noetl

# (column, data type, nullable) per table, in column order, as information_schema has them.
TZ = "timestamp with time zone"
EXPECTED_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "schema_migrations": [
        ("version", "integer", "NO"),
        ("applied_at", TZ, "NO"),
    ],
    "execution": [
        ("execution_id", "text", "NO"),
        ("playbook_name", "text", "NO"),
        ("playbook_path", "text", "YES"),
        ("status", "text", "NO"),
        ("context", "jsonb", "NO"),
        ("parent_execution_id", "text", "YES"),
        ("last_seq", "bigint", "NO"),
        ("created_at", TZ, "NO"),
        ("updated_at", TZ, "NO"),
        ("finished_at", TZ, "YES"),
        ("created_order", "bigint", "NO"),
        ("pruned_at", TZ, "YES"),
        ("token_floor", "bigint", "NO"),
    ],
    "execution_input": [
        ("execution_id", "text", "NO"),
        ("playbook_text", "text", "NO"),
        ("workload", "jsonb", "NO"),
        ("compiled", "text", "YES"),
    ],
    "event_log": [
        ("execution_id", "text", "NO"),
        ("seq", "bigint", "NO"),
        ("type", "text", "NO"),
        ("ts", TZ, "NO"),
        ("step", "text", "YES"),
        ("payload", "jsonb", "NO"),
    ],
    "step_state": [
        ("execution_id", "text", "NO"),
        ("step", "text", "NO"),
        ("status", "jsonb", "NO"),
        ("updated_at", TZ, "NO"),
        ("created_order", "bigint", "NO"),
    ],
    "task_queue": [
        ("task_id", "text", "NO"),
        ("execution_id", "text", "NO"),
        ("step", "text", "NO"),
        ("pool", "text", "NO"),
        ("priority", "integer", "NO"),
        ("status", "text", "NO"),
        ("attempt", "integer", "NO"),
        ("lease_token", "bigint", "NO"),
        ("lease_expires_at", TZ, "YES"),
        ("worker_id", "text", "YES"),
        ("cancel_requested", "boolean", "NO"),
        ("not_before", TZ, "NO"),
        ("payload", "jsonb", "NO"),
        ("created_at", TZ, "NO"),
        ("updated_at", TZ, "NO"),
        ("queue_order", "bigint", "NO"),
    ],
    "inbox": [
        ("id", "bigint", "NO"),
        ("execution_id", "text", "NO"),
        ("kind", "text", "NO"),
        ("payload", "jsonb", "NO"),
        ("created_at", TZ, "NO"),
        ("claimed_by", "text", "YES"),
        ("claimed_until", TZ, "YES"),
    ],
    "playbook": [
        ("path", "text", "NO"),
        ("version", "integer", "NO"),
        ("name", "text", "NO"),
        ("text", "text", "NO"),
        ("created_at", TZ, "NO"),
    ],
    "worker": [
        ("worker_id", "text", "NO"),
        ("pool", "text", "NO"),
        ("hostname", "text", "NO"),
        ("pid", "integer", "NO"),
        ("status", "text", "NO"),
        ("started_at", TZ, "NO"),
        ("heartbeat_at", TZ, "NO"),
    ],
    "dlq": [
        ("message_id", "text", "NO"),
        ("execution_id", "text", "NO"),
        ("step_id", "text", "NO"),
        ("loop_index", "integer", "YES"),
        ("loop_key", "jsonb", "YES"),
        ("tool_kind", "text", "YES"),
        ("sink_id", "text", "YES"),
        ("attempts", "integer", "NO"),
        ("reason", "text", "NO"),
        ("error_type", "text", "YES"),
        ("last_error", "text", "NO"),
        ("last_stack", "text", "YES"),
        ("first_seen", TZ, "NO"),
        ("last_seen", TZ, "NO"),
        ("payload", "jsonb", "NO"),
        ("context_excerpt", "text", "NO"),
        ("task", "jsonb", "NO"),
        ("status", "text", "NO"),
        ("replays", "integer", "NO"),
        ("discard_reason", "text", "YES"),
        ("updated_at", TZ, "NO"),
    ],
    "api_token": [
        ("token_id", "text", "NO"),
        ("name", "text", "NO"),
        ("role", "text", "NO"),
        ("token_hash", "text", "NO"),
        ("created_at", TZ, "NO"),
        ("last_used_at", TZ, "YES"),
        ("expires_at", TZ, "YES"),
        ("revoked", "boolean", "NO"),
        ("revoked_at", TZ, "YES"),
    ],
    "credential": [
        ("name", "text", "NO"),
        ("type", "text", "NO"),
        ("ciphertext", "text", "NO"),
        ("key_id", "text", "NO"),
        ("created_at", TZ, "NO"),
        ("updated_at", TZ, "NO"),
    ],
    "session": [
        ("session_key", "text", "NO"),
        ("revision", "integer", "NO"),
        ("operation", "text", "NO"),
        ("token_id", "text", "NO"),
        ("role", "text", "NO"),
        ("created_at", TZ, "NO"),
        ("expires_at", TZ, "NO"),
        ("last_activity_at", TZ, "NO"),
        ("client", "text", "YES"),
        ("written_at", TZ, "NO"),
    ],
    "result_store": [
        ("ref", "text", "NO"),
        ("execution_id", "text", "NO"),
        ("step", "text", "YES"),
        ("bytes", "bigint", "NO"),
        ("body", "text", "NO"),
        ("created_at", TZ, "NO"),
    ],
    "task_checkpoint": [
        ("task_id", "text", "NO"),
        ("execution_id", "text", "NO"),
        ("attempt", "integer", "NO"),
        ("body", "text", "NO"),
        ("updated_at", TZ, "NO"),
    ],
    "schedule": [
        ("name", "text", "NO"),
        ("playbook_path", "text", "NO"),
        ("source", "text", "NO"),
        ("spec", "text", "NO"),
        ("paused", "boolean", "NO"),
        ("created_at", TZ, "NO"),
        ("updated_at", TZ, "NO"),
        ("token_hash", "text", "YES"),
        ("token_sealed", "text", "YES"),
    ],
    "schedule_delivery": [
        ("schedule", "text", "NO"),
        ("idempotency_key", "text", "NO"),
        ("execution_id", "text", "NO"),
        ("received_at", TZ, "NO"),
    ],
    "schedule_tick": [
        ("schedule", "text", "NO"),
        ("tick_ms", "bigint", "NO"),
        ("manual", "boolean", "NO"),
        ("status", "text", "NO"),
        ("execution_id", "text", "YES"),
        ("owner", "text", "NO"),
        ("error", "text", "YES"),
        ("claimed_at", TZ, "NO"),
        ("updated_at", TZ, "NO"),
    ],
}
ALL_MIGRATIONS = (
    "0001_init, 0002_queue, 0003_compiled, 0004_dlq, 0005_auth, 0006_credentials, 0007_results,"
    " 0008_checkpoints, 0009_retention, 0010_schedules, 0011_commit_guard,"
    " 0012_lean_event_log, 0013_commit_function, 0014_commit_by_keys,"
    " 0015_fillfactor, 0016_start_function, 0017_start_latest, 0018_partitions"
)
VERSIONS = list(range(1, 19))
EXPECTED_PRIMARY_KEYS = {
    "schema_migrations": ["version"],
    "execution": ["execution_id"],
    "execution_input": ["execution_id"],
    "event_log": ["execution_id", "seq"],
    "step_state": ["execution_id", "step"],
    "task_queue": ["task_id"],
    "inbox": ["id"],
    "playbook": ["path", "version"],
    "worker": ["worker_id"],
    "dlq": ["message_id"],
    "api_token": ["token_id"],
    "session": ["session_key", "revision"],
    "credential": ["name"],
    "result_store": ["ref"],
    "task_checkpoint": ["task_id"],
    "schedule": ["name"],
    "schedule_tick": ["schedule", "tick_ms"],
    "schedule_delivery": ["schedule", "idempotency_key"],
}


# The tables, not their partitions (event_log and step_state are partitioned: see
# tests/integration/test_pg_partitions.py).
NOT_A_PARTITION = "table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)"


def columns(url: str, schema: str = "public") -> dict[str, list[tuple[str, str, str]]]:
    found: dict[str, list[tuple[str, str, str]]] = {}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable "
            f"FROM information_schema.columns WHERE table_schema = %s AND {NOT_A_PARTITION} "
            "ORDER BY table_name, ordinal_position",
            (schema,),
        ).fetchall()
    for table, column, data_type, nullable in rows:
        found.setdefault(table, []).append((column, data_type, nullable))
    return found


def primary_keys(url: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT k.table_name, k.column_name FROM information_schema.table_constraints c "
            "JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name) "
            "WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = 'public' "
            f"AND k.{NOT_A_PARTITION} "
            "ORDER BY k.table_name, k.ordinal_position"
        ).fetchall()
    for table, column in rows:
        found.setdefault(table, []).append(column)
    return found


def with_password(url: str, password: str, *, port: int | None = None) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{parts.username or 'postgres'}:{password}@{host}:{port or parts.port or 5432}"
    return parts._replace(netloc=netloc).geturl()


def make_record(execution_id: str = "e1") -> ExecutionRecord:
    return ExecutionRecord(
        execution_id=execution_id,
        playbook_name="demo",
        playbook_path=None,
        playbook_text="name: demo\n",
        created_at=1.0,
        updated_at=1.0,
    )


def make_task(step: str, execution_id: str = "e1") -> Task:
    return Task(
        task_id=f"{execution_id}.{step}",
        execution_id=execution_id,
        step=step,
        kind="noop",
        spec={},
        args={},
        context={},
        key=f"{execution_id}:{step}",
    )


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_database)
    yield store
    store.close()


# -- schema -------------------------------------------------------------------------------


def test_migrations_make_exactly_the_documented_schema(pg_empty_database: str) -> None:
    assert schema_status(pg_empty_database).pending[0].label == "0001_init"

    applied = migrate_schema(pg_empty_database)

    assert [m.label for m in applied] == [
        "0001_init",
        "0002_queue",
        "0003_compiled",
        "0004_dlq",
        "0005_auth",
        "0006_credentials",
        "0007_results",
        "0008_checkpoints",
        "0009_retention",
        "0010_schedules",
        "0011_commit_guard",
        "0012_lean_event_log",
        "0013_commit_function",
        "0014_commit_by_keys",
        "0015_fillfactor",
        "0016_start_function",
        "0017_start_latest",
        "0018_partitions",
    ]
    assert columns(pg_empty_database) == EXPECTED_COLUMNS
    assert primary_keys(pg_empty_database) == EXPECTED_PRIMARY_KEYS
    assert migrate_schema(pg_empty_database) == []
    status = schema_status(pg_empty_database)
    assert (status.applied, status.pending, status.version) == (
        VERSIONS,
        [],
        VERSIONS[-1],
    )


def test_a_failing_migration_applies_nothing(pg_empty_database: str) -> None:
    broken = Migration(3, "broken", "CREATE TABLE half_done (id integer); SELECT 1 / 0;")

    with (
        psycopg.connect(pg_empty_database, autocommit=True) as conn,
        pytest.raises(psycopg.errors.DivisionByZero),
    ):
        migrate_postgres(conn, [*discover("postgres"), broken])

    assert columns(pg_empty_database) == {}  # not even 0001: one transaction
    assert schema_status(pg_empty_database).applied == []


def test_processes_migrating_at_once_apply_each_migration_once(pg_empty_database: str) -> None:
    barrier = threading.Barrier(4)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def migrate() -> None:
        barrier.wait()
        try:
            results.append([m.version for m in migrate_schema(pg_empty_database)])
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert sorted(results) == [[], [], [], VERSIONS]
    assert schema_status(pg_empty_database).applied == VERSIONS


def test_the_search_path_of_the_dsn_chooses_the_schema(pg_empty_database: str) -> None:
    with psycopg.connect(pg_empty_database, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA tenant_a")
    url = pg_empty_database + "?options=-csearch_path%3Dtenant_a"

    store = PostgresStore(url)
    try:
        store.create_execution(make_record("e1"))
        assert store.get_execution("e1") == make_record("e1")
    finally:
        store.close()

    assert set(columns(pg_empty_database, "tenant_a")) == set(EXPECTED_COLUMNS)
    assert columns(pg_empty_database, "public") == {}


# -- the commit function's plans on a new database ----------------------------------------
# `noetl_commit` keeps generic plans for the session, made from the statistics of the
# moment its session first calls it. On a new database those say "almost empty": the update
# of the executions' rows then joined them over a sequential scan of the whole `execution`
# table, and went on scanning it on every commit as the table grew, until an ANALYZE
# (migration 0014). The commits here find every execution by its key.

PLANNED_EXECUTIONS = 300


def _execution_stats(url: str, updates: int) -> tuple[int, int]:
    """(sequential scans, rows they read) of `execution`, once the store's sessions have
    reported at least `updates` updates of it (a session reports its counts when it ends)."""
    deadline = time.monotonic() + 15
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT seq_scan, seq_tup_read, n_tup_upd FROM pg_stat_user_tables "
                "WHERE relname = 'execution'"
            ).fetchone()
        assert row is not None
        if row[2] >= updates or time.monotonic() > deadline:
            assert row[2] >= updates, f"only {row[2]} updates of execution were reported"
            return int(row[0]), int(row[1])
        time.sleep(0.1)


def test_commits_on_a_new_database_find_their_executions_by_key(pg_database: str) -> None:
    ids = [f"e{i:04d}" for i in range(PLANNED_EXECUTIONS)]
    store = PostgresStore(pg_database)
    try:
        for execution_id in ids:
            started = Event(1, "workflow.started", execution_id, 1.0)
            store.create_execution(make_record(execution_id), Append(execution_id, 0, [started]))
        for execution_id in ids:
            called = Event(2, "step.called", execution_id, 2.0, step="a")
            store.commit([Append(execution_id, 1, [called], now=2.0)])
    finally:
        store.close()  # its sessions end, and report their counts

    scans, read = _execution_stats(pg_database, updates=2 * PLANNED_EXECUTIONS)
    # A scan per commit read the whole table: tens of thousands of rows.
    assert read < PLANNED_EXECUTIONS, (scans, read)


# -- noetl db, the real CLI ---------------------------------------------------------------


def test_noetl_db_init_twice_is_idempotent(pg_empty_database: str) -> None:
    url = with_password(pg_empty_database, "s3cr3t")  # trust auth ignores it

    first = noetl("db", "init", "--db", url)
    second = noetl("db", "init", env={"NOETL_DB": url})
    migrate = noetl("db", "migrate", "--db", url)
    status = noetl("db", "status", "--db", url)

    for proc in (first, second, migrate, status):
        assert proc.returncode == 0, proc.stderr
        assert "s3cr3t" not in proc.stdout + proc.stderr
    assert f"applied {ALL_MIGRATIONS}" in first.stdout
    assert f"already initialized (schema version {VERSIONS[-1]})" in second.stdout
    assert "applied" not in migrate.stdout
    assert f"at schema version {VERSIONS[-1]}" in migrate.stdout
    assert status.stdout.splitlines()[1:] == [
        "applied:  " + ALL_MIGRATIONS,
        "pending:  none",
    ]
    assert columns(pg_empty_database) == EXPECTED_COLUMNS


def test_noetl_db_status_shows_pending_migrations(pg_empty_database: str) -> None:
    status = noetl("db", "status", "--db", pg_empty_database)

    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[1:] == [
        "applied:  none",
        "pending:  " + ALL_MIGRATIONS,
    ]
    assert columns(pg_empty_database) == {}  # status changes nothing


def test_noetl_db_against_an_unreachable_server_exits_3_without_the_password() -> None:
    proc = noetl("db", "migrate", "--db", "postgresql://postgres:s3cr3t@127.0.0.1:1/noetl")

    assert proc.returncode == 3
    assert "127.0.0.1:1" in proc.stderr
    assert "s3cr3t" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


# -- the queue under concurrency -----------------------------------------------------------


def test_four_stores_claiming_at_once_never_lease_a_task_twice(pg_database: str) -> None:
    count = 200
    stores = [PostgresStore(pg_database, max_size=2) for _ in range(4)]
    try:
        initial = Append(
            "e1",
            0,
            [Event(1, "workflow.started", "e1", 1.0)],
            enqueue=[Enqueue(make_task(f"s{i}")) for i in range(count)],
            now=1.0,
        )
        stores[0].create_execution(make_record("e1"), initial)
        claimed: list[tuple[str, str, int]] = []
        lock = threading.Lock()
        barrier = threading.Barrier(len(stores))

        def claim_all(store: PostgresStore, worker_id: str) -> None:
            barrier.wait()
            while leases := store.claim(worker_id, limit=5, lease_s=60):
                with lock:
                    claimed.extend((worker_id, lease.task.task_id, lease.token) for lease in leases)

        threads = [
            threading.Thread(target=claim_all, args=(store, f"w{n}"))
            for n, store in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

        task_ids = [task_id for _, task_id, _ in claimed]
        assert [task_id for task_id, n in Counter(task_ids).items() if n > 1] == []
        assert sorted(task_ids) == sorted(f"e1.s{i}" for i in range(count))
        assert {token for _, _, token in claimed} == {1}
        assert len({worker for worker, _, _ in claimed}) > 1  # they did run side by side
        for worker_id, task_id, _ in claimed[:: count // 20]:
            row = stores[1].get_task(task_id)
            assert row is not None
            assert (row["worker_id"], row["lease_token"]) == (worker_id, 1)
        assert stores[2].claim("late", limit=10) == []
    finally:
        for store in stores:
            store.close()


# -- LISTEN / NOTIFY -----------------------------------------------------------------------


def wait_in_thread(store: PostgresStore, channel: str, timeout: float) -> dict[str, Any]:
    """Start `store.wait_for(channel, timeout)` in a thread; the dict gets its result."""
    result: dict[str, Any] = {}

    def wait() -> None:
        started = time.monotonic()
        result["woken"] = store.wait_for(channel, timeout)
        result["after"] = time.monotonic() - started

    thread = threading.Thread(target=wait)
    result["thread"] = thread
    thread.start()
    return result


def test_wait_for_wakes_within_a_second_when_another_connection_posts(pg_database: str) -> None:
    waiter, poster = PostgresStore(pg_database), PostgresStore(pg_database)
    try:
        poster.create_execution(make_record("e1"))
        assert waiter.wait_for("inputs", 0.2) is False  # nothing yet; now it listens

        inputs = wait_in_thread(waiter, "inputs", 10)
        tasks = wait_in_thread(waiter, "tasks", 0.8)
        time.sleep(0.2)
        poster.post_input("e1", InputKind.CANCEL, {"by": "test"})
        inputs["thread"].join(timeout=15)
        tasks["thread"].join(timeout=15)

        assert inputs["woken"] is True
        assert inputs["after"] < 1.2  # posted at 0.2 s; woken well within a second
        assert tasks["woken"] is False  # an input does not wake workers

        tasks = wait_in_thread(waiter, "tasks", 10)
        time.sleep(0.2)
        poster.commit([Append("e1", 0, [], enqueue=[Enqueue(make_task("a"))], now=2.0)])
        tasks["thread"].join(timeout=15)
        assert (tasks["woken"], tasks["after"] < 1.2) == (True, True)
    finally:
        waiter.close()
        poster.close()


# -- errors ------------------------------------------------------------------------------


def test_a_value_postgresql_cannot_store_is_a_value_error_and_nothing_is_written(
    pg_store: PostgresStore,
) -> None:
    pg_store.create_execution(make_record("e1"))

    # NUL is stored escaped (tests/contract/test_nul_contract.py); NaN is not JSON.
    for payload in ({"x": float("nan")}, {"x": float("inf")}):
        with pytest.raises(ValueError, match="cannot store a value"):
            pg_store.commit([Append("e1", 0, [Event(1, "t", "e1", 1.0, None, payload)])])

    assert pg_store.load_events("e1") == []
    assert pg_store.get_execution("e1") == make_record("e1")


def test_refused_commits_leave_no_transaction_open_on_the_connection(pg_database: str) -> None:
    # One pooled connection: every call below runs on the connection the refusals used.
    # A commit's BEGIN and COMMIT go out in its pipeline, so a refusal (a stale sequence,
    # a lost lease, a value the server rejects mid-pipeline) must roll back by itself.
    store = PostgresStore(pg_database, min_size=1, max_size=1)
    try:
        task = make_task("a")
        store.create_execution(
            make_record("e1"), Append("e1", 0, [Event(1, "t", "e1", 1.0)], enqueue=[Enqueue(task)])
        )
        with pytest.raises(ConcurrencyError):
            store.create_execution(make_record("e1"))
        (lease,) = store.claim("w1")
        with pytest.raises(ConcurrencyError):
            store.commit([Append("e1", 0, [Event(1, "t", "e1", 2.0)])])
        with pytest.raises(ValueError, match="cannot store a value"):
            store.commit([Append("e1", 1, [Event(2, "t", "e1", 2.0, None, {"x": float("nan")})])])
        lost = Append("e1", 1, [Event(2, "t", "e1", 2.0)], enqueue=[Enqueue(make_task("b"))])
        refused = store.complete_and_commit("e1.a", lease.token + 1, lost, worker_id="w1")
        assert refused is None

        follow = Append("e1", 1, [Event(2, "t", "e1", 2.0)], enqueue=[Enqueue(make_task("b"))])
        leases = store.complete_and_commit(
            "e1.a", lease.token, follow, worker_id="w1", lease=["e1.b"]
        )

        assert leases is not None
        assert [x.task.task_id for x in leases] == ["e1.b"]
        assert [e.seq for e in store.load_events("e1")] == [1, 2]
        with psycopg.connect(pg_database, autocommit=True) as conn:
            states = conn.execute(
                "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'noetl' AND state LIKE 'idle in transaction%'"
            ).fetchall()
        assert states == []
    finally:
        store.close()


def test_a_commit_is_checked_by_its_guard_and_only_a_refused_one_is_checked_again(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The guard makes the checks where the rows are, in the commit's one round trip; the
    # slow way (`_apply`: the checks read back, then the writes) runs only after a refusal.
    slow: list[int] = []
    apply = PostgresStore._apply

    def counted(self: PostgresStore, *args: Any, **kwargs: Any) -> Any:
        slow.append(1)
        return apply(self, *args, **kwargs)

    monkeypatch.setattr(PostgresStore, "_apply", counted)
    task = make_task("a")
    first = Append("e1", 0, [Event(1, "t", "e1", 1.0)], enqueue=[Enqueue(task)])
    pg_store.create_execution(make_record("e1"), first)
    slow.clear()
    (lease,) = pg_store.claim("w1")
    pg_store.commit([Append("e1", 1, [Event(2, "t", "e1", 2.0)])])
    follow = Append("e1", 2, [Event(3, "t", "e1", 3.0)], enqueue=[Enqueue(make_task("b"))])
    leases = pg_store.complete_and_commit(
        "e1.a", lease.token, follow, worker_id="w1", lease=["e1.b"]
    )
    assert leases is not None and [x.task.task_id for x in leases] == ["e1.b"]
    assert slow == []

    with pytest.raises(ConcurrencyError) as stale:
        pg_store.commit([Append("e1", 1, [Event(2, "t", "e1", 4.0)])])
    assert stale.value.execution_ids == ("e1",)
    late = Append("e1", 3, [Event(4, "t", "e1", 4.0)])
    assert pg_store.complete_and_commit("e1.b", leases[0].token + 1, late, worker_id="w1") is None
    with pytest.raises(NotFoundError):
        pg_store.commit([Append("nope", 0, [Event(1, "t", "nope", 4.0)])])
    assert len(slow) == 3
    assert [e.seq for e in pg_store.load_events("e1")] == [1, 2, 3]


def test_an_unreachable_server_is_store_unavailable_without_the_password(pg_dsn: str) -> None:
    url = with_password(pg_dsn, "s3cr3t", port=1)

    for opener in (PostgresStore, open_store):
        with pytest.raises(StoreUnavailableError) as caught:
            opener(url)
        message = str(caught.value)
        assert "127.0.0.1:1" in message or "localhost:1" in message
        assert "refused" in message.lower()
        assert caught.value.retryable is True
        shown = "".join(traceback.format_exception(caught.value))
        assert "s3cr3t" not in shown


def test_a_missing_database_is_named_and_not_retryable(pg_dsn: str) -> None:
    url = with_password(pg_dsn, "s3cr3t")
    missing = urlsplit(url)._replace(path="/noetl_no_such_database").geturl()

    with pytest.raises(StoreUnavailableError, match="noetl_no_such_database") as caught:
        PostgresStore(missing)

    assert "does not exist" in str(caught.value)
    assert caught.value.retryable is False
    assert "s3cr3t" not in "".join(traceback.format_exception(caught.value))


def test_a_connection_lost_mid_call_is_retryable_and_the_next_call_works(
    pg_store: PostgresStore, pg_database: str
) -> None:
    pg_store.create_execution(make_record("e1"))
    dbname = urlsplit(pg_database).path.lstrip("/")

    def kill_backends() -> None:
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )

    lost: list[StoreUnavailableError] = []

    def slow_call() -> None:
        try:
            with pg_store._connection() as conn:
                conn.execute("SELECT pg_sleep(5)")
        except StoreUnavailableError as exc:
            lost.append(exc)

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(0.3)
    kill_backends()
    thread.join(timeout=10)

    assert len(lost) == 1
    assert lost[0].retryable is True
    assert dbname in str(lost[0])
    # every pooled connection is gone too: the pool replaces them on the next calls
    kill_backends()
    assert pg_store.get_execution("e1") == make_record("e1")
    assert [r.execution_id for r in pg_store.list_executions()] == ["e1"]


class Outage:
    """A TCP proxy in front of the server that can drop every connection and refuse new
    ones for a while: what a store sees of a restart, without restarting the server."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.listen_port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.listen_port))
        listener.listen(64)
        self.listen_port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        assert self._listener is not None
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the threads blocked on it
                sock.close()
            self._sockets.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                server = socket.create_connection(("127.0.0.1", self.port))
            except OSError:
                return
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()

    @staticmethod
    def _pipe(one: socket.socket, two: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                ready, _, _ = select.select([one, two], [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (two if sock is one else one).sendall(data)


@pytest.mark.slow
def test_a_server_outage_fails_fast_and_retryable_then_the_store_recovers(
    pg_database: str,
) -> None:
    proxy = Outage(urlsplit(pg_database).port or 5432)
    proxy.up()
    url = urlsplit(pg_database)._replace(netloc=f"postgres@127.0.0.1:{proxy.listen_port}")
    store = PostgresStore(url.geturl(), max_size=3)
    try:
        store.create_execution(make_record("e1"))
        proxy.down()
        deadline = time.monotonic() + 1.5
        failures = []
        while time.monotonic() < deadline:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as caught:
                store.get_execution("e1")
            failures.append((time.monotonic() - started, caught.value))
        assert all(error.retryable for _, error in failures)
        assert max(took for took, _ in failures) < 3.0  # not the pool's full 10 s timeout
        assert "refused" in str(failures[-1][1]).lower()

        proxy.up()
        back = time.monotonic()
        while True:
            try:
                assert store.get_execution("e1") == make_record("e1")
                break
            except StoreUnavailableError:
                assert time.monotonic() - back < 5.0, "the store did not reconnect"
                time.sleep(0.1)
    finally:
        store.close()
        proxy.down()


def test_maintain_vacuums_the_queue_tables(pg_store: PostgresStore, pg_database: str) -> None:
    pg_store.maintain()

    with psycopg.connect(pg_database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, vacuum_count FROM pg_stat_user_tables "
            "WHERE relname IN ('task_queue', 'inbox') ORDER BY relname"
        ).fetchall()
    assert rows == [("inbox", 1), ("task_queue", 1)]


def test_one_prune_at_a_time_per_database(pg_database: str) -> None:
    store = PostgresStore(pg_database)
    try:
        record = ExecutionRecord("old", "demo", None, "name: demo\n")
        start = [Event(1, "workflow.started", "old", 1.0, payload={})]
        store.create_execution(record, Append("old", 0, start, now=1.0))
        end = [Event(2, "workflow.finished", "old", 2.0, payload={})]
        store.commit([Append("old", 1, end, status=ExecutionStatus.OK, now=1000.0)])
        with psycopg.connect(pg_database, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (RETENTION_LOCK,))
            busy = store.prune(2000.0, dead_letters_before=0.0)
            dry = store.prune(2000.0, dead_letters_before=0.0, dry_run=True)
            assert busy.skipped and dry.skipped and busy.total == busy.executions == 0
            assert len(store.load_events("old")) == 2
            other.execute("SELECT pg_advisory_unlock(%s)", (RETENTION_LOCK,))
        done = store.prune(2000.0, dead_letters_before=0.0)
        assert not done.skipped and done.executions == 1 and done.rows["event_log"] == 2
        # The lock went back with the prune: the next one is not skipped either.
        assert not store.prune(2000.0, dead_letters_before=0.0).skipped
    finally:
        store.close()


def _blocks_of_rewrites(url: str) -> set[int]:
    """The pages a new execution's row is in over 20 rewrites, on a table of finished
    executions of all sizes, each page filled as far as its rows allowed (VACUUM has
    recorded the little room each has left), as months of history leave them."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO execution (execution_id, playbook_name, status, context, "
            "created_at, updated_at) "
            "SELECT 'old' || g, 'p', 'ok', jsonb_build_object('v', repeat('x', 60 + g * 37 % 400)),"
            " now(), now() FROM generate_series(1, 3000) AS g"
        )
        conn.execute("VACUUM execution")
        conn.execute(
            "INSERT INTO execution (execution_id, playbook_name, context, created_at, updated_at) "
            "VALUES ('new', 'p', jsonb_build_object('v', repeat('y', 40)), now(), now())"
        )
        blocks: set[int] = set()
        for _ in range(20):  # a commit of the execution rewrites its row
            conn.execute(
                "UPDATE execution SET last_seq = last_seq + 1, updated_at = now() "
                "WHERE execution_id = 'new'"
            )
            row = conn.execute(
                "SELECT (ctid::text::point)[0]::int FROM execution WHERE execution_id = 'new'"
            ).fetchone()
            assert row is not None
            blocks.add(row[0])
    return blocks


def test_a_new_executions_row_is_rewritten_in_its_own_page_among_old_ones(
    pg_empty_database: str,
) -> None:
    """Migration 0015 keeps half of each page of `execution` free: a new execution's row
    goes to a page with room for its rewrites (heap-only updates), not into the little
    room an old page has left."""
    migrate_schema(pg_empty_database)
    assert len(_blocks_of_rewrites(pg_empty_database)) == 1


def test_the_queue_keeps_room_in_its_pages(pg_empty_database: str) -> None:
    """Migration 0015: 30 % of each page of `task_queue` is kept free for the rewrites of
    its rows (on a database of 1,000,000 finished executions, W2 ran at 0.75x of an empty
    database without it, 0.99x with it: docs/performance.md)."""
    migrate_schema(pg_empty_database)
    with psycopg.connect(pg_empty_database) as conn:
        rows = conn.execute(
            "SELECT relname, reloptions FROM pg_class "
            "WHERE relname IN ('execution', 'task_queue') ORDER BY relname"
        ).fetchall()
    fillfactors = {
        table: [o for o in options if o.startswith("fillfactor=")] for table, options in rows
    }
    assert fillfactors == {"execution": ["fillfactor=50"], "task_queue": ["fillfactor=70"]}


def test_a_long_log_is_loaded_as_rows_not_as_one_json_text(
    pg_store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One text value holds at most 1 GB: a log of more than 1,000 events is not
    aggregated into one (`load_execution`), its rows are read instead."""

    def make(execution_id: str, count: int) -> None:
        pg_store.create_execution(
            ExecutionRecord(execution_id, "p", None, "name: p\n", created_at=1.0, updated_at=1.0)
        )
        events = [
            Event(seq, "step.finished", execution_id, 1.0 + seq, "s", {"seq": seq})
            for seq in range(1, count + 1)
        ]
        pg_store.commit([Append(execution_id, 0, events, now=2.0)])

    make("short", 1000)
    make("long", 1001)
    read: list[str] = []
    fetch_all = _pg_connector.PgSession.fetch_all

    def spied(self: Any, query: str, params: Any = None) -> Any:
        read.append(query)
        return fetch_all(self, query, params)

    monkeypatch.setattr(_pg_connector.PgSession, "fetch_all", spied)

    short, long = pg_store.load_execution("short"), pg_store.load_execution("long")

    assert short is not None and len(short[1]) == 1000
    assert long is not None and [e.seq for e in long[1]] == list(range(1, 1002))
    assert read == ["load_events"]  # the long one only
