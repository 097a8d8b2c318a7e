"""SqliteStore against a real file: schema from migrations, errors people will meet, volume."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import noetl.store.sqlite as sqlite_module
from noetl.core import Event
from noetl.store import Append, ExecutionRecord, SqliteStore, StoreUnavailableError
from noetl.store.migrate import Migration, discover, migrate_sqlite, split_statements

# (name, declared type, not null, primary-key position) as PRAGMA table_info reports them.
EXPECTED_COLUMNS = {
    "schema_migrations": [
        ("version", "INTEGER", 0, 1),
        ("applied_at", "REAL", 1, 0),
    ],
    "execution": [
        ("execution_id", "TEXT", 0, 1),
        ("playbook_name", "TEXT", 1, 0),
        ("playbook_path", "TEXT", 0, 0),
        ("status", "TEXT", 1, 0),
        ("context", "TEXT", 1, 0),
        ("parent_execution_id", "TEXT", 0, 0),
        ("last_seq", "INTEGER", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
        ("finished_at", "REAL", 0, 0),
        ("pruned_at", "REAL", 0, 0),
        ("token_floor", "INTEGER", 1, 0),
    ],
    "execution_input": [
        ("execution_id", "TEXT", 0, 1),
        ("playbook_text", "TEXT", 1, 0),
        ("workload", "TEXT", 1, 0),
        ("compiled", "TEXT", 0, 0),
    ],
    "event_log": [
        ("execution_id", "TEXT", 1, 1),
        ("seq", "INTEGER", 1, 2),
        ("type", "TEXT", 1, 0),
        ("ts", "REAL", 1, 0),
        ("step", "TEXT", 0, 0),
        ("payload", "TEXT", 1, 0),
    ],
    "step_state": [
        ("execution_id", "TEXT", 1, 1),
        ("step", "TEXT", 1, 2),
        ("status", "TEXT", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "task_queue": [
        ("task_id", "TEXT", 0, 1),
        ("execution_id", "TEXT", 1, 0),
        ("step", "TEXT", 1, 0),
        ("pool", "TEXT", 1, 0),
        ("priority", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("lease_token", "INTEGER", 1, 0),
        ("lease_expires_at", "REAL", 0, 0),
        ("worker_id", "TEXT", 0, 0),
        ("cancel_requested", "INTEGER", 1, 0),
        ("not_before", "REAL", 1, 0),
        ("payload", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "inbox": [
        ("id", "INTEGER", 0, 1),
        ("execution_id", "TEXT", 1, 0),
        ("kind", "TEXT", 1, 0),
        ("payload", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("claimed_by", "TEXT", 0, 0),
        ("claimed_until", "REAL", 0, 0),
    ],
    "playbook": [
        ("path", "TEXT", 1, 1),
        ("version", "INTEGER", 1, 2),
        ("name", "TEXT", 1, 0),
        ("text", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
    ],
    "worker": [
        ("worker_id", "TEXT", 0, 1),
        ("pool", "TEXT", 1, 0),
        ("hostname", "TEXT", 1, 0),
        ("pid", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("started_at", "REAL", 1, 0),
        ("heartbeat_at", "REAL", 1, 0),
    ],
    "dlq": [
        ("message_id", "TEXT", 0, 1),
        ("execution_id", "TEXT", 1, 0),
        ("step_id", "TEXT", 1, 0),
        ("loop_index", "INTEGER", 0, 0),
        ("loop_key", "TEXT", 0, 0),
        ("tool_kind", "TEXT", 0, 0),
        ("sink_id", "TEXT", 0, 0),
        ("attempts", "INTEGER", 1, 0),
        ("reason", "TEXT", 1, 0),
        ("error_type", "TEXT", 0, 0),
        ("last_error", "TEXT", 1, 0),
        ("last_stack", "TEXT", 0, 0),
        ("first_seen", "REAL", 1, 0),
        ("last_seen", "REAL", 1, 0),
        ("payload", "TEXT", 1, 0),
        ("context_excerpt", "TEXT", 1, 0),
        ("task", "TEXT", 1, 0),
        ("status", "TEXT", 1, 0),
        ("replays", "INTEGER", 1, 0),
        ("discard_reason", "TEXT", 0, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "api_token": [
        ("token_id", "TEXT", 0, 1),
        ("name", "TEXT", 1, 0),
        ("role", "TEXT", 1, 0),
        ("token_hash", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("last_used_at", "REAL", 0, 0),
        ("expires_at", "REAL", 0, 0),
        ("revoked", "INTEGER", 1, 0),
        ("revoked_at", "REAL", 0, 0),
    ],
    "credential": [
        ("name", "TEXT", 0, 1),
        ("type", "TEXT", 1, 0),
        ("ciphertext", "TEXT", 1, 0),
        ("key_id", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "result_store": [
        ("ref", "TEXT", 0, 1),
        ("execution_id", "TEXT", 1, 0),
        ("step", "TEXT", 0, 0),
        ("bytes", "INTEGER", 1, 0),
        ("body", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
    ],
    "task_checkpoint": [
        ("task_id", "TEXT", 0, 1),
        ("execution_id", "TEXT", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("body", "TEXT", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "schedule": [
        ("name", "TEXT", 0, 1),
        ("playbook_path", "TEXT", 1, 0),
        ("source", "TEXT", 1, 0),
        ("spec", "TEXT", 1, 0),
        ("paused", "INTEGER", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
        ("token_hash", "TEXT", 0, 0),
        ("token_sealed", "TEXT", 0, 0),
    ],
    "schedule_delivery": [
        ("schedule", "TEXT", 1, 1),
        ("idempotency_key", "TEXT", 1, 2),
        ("execution_id", "TEXT", 1, 0),
        ("received_at", "REAL", 1, 0),
    ],
    "schedule_tick": [
        ("schedule", "TEXT", 1, 1),
        ("tick_ms", "INTEGER", 1, 2),
        ("manual", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("execution_id", "TEXT", 0, 0),
        ("owner", "TEXT", 1, 0),
        ("error", "TEXT", 0, 0),
        ("claimed_at", "REAL", 1, 0),
        ("updated_at", "REAL", 1, 0),
    ],
    "session": [
        ("session_key", "TEXT", 1, 1),
        ("revision", "INTEGER", 1, 2),
        ("operation", "TEXT", 1, 0),
        ("token_id", "TEXT", 1, 0),
        ("role", "TEXT", 1, 0),
        ("created_at", "REAL", 1, 0),
        ("expires_at", "REAL", 1, 0),
        ("last_activity_at", "REAL", 1, 0),
        ("client", "TEXT", 0, 0),
        ("written_at", "REAL", 1, 0),
    ],
}
# (name, table, ((column, descending), ...)) as PRAGMA index_xinfo reports the key columns.
EXPECTED_INDEXES = {
    ("execution_status_idx", "execution", (("status", 0),)),
    ("execution_created_at_idx", "execution", (("created_at", 0),)),
    (
        "task_queue_claim_idx",
        "task_queue",
        (("pool", 0), ("status", 0), ("priority", 1), ("not_before", 0)),
    ),
    ("task_queue_lease_idx", "task_queue", (("status", 0), ("lease_expires_at", 0))),
    ("dlq_execution_idx", "dlq", (("execution_id", 0),)),
    ("dlq_status_idx", "dlq", (("status", 0), ("last_seen", 1))),
    ("dlq_tool_kind_idx", "dlq", (("tool_kind", 0),)),
    ("session_expires_idx", "session", (("expires_at", 0),)),
    ("result_store_execution_idx", "result_store", (("execution_id", 0),)),
    ("task_checkpoint_execution_idx", "task_checkpoint", (("execution_id", 0),)),
    ("execution_prunable_idx", "execution", (("finished_at", 0),)),
    ("dlq_settled_idx", "dlq", (("updated_at", 0),)),
    ("task_queue_execution_idx", "task_queue", (("execution_id", 0),)),
    ("inbox_execution_idx", "inbox", (("execution_id", 0),)),
    ("schedule_playbook_idx", "schedule", (("playbook_path", 0),)),
    ("schedule_tick_status_idx", "schedule_tick", (("status", 0),)),
}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "noetl.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SqliteStore]:
    adapter = SqliteStore(db_path)
    yield adapter
    adapter.close()


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def record(execution_id: str = "e1") -> ExecutionRecord:
    return ExecutionRecord(execution_id, "demo", None, "name: demo\n", created_at=1.0)


def migration_rows(path: Path) -> list[tuple[int, float]]:
    conn = raw(path)
    try:
        return list(conn.execute("SELECT version, applied_at FROM schema_migrations"))
    finally:
        conn.close()


# -- schema --------------------------------------------------------------------------------


def test_migrations_create_the_documented_schema(store: SqliteStore, db_path: Path) -> None:
    conn = raw(db_path)
    try:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        columns = {
            table: [
                (name, type_, notnull, pk)
                for _, name, type_, notnull, _, pk in conn.execute(f"PRAGMA table_info({table})")
            ]
            for table in tables
        }
        indexes = {
            (
                name,
                table,
                tuple(
                    (row[2], row[3])
                    for row in conn.execute(f"PRAGMA index_xinfo({name})")
                    if row[5]  # key columns only (not the rowid riding along)
                ),
            )
            for name, table in conn.execute(
                "SELECT name, tbl_name FROM sqlite_master "
                "WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%'"
            )
        }
        journal_mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()

    assert columns == EXPECTED_COLUMNS
    assert indexes == EXPECTED_INDEXES
    assert journal_mode == "wal"


def test_connection_settings(store: SqliteStore) -> None:
    conn = store._conn
    settings = {
        name: conn.execute(f"PRAGMA {name}").fetchone()[0]
        for name in (
            "journal_mode",
            "synchronous",
            "busy_timeout",
            "foreign_keys",
            "wal_autocheckpoint",
        )
    }

    # synchronous: 1 is NORMAL; the log's checkpoints are a thread's of their own
    assert settings == {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 5000,
        "foreign_keys": 1,
        "wal_autocheckpoint": 0,
    }


def test_schema_constraints_hold(store: SqliteStore, db_path: Path) -> None:
    store.create_execution(record("e1"))
    conn = raw(db_path)
    conn.execute("PRAGMA foreign_keys = ON")
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("UPDATE execution SET status = 'done' WHERE execution_id = 'e1'")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("INSERT INTO event_log VALUES ('nope', 1, 't', 1.0, NULL, '{}')")
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            conn.execute("INSERT INTO event_log VALUES ('e1', 1, 't', 1.0, NULL, '{}')")
            conn.execute("INSERT INTO event_log VALUES ('e1', 1, 't', 2.0, NULL, '{}')")
    finally:
        conn.close()


def test_queue_schema_constraints_hold(store: SqliteStore, db_path: Path) -> None:
    store.create_execution(record("e1"))
    conn = raw(db_path)
    conn.execute("PRAGMA foreign_keys = ON")
    task = (
        "INSERT INTO task_queue (task_id, execution_id, step, status, not_before, payload, "
        "created_at, updated_at) VALUES ('t1', ?, 's', ?, 0, '{}', 0, 0)"
    )
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(task, ("e1", "running"))
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute(task, ("nope", "queued"))
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute(
                "INSERT INTO inbox (execution_id, kind, created_at) VALUES ('nope', 'cancel', 0)"
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO worker VALUES ('w1', 'default', 'h', 1, 'asleep', 0, 0)")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO playbook VALUES ('p.yaml', 0, 'p', 'text', 0)")
    finally:
        conn.close()


def test_packaged_migrations() -> None:
    migrations = discover("sqlite")

    def head(statement: str) -> str:
        code = " ".join(line for line in statement.splitlines() if not line.startswith("--"))
        return " ".join(code.split()[:3])

    assert [(m.version, m.name) for m in migrations] == [
        (1, "init"),
        (2, "queue"),
        (3, "compiled"),
        (4, "dlq"),
        (5, "auth"),
        (6, "credentials"),
        (7, "results"),
        (8, "checkpoints"),
        (9, "retention"),
        (10, "schedules"),
        (11, "commit_guard"),
        (12, "lean_event_log"),
    ]
    assert [head(s) for s in split_statements(migrations[0].sql)] == [
        "CREATE TABLE execution",
        "CREATE TABLE execution_input",
        "CREATE INDEX execution_status_idx",
        "CREATE INDEX execution_created_at_idx",
        "CREATE TABLE event_log",
        "CREATE INDEX event_log_type_idx",
        "CREATE TABLE step_state",
    ]
    assert [head(s) for s in split_statements(migrations[1].sql)] == [
        "CREATE TABLE task_queue",
        "CREATE INDEX task_queue_claim_idx",
        "CREATE INDEX task_queue_lease_idx",
        "CREATE TABLE inbox",
        "CREATE TABLE playbook",
        "CREATE TABLE worker",
    ]
    assert [head(s) for s in split_statements(migrations[2].sql)] == [
        "ALTER TABLE execution_input",
    ]


def test_split_statements_keeps_semicolons_inside_literals() -> None:
    sql = "INSERT INTO t VALUES ('a;b');\n-- a comment; with a semicolon\nSELECT 1;\n"

    assert split_statements(sql) == [
        "INSERT INTO t VALUES ('a;b');",
        "-- a comment; with a semicolon\nSELECT 1;",
    ]


# -- migrations over time ------------------------------------------------------------------


def test_reopening_does_not_reapply_migrations(db_path: Path) -> None:
    first = SqliteStore(db_path)
    first.create_execution(record("e1"))
    first.close()
    applied = migration_rows(db_path)

    second = SqliteStore(db_path)
    try:
        assert migration_rows(db_path) == applied
        assert [version for version, _ in applied] == list(range(1, 13))
        assert second.get_execution("e1") == record("e1")
        assert migrate_sqlite(second._conn) == []
    finally:
        second.close()


def test_pending_migrations_apply_in_order_once(store: SqliteStore, db_path: Path) -> None:
    later = [
        Migration(21, "twenty_first", "ALTER TABLE extra ADD COLUMN y TEXT;"),
        Migration(20, "twentieth", "CREATE TABLE extra (x INTEGER);"),
    ]
    conn = raw(db_path)
    try:
        migrations = [*discover("sqlite"), *sorted(later, key=lambda m: m.version)]
        assert migrate_sqlite(conn, migrations, clock=lambda: 42.0) == [20, 21]
        assert migrate_sqlite(conn, migrations) == []
        columns = [row[1] for row in conn.execute("PRAGMA table_info(extra)")]
    finally:
        conn.close()

    assert columns == ["x", "y"]
    assert [row for row in migration_rows(db_path) if row[0] >= 20] == [(20, 42.0), (21, 42.0)]


def test_a_failing_migration_leaves_nothing_behind(store: SqliteStore, db_path: Path) -> None:
    broken = Migration(20, "broken", "CREATE TABLE half (x);\nCREATE TABLE execution (x);")
    conn = raw(db_path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="already exists"):
            migrate_sqlite(conn, [*discover("sqlite"), broken])
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert not conn.in_transaction
    finally:
        conn.close()

    assert "half" not in tables
    assert [version for version, _ in migration_rows(db_path)] == list(range(1, 13))


def test_a_database_from_a_newer_build_is_refused(db_path: Path) -> None:
    SqliteStore(db_path).close()
    conn = raw(db_path)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 1.0)")
    conn.close()

    with pytest.raises(StoreUnavailableError) as caught:
        SqliteStore(db_path)

    assert str(db_path) in str(caught.value)
    assert "schema version 999 is newer than this build knows (12)" in str(caught.value)


# -- errors a user will meet ---------------------------------------------------------------


def test_parent_that_is_a_file_gives_a_readable_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    path = blocker / "sub" / "noetl.db"

    with pytest.raises(StoreUnavailableError) as caught:
        SqliteStore(path)

    message = str(caught.value)
    assert str(path) in message
    assert "writable directory" in message
    assert caught.value.retryable is False


def test_path_that_is_a_directory_gives_a_readable_error(tmp_path: Path) -> None:
    path = tmp_path / "a-directory.db"
    path.mkdir()

    with pytest.raises(StoreUnavailableError) as caught:
        SqliteStore(path)

    message = str(caught.value)
    assert message.startswith(f"SQLite database {path} is unavailable (unable to open")
    assert "choose another database path" in message
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_a_file_that_is_not_a_database_gives_a_readable_error(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite" * 100)

    with pytest.raises(StoreUnavailableError) as caught:
        SqliteStore(path)

    assert str(path) in str(caught.value)
    assert "not a usable NoETL database" in str(caught.value)


def test_a_locked_database_gives_a_retryable_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 50)
    adapter = SqliteStore(db_path)
    adapter.create_execution(record("e1"))
    holder = raw(db_path)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailableError) as caught:
            adapter.commit([Append("e1", 0, [Event(1, "t", "e1", 1.0)], now=1.0)])
        holder.execute("ROLLBACK")

        assert str(db_path) in str(caught.value)
        assert "locked" in str(caught.value)
        assert caught.value.retryable is True
        # the store recovers once the lock is gone
        adapter.commit([Append("e1", 0, [Event(1, "t", "e1", 1.0)], now=1.0)])
        assert [event.seq for event in adapter.load_events("e1")] == [1]
    finally:
        holder.close()
        adapter.close()


# -- volume --------------------------------------------------------------------------------


def test_ten_thousand_events_in_one_commit(store: SqliteStore) -> None:
    store.create_execution(record("e1"))
    events = [
        Event(seq, "step.finished", "e1", float(seq), f"s{seq % 7}", {"i": seq, "v": "x" * 20})
        for seq in range(1, 10_001)
    ]

    store.commit([Append("e1", 0, events, steps={"s0": {"n": 1}}, now=2.0)])

    loaded = store.load_events("e1")
    assert len(loaded) == 10_000
    assert loaded[0] == events[0]
    assert loaded[-1] == events[-1]
    execution = store.get_execution("e1")
    assert execution is not None
    assert execution.last_seq == 10_000
