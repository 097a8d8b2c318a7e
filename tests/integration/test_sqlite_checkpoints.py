"""The SQLite log's checkpoints, run by a thread of their own (noetl.store._sqlite_checkpoint)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from noetl.core import Event
from noetl.store import Append, ExecutionRecord, SqliteStore
from noetl.store._sqlite_checkpoint import Checkpointer

PAGE = 4096


def _writer(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # as the store's writing connection
    conn.execute("CREATE TABLE blob (id INTEGER PRIMARY KEY, body BLOB)")
    return conn


def _write(conn: sqlite3.Connection, rows: int) -> None:
    for _ in range(rows):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO blob (body) VALUES (randomblob(?))", (PAGE,))
        conn.execute("COMMIT")


def _wal_bytes(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_without_checkpoints_the_log_grows(tmp_path: Path) -> None:
    """The control: with the writer's own checkpoints off and none elsewhere, each
    batch of commits adds to the log."""
    path = tmp_path / "control.db"
    conn = _writer(path)
    _write(conn, 300)
    first = _wal_bytes(path)
    _write(conn, 300)
    assert _wal_bytes(path) > first * 1.8
    conn.close()


def test_the_checkpoint_thread_keeps_the_log_from_growing(tmp_path: Path) -> None:
    path = tmp_path / "checkpointed.db"
    conn = _writer(path)
    checkpoints = Checkpointer(path, interval_s=0.01)
    try:
        _write(conn, 300)
        checkpoints.committed()
        first = _wal_bytes(path)
        # the thread copies the log back; the next write then starts the log over
        assert _eventually(lambda: checkpoints._done == checkpoints._commits)
        for _ in range(3):
            _write(conn, 300)
            checkpoints.committed()
            assert _eventually(lambda: checkpoints._done == checkpoints._commits)
        assert _wal_bytes(path) <= first * 1.1
        rows = conn.execute("SELECT count(*) FROM blob").fetchone()[0]
        assert rows == 1200
    finally:
        checkpoints.stop()
        conn.close()


def test_an_idle_checkpointer_does_nothing_and_stops_at_once(tmp_path: Path) -> None:
    path = tmp_path / "idle.db"
    conn = _writer(path)
    checkpoints = Checkpointer(path, interval_s=0.01)
    _write(conn, 50)
    time.sleep(0.1)
    assert checkpoints._done == 0  # never told of a commit: nothing checkpointed
    started = time.monotonic()
    checkpoints.stop()
    assert time.monotonic() - started < 1.0
    alive = [t for t in threading.enumerate() if t.name == "noetl-sqlite-checkpoint"]
    assert not [t for t in alive if t.is_alive()]
    conn.close()


def test_a_store_checkpoints_in_the_background_and_closes_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(path)
    checkpoints = store._connector._checkpoints
    assert checkpoints is not None

    def caught_up() -> bool:
        return checkpoints._done == checkpoints._commits

    def write(first_seq: int, count: int) -> None:
        for seq in range(first_seq, first_seq + count):
            event = Event(seq, "step.called", "e1", float(seq), "s", {"pad": "x" * 3000})
            store.commit([Append("e1", seq - 1, [event], now=float(seq))])

    try:
        store.create_execution(ExecutionRecord("e1", "demo", None, "name: demo\n", created_at=1.0))
        write(1, 200)
        assert _eventually(caught_up)
        first = _wal_bytes(path)
        for batch in range(1, 4):
            write(1 + 200 * batch, 200)
            assert _eventually(caught_up)
        assert _wal_bytes(path) <= first * 1.2  # started over after each checkpoint
        assert len(store.load_events("e1")) == 800
    finally:
        store.close()
    assert not Path(f"{path}-wal").exists()  # the last close checkpoints and removes it
    alive = [t for t in threading.enumerate() if t.name == "noetl-sqlite-checkpoint"]
    assert not [t for t in alive if t.is_alive()]
