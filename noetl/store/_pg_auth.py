"""API tokens and the database session store on PostgreSQL (`PostgresStore.tokens`,
`.sessions`), on the store's connection pool. Times are timestamptz in the database and
epoch seconds outside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from noetl.auth import ApiToken
from noetl.auth.sessions import HISTORY, Session, SessionConflictError, SessionRevision
from noetl.errors import ConflictError
from noetl.store._sqlite_auth import (
    SESSION_COLUMNS,
    TOKEN_COLUMNS,
    revision_from_row,
    token_from_row,
)

Conn = psycopg.Connection[tuple[Any, ...]]
Use = Callable[[], AbstractContextManager[Conn]]


def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _epochs(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(value.timestamp() if isinstance(value, datetime) else value for value in row)


class PgTokens:
    """`TokenStore` on the store's pool."""

    def __init__(self, connection: Use, transaction: Use) -> None:
        self._connection = connection
        self._transaction = transaction

    def create(self, token: ApiToken) -> None:
        try:
            with self._transaction() as conn:
                conn.execute(
                    f"INSERT INTO api_token ({TOKEN_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        token.token_id,
                        token.name,
                        token.role.value,
                        token.token_hash,
                        _ts(token.created_at),
                        _ts(token.last_used_at),
                        _ts(token.expires_at),
                        token.revoked,
                        _ts(token.revoked_at),
                    ),
                )
        except pg_errors.UniqueViolation:
            raise ConflictError(f"token {token.token_id} already exists") from None

    def _one(self, where: str, value: str) -> ApiToken | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token WHERE {where} = %s", (value,)
            ).fetchone()
        return None if row is None else token_from_row(_epochs(row))

    def find(self, token_hash: str) -> ApiToken | None:
        return self._one("token_hash", token_hash)

    def get(self, token_id: str) -> ApiToken | None:
        return self._one("token_id", token_id)

    def all(self) -> list[ApiToken]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token ORDER BY created_at, token_id"
            ).fetchall()
        return [token_from_row(_epochs(row)) for row in rows]

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE api_token SET revoked = true, revoked_at = %s "
                "WHERE token_id = %s AND NOT revoked",
                (_ts(now), token_id),
            )
            row = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token WHERE token_id = %s", (token_id,)
            ).fetchone()
        return None if row is None else token_from_row(_epochs(row))

    def touch(self, token_id: str, now: float) -> None:
        with self._connection() as conn:
            conn.execute(
                "UPDATE api_token SET last_used_at = %s WHERE token_id = %s",
                (_ts(now), token_id),
            )


_INSERT_SESSION = (
    f"INSERT INTO session ({SESSION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_LATEST = f"SELECT {SESSION_COLUMNS} FROM session WHERE session_key = %s ORDER BY revision DESC"


class PgSessions:
    """`SessionStore` on the store's pool: one row per revision. Two writers that read
    the same revision both try to insert the next one; the primary key lets one win."""

    def __init__(self, connection: Use, transaction: Use) -> None:
        self._connection = connection
        self._transaction = transaction

    @staticmethod
    def _latest(conn: Conn, key: str) -> SessionRevision | None:
        row = conn.execute(f"{_LATEST} LIMIT 1", (key,)).fetchone()
        return None if row is None else revision_from_row(_epochs(row))

    @staticmethod
    def _write(conn: Conn, session: Session, revision: int, operation: str, at: float) -> None:
        conn.execute(
            _INSERT_SESSION,
            (
                session.key,
                revision,
                operation,
                session.token_id,
                session.role.value,
                _ts(session.created_at),
                _ts(session.expires_at),
                _ts(session.last_activity_at),
                session.client,
                _ts(at),
            ),
        )
        conn.execute(
            "DELETE FROM session WHERE session_key = %s AND revision <= %s",
            (session.key, revision - HISTORY),
        )

    def create(self, session: Session) -> Session:
        try:
            with self._transaction() as conn:
                # Expired sessions are dropped here: expiry is fixed when a session is made.
                conn.execute(
                    "DELETE FROM session WHERE expires_at < %s", (_ts(session.created_at),)
                )
                latest = self._latest(conn, session.key)
                if latest is not None and latest.operation == "put":
                    raise SessionConflictError("a session with this key exists")
                revision = 1 if latest is None else latest.revision + 1
                self._write(conn, session, revision, "put", session.created_at)
        except pg_errors.UniqueViolation:
            raise SessionConflictError("a session with this key exists") from None
        return replace(session, revision=revision)

    def get(self, key: str) -> Session | None:
        with self._connection() as conn:
            latest = self._latest(conn, key)
        return None if latest is None else latest.session

    def touch(self, session: Session, now: float) -> Session:
        touched = session.touched(now)
        stale = SessionConflictError(
            f"the session changed since revision {session.revision}; read it again"
        )
        try:
            with self._transaction() as conn:
                latest = self._latest(conn, session.key)
                if (
                    latest is None
                    or latest.operation != "put"
                    or latest.revision != session.revision
                ):
                    raise stale
                revision = latest.revision + 1
                self._write(conn, touched, revision, "put", now)
        except pg_errors.UniqueViolation:
            raise stale from None
        return replace(touched, revision=revision)

    def delete(self, key: str, now: float) -> bool:
        for _ in range(3):  # a touch that won the race for the next revision: read again
            try:
                with self._transaction() as conn:
                    latest = self._latest(conn, key)
                    if latest is None or latest.session is None:
                        return False
                    self._write(conn, latest.session, latest.revision + 1, "delete", now)
                return True
            except pg_errors.UniqueViolation:
                continue
        raise SessionConflictError("the session kept changing while it was deleted; retry")

    def history(self, key: str) -> list[SessionRevision]:
        with self._connection() as conn:
            rows = conn.execute(f"{_LATEST} LIMIT %s", (key, HISTORY)).fetchall()
        return [revision_from_row(_epochs(row)) for row in reversed(rows)]

    def close(self) -> None:
        """Nothing to release: the store owns the pool."""
