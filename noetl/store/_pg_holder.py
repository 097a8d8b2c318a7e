"""Input holders on PostgreSQL: a session-level advisory lock on a connection of its own.

A holder (`PostgresStore.open_holder`) opens one connection outside the pool and takes
the advisory lock (HOLDER_LOCK_SPACE, hashtext(token)) on it for as long as it lives. Its
claims run on that same connection, so a holder claims only while its lock is held. The
lock goes when the session ends, whatever ends it: the process dies (kill -9 included: the
server closes the session when the socket closes), the connection is lost, the database
restarts. Any orchestrator's `release_orphaned_inputs` then finds the holder's lock free
(`pg_try_advisory_xact_lock` succeeds) and frees what it held. A holder that is alive but
slow keeps its session, so its lock, so its inputs, until their hold expires.

A holder whose session ended while its process lives (connection lost) learns it at its
next claim (the connection is broken: `alive()` is False) and the orchestrator opens a new
holder, with a new token: a gone token never claims again. A decision it was still
committing is fenced by the commit (the expected sequence number, and inputs consumed
once), so nothing is decided twice.

This needs a session that lasts: a direct connection, or a pooler in session mode (as
LISTEN does); behind a transaction-mode pooler the lock would not stay with the holder.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from noetl.store._holders import TOKEN_PATTERN, new_holder
from noetl.store.base import StoreUnavailableError

Conn = psycopg.Connection[tuple[Any, ...]]

# The two-key advisory lock space of input holders (the bytes of "noeh"); the playbook
# catalog locks in "noep", migrations in a one-key lock.
HOLDER_LOCK_SPACE = 0x6E6F6568
_TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(%s))"
_UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(%s))"
# The tokens of holders that hold inputs and are gone: those whose lock this statement
# can take (for the moment of its transaction). One scan of the held rows, no write: the
# inputs are freed by FREE_INPUTS only when a holder is gone. A gone token never claims
# again, so freeing its inputs in a second statement races with nobody.
GONE_HOLDERS = f"""
SELECT token FROM (
    SELECT DISTINCT claimed_by AS token FROM inbox
    WHERE claimed_until > now() AND claimed_by ~ '{TOKEN_PATTERN}'
) AS held
WHERE pg_try_advisory_xact_lock({HOLDER_LOCK_SPACE}, hashtext(token))
"""
FREE_INPUTS = """
UPDATE inbox SET claimed_by = NULL, claimed_until = NULL
WHERE claimed_until > now() AND claimed_by = ANY(%s::text[])
RETURNING id
"""
# Another live holder whose token hashes to the same key: try another token.
_ATTEMPTS = 5


class PgHolder:
    """One holder: its token and the connection that holds its lock."""

    def __init__(
        self,
        conninfo: str,
        owner: str,
        unavailable: Callable[[BaseException], StoreUnavailableError],
    ) -> None:
        self._unavailable = unavailable
        self._lock = threading.Lock()
        for _ in range(_ATTEMPTS):
            token = new_holder(owner).token
            try:
                conn = psycopg.connect(conninfo, autocommit=True, application_name="noetl holder")
            except psycopg.OperationalError as exc:
                raise unavailable(exc) from None
            try:
                row = conn.execute(_TRY_LOCK, (HOLDER_LOCK_SPACE, token)).fetchone()
            except psycopg.Error as exc:
                conn.close()
                raise unavailable(exc) from None
            if row is not None and row[0]:
                self.token = token
                self._conn: Conn = conn
                return
            conn.close()
        raise StoreUnavailableError(
            f"could not take an input holder's lock in {_ATTEMPTS} attempts", retryable=True
        )

    def alive(self) -> bool:
        """False once the session is known ended (closed, or a call on it failed)."""
        return not (self._conn.closed or self._conn.broken)

    def close(self) -> None:
        """Give the lock up, then end the session (a closed session's backend releases its
        locks a moment after the client has gone: unlocking first makes the holder gone
        by the time `close` returns)."""
        with self._lock:
            if self.alive():
                with contextlib.suppress(psycopg.Error):
                    self._conn.execute(_UNLOCK, (HOLDER_LOCK_SPACE, self.token))
            self._conn.close()

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """The holder's own connection, for its claims; StoreUnavailableError (retryable)
        once its session has ended."""
        with self._lock:
            if not self.alive():
                raise StoreUnavailableError(
                    f"input holder {self.token} lost its session; open a new holder",
                    retryable=True,
                )
            try:
                yield self._conn
            except psycopg.OperationalError as exc:
                raise self._unavailable(exc) from None
