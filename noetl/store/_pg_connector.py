"""The PostgreSQL connector: a psycopg 3 connection pool, the named queries of
`sql/postgres.sql`, and what PostgreSQL stores differently (timestamptz, NUL escaping).

Errors: anything operational (server down, connection refused or lost, bad password, a
pool with no free connection) becomes StoreUnavailableError naming host, port and
database, never the password; a lost connection is retryable, and the pool replaces
broken connections, so a restarted server is picked up again without a restart of ours.
"""

from __future__ import annotations

import getpass
import os
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg import errors as pg_errors
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from noetl.core import StoreUnavailableError
from noetl.errors import ConfigError
from noetl.store._pg_listen import CONNECT_TIMEOUT_S
from noetl.store._pg_nul import json_out, jsonb_loads, pg_dumps, text_in, text_out
from noetl.store.connector import DuplicateKeyError, Params, Row
from noetl.store.queries import QUERIES

Conn = psycopg.Connection[tuple[Any, ...]]

RECONNECT_S = 5.0
# A connection that finished a statement this recently is trusted without a round trip;
# one idle for longer is checked on checkout (it may have died with a server restart).
FRESH_S = 1.0
_last_used: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

_QUERIES = QUERIES["postgres"]

# A commit's statements are planned once per connection, not on every call (see
# `pipelined_transaction`).
GENERIC_PLANS = b"SET LOCAL plan_cache_mode = force_generic_plan"


def _configure(conn: Any) -> None:
    """Each pooled connection reads `jsonb` with NUL characters restored (only the store's
    own connections: the postgres tool's users get psycopg's usual loader)."""
    set_json_loads(jsonb_loads, conn)


def _check_if_idle(conn: Any) -> None:
    """The pool's checkout check, skipped for a connection used within FRESH_S: the check
    costs a round trip on every call, and a connection that just worked is very likely alive
    (if not, the call fails as retryable and the pool replaces it)."""
    if time.monotonic() - _last_used.get(conn, float("-inf")) < FRESH_S:
        return
    ConnectionPool.check_connection(conn)


@contextmanager
def pipelined_transaction(conn: Conn) -> Iterator[Conn]:
    """One transaction on an autocommit connection already in pipeline mode, whose BEGIN
    and COMMIT travel with its statements. psycopg's `transaction()` inside a pipeline
    syncs after its BEGIN and again at its end: three round trips more per commit (five
    instead of two for a worker's continuation). On an exception nothing is committed:
    the pipeline's sync leaves the transaction open (or failed) and `PgConnector.connection`
    rolls it back before the connection goes back to the pool.

    The transaction's statements run on generic plans. A commit's writes take lists of
    rows, whose sizes PostgreSQL's estimate leaves out of a generic plan, so it kept
    planning them afresh on every call: about 0.4 ms of the database's CPU for the
    writes alone, more than running them. Their plans are lookups by key either way.
    `SET LOCAL` travels with BEGIN and ends with the transaction."""
    conn.execute(b"BEGIN")
    conn.execute(GENERIC_PLANS)
    yield conn
    conn.execute(b"COMMIT")


# --- where the database is, without the password -----------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """What a DSN names, for messages: host, port, database and user, never the password."""

    host: str
    port: str
    dbname: str
    user: str
    secrets: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"PostgreSQL database {self.dbname!r} at {self.host}:{self.port}"

    def url(self) -> str:
        """A URL to show people: the DSN without its password."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def unavailable(self, exc: BaseException, *, retryable: bool = True) -> StoreUnavailableError:
        """A readable StoreUnavailableError for a psycopg error (password removed)."""
        text = self.scrub(" ".join(str(exc).split())) or type(exc).__name__
        lowered = text.lower()
        if "authentication failed" in lowered or "password" in lowered or "role" in lowered:
            hint = f"check the user name ({self.user}) and password given in the DSN"
            retryable = False
        elif "database" in lowered and "does not exist" in lowered:
            hint = "create the database (createdb) or fix the database name in the DSN"
            retryable = False
        else:
            hint = (
                "check that PostgreSQL is running and reachable from here, and that the "
                "host and port in the DSN are right"
            )
        return StoreUnavailableError(f"{self} is unavailable ({text}): {hint}", retryable=retryable)


def parse_dsn(dsn: str) -> tuple[str, Target]:
    """The connection string to use (with noetl defaults) and its Target. ConfigError when
    the DSN cannot be parsed; the message never repeats the DSN (it may hold a password)."""
    try:
        params: dict[str, Any] = pg_conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        raise ConfigError(
            "the PostgreSQL DSN cannot be parsed; expected "
            "postgresql://user:password@host:5432/database (or key=value pairs)"
        ) from None
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "noetl")
    env = os.environ
    user = str(params.get("user") or env.get("PGUSER") or getpass.getuser())
    secrets = tuple(
        str(s) for s in (params.get("password"), env.get("PGPASSWORD")) if s and len(str(s)) > 1
    )
    target = Target(
        host=str(params.get("host") or params.get("hostaddr") or env.get("PGHOST") or "localhost"),
        port=str(params.get("port") or env.get("PGPORT") or "5432"),
        dbname=str(params.get("dbname") or env.get("PGDATABASE") or user),
        user=user,
        secrets=secrets,
    )
    return pg_conninfo.make_conninfo(**params), target


def connect(dsn: str) -> tuple[Conn, Target]:
    """One autocommit connection (for migrations and tools); StoreUnavailableError if the
    database cannot be reached."""
    conninfo, target = parse_dsn(dsn)
    try:
        return psycopg.connect(conninfo, autocommit=True), target
    except psycopg.OperationalError as exc:
        raise target.unavailable(exc) from None


# Notifications are sent AFTER the writes they announce commit, each in a transaction of
# its own (pipelined: no extra round trip). A NOTIFY holds a lock on the notification
# queue from the commit of its transaction to the end of it, so notifying inside the
# writing transaction would serialize every writer through its WAL flush. A process that
# dies between the two loses the wake-up only: waiters poll.
NOTIFY_TASKS = "SELECT pg_notify('noetl_tasks', '')"
NOTIFY_INPUTS = "SELECT pg_notify('noetl_inputs', '')"
NOTIFY = {"tasks": NOTIFY_TASKS, "inputs": NOTIFY_INPUTS}


def ts(seconds: float) -> datetime:
    """Epoch seconds -> timestamptz (rounded to the microsecond, as PostgreSQL keeps it)."""
    return datetime.fromtimestamp(seconds, UTC)


def columns(
    rows: Sequence[tuple[Any, ...]], *, time_columns: tuple[int, ...] = ()
) -> list[list[Any]]:
    """Rows as one list per column (the arrays of an `unnest` statement); the columns at
    `time_columns` hold epoch seconds, passed as timestamps."""
    columns: list[list[Any]] = [list(column) for column in zip(*rows, strict=True)]
    for index in time_columns:
        columns[index] = [ts(value) for value in columns[index]]
    return columns


def epoch(value: datetime) -> float:
    return value.timestamp()


def epoch_or_none(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class _Values:
    """How PostgreSQL holds times, JSON and text (see `noetl.store.connector`)."""

    dialect = "postgres"

    def ts(self, seconds: float) -> Any:
        return ts(seconds)

    def epoch(self, value: Any) -> float:
        return float(value.timestamp())

    def json_in(self, value: Any) -> str:
        return pg_dumps(value)

    def text_in(self, text: str) -> str:
        return text_in(text)

    def text_out(self, text: str) -> str:
        return text_out(text)

    def json_value(self, value: Any) -> Any:
        return value

    def json_text_out(self, text: str) -> str:
        return json_out(text)


class PgSession(_Values):
    """The connector's calls on one connection (in a transaction when `in_transaction`);
    notifications wait for the end of the transaction."""

    def __init__(self, conn: Conn, *, in_transaction: bool) -> None:
        self.conn = conn
        self._in_transaction = in_transaction
        self.pending: set[str] = set()

    def _run(self, query: str, params: Params | None) -> psycopg.Cursor[Row]:
        try:
            return self.conn.execute(_QUERIES[query], params)
        except pg_errors.UniqueViolation as exc:
            raise DuplicateKeyError(str(exc)) from None

    def execute(self, query: str, params: Params | None = None) -> int:
        return self._run(query, params).rowcount

    def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        return self._run(query, params).fetchone()

    def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        return self._run(query, params).fetchall()

    @contextmanager
    def session(self) -> Iterator[PgSession]:
        yield self

    @contextmanager
    def transaction(self) -> Iterator[PgSession]:
        with self.conn.transaction():
            yield self

    def notify(self, channel: str) -> None:
        if self._in_transaction:
            self.pending.add(channel)
        else:
            self.conn.execute(NOTIFY[channel])

    @contextmanager
    def exclusive(self, key: int) -> Iterator[bool]:
        """The session advisory lock `key` on this session's connection, for the block."""
        row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        mine = row is not None and bool(row[0])
        try:
            yield mine
        finally:
            if mine:
                self.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


class PgConnector(_Values):
    """The store's pool of autocommit connections; thread-safe."""

    def __init__(
        self, conninfo: str, target: Target, *, min_size: int, max_size: int, timeout: float
    ) -> None:
        self.conninfo = conninfo
        self.target = target
        self._timeout = timeout
        self._max_size = max_size
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            name="noetl",
            # The store's statements are a fixed set, each run again and again: prepared at
            # their first use, not their sixth (a new connection's first five commits
            # cost the database twice the CPU: parsed and planned anew).
            kwargs={"autocommit": True, "prepare_threshold": 0},
            configure=_configure,
            # A connection the server dropped (restart, failover) is replaced on checkout.
            check=_check_if_idle,
            timeout=timeout,
            # Retry a lost connection with backoff for a few seconds only, then let demand
            # grow the pool afresh: after a long outage it is back at once, not minutes on.
            reconnect_timeout=RECONNECT_S,
            num_workers=2,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout:
            self._pool.close()
            self._probe()
            raise StoreUnavailableError(
                f"{target}: the connection pool did not open within {timeout:g} s",
                retryable=True,
            ) from None

    def close(self) -> None:
        self._pool.close()

    def execute(self, query: str, params: Params | None = None) -> int:
        with self.connection() as conn:
            return PgSession(conn, in_transaction=False).execute(query, params)

    def fetch_one(self, query: str, params: Params | None = None) -> Row | None:
        with self.connection() as conn:
            return PgSession(conn, in_transaction=False).fetch_one(query, params)

    def fetch_all(self, query: str, params: Params | None = None) -> list[Row]:
        with self.connection() as conn:
            return PgSession(conn, in_transaction=False).fetch_all(query, params)

    @contextmanager
    def session(self) -> Iterator[PgSession]:
        with self.connection() as conn:
            yield PgSession(conn, in_transaction=False)

    @contextmanager
    def transaction(self) -> Iterator[PgSession]:
        """One transaction on one pooled connection; its notifications go out after it
        commits (in a transaction of their own, see NOTIFY)."""
        with self.connection() as conn:
            session = PgSession(conn, in_transaction=True)
            with conn.transaction():
                yield session
            for channel in sorted(session.pending):
                conn.execute(NOTIFY[channel])

    def notify(self, channel: str) -> None:
        with self.connection() as conn:
            conn.execute(NOTIFY[channel])

    @contextmanager
    def exclusive(self, key: int) -> Iterator[bool]:
        """The session advisory lock `key` on a pooled connection held for the block (the
        block's own calls run on other connections)."""
        with (
            self.connection() as conn,
            PgSession(conn, in_transaction=False).exclusive(key) as mine,
        ):
            yield mine

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled autocommit connection, with operational errors made readable."""
        conn = self._getconn()
        try:
            with conn:
                yield conn
        except psycopg.OperationalError as exc:
            # Also a connection lost mid-call: the pool drops it, a retry gets a new one.
            raise self.target.unavailable(exc) from None
        except psycopg.DataError as exc:
            # A value JSONB or text cannot hold: the caller's data, as with a bad seq.
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{self.target} cannot store a value: {reason}") from None
        finally:
            _last_used[conn] = time.monotonic()
            self._pool.putconn(conn)

    @contextmanager
    def in_transaction(self) -> Iterator[Conn]:
        with self.connection() as conn, conn.transaction():
            yield conn

    def _getconn(self) -> Conn:
        """A connection from the pool. When none comes within a second, ask the server
        directly: if it is down, fail now (retryable) instead of after the full timeout."""
        first = min(1.0, self._timeout)
        try:
            try:
                return self._pool.getconn(timeout=first)
            except PoolTimeout:
                pass
            self._probe()
            return self._pool.getconn(timeout=max(self._timeout - first, 0.1))
        except PoolTimeout:
            raise StoreUnavailableError(
                f"{self.target} answers, but no pooled connection came free within "
                f"{self._timeout:g} s (all {self._max_size} busy, or reconnecting after an "
                "outage); retry, or give the store a larger pool",
                retryable=True,
            ) from None
        except PoolClosed:
            raise StoreUnavailableError(f"the store for {self.target} is closed") from None

    def _probe(self) -> None:
        """Raise StoreUnavailableError (with the server's reason) if it cannot be reached."""
        try:
            psycopg.connect(self.conninfo, autocommit=True, connect_timeout=2).close()
        except psycopg.Error as exc:
            raise self.target.unavailable(exc) from None
