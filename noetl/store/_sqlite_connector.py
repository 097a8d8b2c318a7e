"""The SQLite connector: one connection guarded by a lock, the named queries of
`sql/sqlite.sql`, and the store's clock.

WAL lets other processes (`noetl status`, a second `noetl run`) read while this one
writes. Writers in other processes wait up to the busy timeout for the lock; every write
transaction takes the write lock up front (`BEGIN IMMEDIATE`) so a read and the write that
depends on it cannot interleave with another writer. Every query is given `now` (epoch
seconds from the store's clock, read once per call or per transaction), so time is
injectable in tests.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from noetl.core import StoreUnavailableError
from noetl.store._json import dumps, loads
from noetl.store._sqlite_checkpoint import Checkpointer
from noetl.store._sqlite_queue import ClockedConnection
from noetl.store.connector import DuplicateKeyError, Params, Row
from noetl.store.migrate import SchemaTooNewError, migrate_sqlite
from noetl.store.queries import QUERIES
from noetl.store.records import Clock

log = logging.getLogger("noetl.store")

_QUERIES = QUERIES["sqlite"]
_DUPLICATE = frozenset({"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"})


class _Values:
    """SQLite holds times as epoch seconds and text as it is."""

    dialect = "sqlite"

    def ts(self, seconds: float) -> Any:
        return seconds

    def epoch(self, value: Any) -> float:
        return float(value)

    def json_in(self, value: Any) -> str:
        return dumps(value)

    def text_in(self, text: str) -> str:
        return text

    def text_out(self, text: str) -> str:
        return text

    def json_value(self, value: Any) -> Any:
        return loads(value)

    def json_text_out(self, text: str) -> str:
        return text

    def notify(self, channel: str) -> None:
        """No notifications in SQLite: waiters poll."""

    @contextmanager
    def exclusive(self, key: int) -> Iterator[bool]:
        """Always granted: each write transaction holds the file's write lock."""
        yield True


class SqliteSession(_Values):
    """The connector's calls on the connection, with one `now` for all of them."""

    def __init__(self, conn: sqlite3.Connection, now: float) -> None:
        self.conn = conn
        self._now = now

    def _params(self, params: Params | None) -> dict[str, Any]:
        return {"now": self._now} if params is None else {"now": self._now, **params}

    def _run(self, query: str, params: Params | None) -> sqlite3.Cursor:
        try:
            return self.conn.execute(_QUERIES[query], self._params(params))
        except sqlite3.IntegrityError as exc:
            if exc.sqlite_errorname not in _DUPLICATE:
                raise
            raise DuplicateKeyError(str(exc)) from None

    def execute(self, query: str, params: Params | None = None) -> int:
        return self._run(query, params).rowcount

    def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        row: Row | None = self._run(query, params).fetchone()
        return row

    def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        return self._run(query, params).fetchall()

    @contextmanager
    def session(self) -> Iterator[SqliteSession]:
        yield self

    @contextmanager
    def transaction(self) -> Iterator[SqliteSession]:
        yield self


class SqliteConnector(_Values):
    """One SQLite file; the file and its directory are created when missing."""

    def __init__(self, path: Path, *, clock: Clock, busy_timeout_ms: int) -> None:
        self.path = path
        self.clock = clock
        self._busy_timeout_ms = busy_timeout_ms
        self._lock = threading.Lock()
        self.conn = self._connect()
        self._checkpoints = self._checkpointer()

    def _checkpointer(self) -> Checkpointer | None:
        """Checkpoints in a thread of their own (noetl.store._sqlite_checkpoint); when it
        cannot have its connection, the writer's commits checkpoint, as SQLite's default."""
        try:
            checkpoints = Checkpointer(self.path)
        except sqlite3.Error as exc:
            log.warning("SQLite %s: checkpoints stay with the writer (%s)", self.path, exc)
            return None
        with self._lock:
            self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        return checkpoints

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(
                f"SQLite database {self.path} cannot be created: its directory "
                f"{self.path.parent} cannot be made ({exc.strerror or exc}); choose a "
                "database path inside a writable directory"
            ) from exc
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,
                factory=ClockedConnection,
            )
        except sqlite3.Error as exc:
            raise self.unavailable(exc) from exc
        conn.clock = self.clock
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            migrate_sqlite(conn)
        except SchemaTooNewError as exc:
            conn.close()
            raise StoreUnavailableError(f"SQLite database {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            conn.close()
            raise self.unavailable(exc) from exc
        return conn

    def unavailable(self, exc: sqlite3.Error) -> StoreUnavailableError:
        """Name the file and say what to do, instead of a bare sqlite3 error."""
        text = str(exc)
        lowered = text.lower()
        retryable = False
        if "locked" in lowered or "busy" in lowered:
            hint = (
                f"another process held its lock for more than {self._busy_timeout_ms // 1000}"
                " s; stop other noetl processes using this file, or retry"
            )
            retryable = True
        elif "not a database" in lowered or "malformed" in lowered:
            hint = "it is not a usable NoETL database; move the file away or choose another path"
        elif "full" in lowered:
            hint = "the disk is full; free some space"
        elif "readonly" in lowered or "read-only" in lowered:
            hint = "make the file and its directory writable for this user, or choose another path"
        else:
            hint = (
                "check that the path is a file (not a directory) in an existing directory that "
                "this user can write to, or choose another database path"
            )
        return StoreUnavailableError(
            f"SQLite database {self.path} is unavailable ({text}): {hint}", retryable=retryable
        )

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock, with operational errors made readable."""
        with self._lock:
            if self._checkpoints is not None:
                self._checkpoints.committed()
            try:
                yield self.conn
            except sqlite3.OperationalError as exc:
                raise self.unavailable(exc) from exc
            except sqlite3.DatabaseError as exc:
                # Exactly DatabaseError is "file is not a database" and kin; its subclasses
                # (IntegrityError, ProgrammingError...) are bugs and stay as they are.
                if type(exc) is not sqlite3.DatabaseError:
                    raise
                raise self.unavailable(exc) from exc

    @contextmanager
    def in_transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the write lock from its start (BEGIN IMMEDIATE);
        committed when the block ends, rolled back when it raises."""
        with self.use() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def execute(self, query: str, params: Params | None = None) -> int:
        with self.in_transaction() as conn:
            return SqliteSession(conn, self.clock()).execute(query, params)

    def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        with self.use() as conn:
            return SqliteSession(conn, self.clock()).fetch_one(query, params)

    def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        with self.use() as conn:
            return SqliteSession(conn, self.clock()).fetch_all(query, params)

    @contextmanager
    def session(self) -> Iterator[SqliteSession]:
        with self.use() as conn:
            yield SqliteSession(conn, self.clock())

    @contextmanager
    def transaction(self) -> Iterator[SqliteSession]:
        with self.in_transaction() as conn:
            yield SqliteSession(conn, self.clock())

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.stop()
        with self._lock:
            self.conn.close()
