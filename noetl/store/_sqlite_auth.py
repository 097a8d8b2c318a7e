"""API tokens and the database session store on SQLite (`SqliteStore.tokens`, `.sessions`).

Both run on the store's one connection, under its lock, in its transactions."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from noetl.auth import ApiToken, Role
from noetl.auth.sessions import HISTORY, Session, SessionConflictError, SessionRevision
from noetl.errors import ConflictError

Use = Callable[[], AbstractContextManager[sqlite3.Connection]]

TOKEN_COLUMNS = (
    "token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked, revoked_at"
)
SESSION_COLUMNS = (
    "session_key, revision, operation, token_id, role, created_at, expires_at, "
    "last_activity_at, client, written_at"
)


def token_from_row(row: tuple[Any, ...]) -> ApiToken:
    return ApiToken(
        token_id=row[0],
        name=row[1],
        role=Role(row[2]),
        token_hash=row[3],
        created_at=row[4],
        last_used_at=row[5],
        expires_at=row[6],
        revoked=bool(row[7]),
        revoked_at=row[8],
    )


class SqliteTokens:
    """`TokenStore` on the store's connection."""

    def __init__(self, use: Use, transaction: Use) -> None:
        self._use = use
        self._transaction = transaction

    def create(self, token: ApiToken) -> None:
        with self._transaction() as conn:
            try:
                conn.execute(
                    f"INSERT INTO api_token ({TOKEN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        token.token_id,
                        token.name,
                        token.role.value,
                        token.token_hash,
                        token.created_at,
                        token.last_used_at,
                        token.expires_at,
                        int(token.revoked),
                        token.revoked_at,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise ConflictError(f"token {token.token_id} already exists") from exc

    def _one(self, where: str, value: str) -> ApiToken | None:
        with self._use() as conn:
            row = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token WHERE {where} = ?", (value,)
            ).fetchone()
        return None if row is None else token_from_row(row)

    def find(self, token_hash: str) -> ApiToken | None:
        return self._one("token_hash", token_hash)

    def get(self, token_id: str) -> ApiToken | None:
        return self._one("token_id", token_id)

    def all(self) -> list[ApiToken]:
        with self._use() as conn:
            rows = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token ORDER BY created_at, token_id"
            ).fetchall()
        return [token_from_row(row) for row in rows]

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE api_token SET revoked = 1, revoked_at = ? "
                "WHERE token_id = ? AND revoked = 0",
                (now, token_id),
            )
            row = conn.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_token WHERE token_id = ?", (token_id,)
            ).fetchone()
        return None if row is None else token_from_row(row)

    def touch(self, token_id: str, now: float) -> None:
        with self._transaction() as conn:
            conn.execute(
                "UPDATE api_token SET last_used_at = ? WHERE token_id = ?", (now, token_id)
            )


def _session_row(session: Session, revision: int, operation: str, at: float) -> tuple[Any, ...]:
    return (
        session.key,
        revision,
        operation,
        session.token_id,
        session.role.value,
        session.created_at,
        session.expires_at,
        session.last_activity_at,
        session.client,
        at,
    )


def revision_from_row(row: tuple[Any, ...]) -> SessionRevision:
    """A `session` row (SESSION_COLUMNS, epoch seconds) as a history entry."""
    key, revision, operation = row[0], int(row[1]), row[2]
    session = None
    if operation == "put":
        session = Session(
            key=key,
            token_id=row[3],
            role=Role(row[4]),
            created_at=float(row[5]),
            expires_at=float(row[6]),
            last_activity_at=float(row[7]),
            client=row[8],
            revision=revision,
        )
    return SessionRevision(revision, operation, float(row[9]), session)


_INSERT_SESSION = f"INSERT INTO session ({SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_LATEST = f"SELECT {SESSION_COLUMNS} FROM session WHERE session_key = ? ORDER BY revision DESC"


class SqliteSessions:
    """`SessionStore` on the store's connection: one row per revision."""

    def __init__(self, use: Use, transaction: Use) -> None:
        self._use = use
        self._transaction = transaction

    @staticmethod
    def _latest(conn: sqlite3.Connection, key: str) -> SessionRevision | None:
        row = conn.execute(f"{_LATEST} LIMIT 1", (key,)).fetchone()
        return None if row is None else revision_from_row(row)

    @staticmethod
    def _write(
        conn: sqlite3.Connection, session: Session, revision: int, operation: str, at: float
    ) -> None:
        conn.execute(_INSERT_SESSION, _session_row(session, revision, operation, at))
        conn.execute(
            "DELETE FROM session WHERE session_key = ? AND revision <= ?",
            (session.key, revision - HISTORY),
        )

    def create(self, session: Session) -> Session:
        with self._transaction() as conn:
            # Expired sessions are dropped here: expiry is fixed when a session is created.
            conn.execute("DELETE FROM session WHERE expires_at < ?", (session.created_at,))
            latest = self._latest(conn, session.key)
            if latest is not None and latest.operation == "put":
                raise SessionConflictError("a session with this key exists")
            revision = 1 if latest is None else latest.revision + 1
            self._write(conn, session, revision, "put", session.created_at)
        return replace(session, revision=revision)

    def get(self, key: str) -> Session | None:
        with self._use() as conn:
            latest = self._latest(conn, key)
        return None if latest is None else latest.session

    def touch(self, session: Session, now: float) -> Session:
        touched = session.touched(now)
        with self._transaction() as conn:
            latest = self._latest(conn, session.key)
            if latest is None or latest.operation != "put" or latest.revision != session.revision:
                raise SessionConflictError(
                    f"the session changed since revision {session.revision}; read it again"
                )
            revision = latest.revision + 1
            self._write(conn, touched, revision, "put", now)
        return replace(touched, revision=revision)

    def delete(self, key: str, now: float) -> bool:
        with self._transaction() as conn:
            latest = self._latest(conn, key)
            if latest is None or latest.session is None:
                return False
            self._write(conn, latest.session, latest.revision + 1, "delete", now)
        return True

    def history(self, key: str) -> list[SessionRevision]:
        with self._use() as conn:
            rows = conn.execute(f"{_LATEST} LIMIT ?", (key, HISTORY)).fetchall()
        return [revision_from_row(row) for row in reversed(rows)]

    def close(self) -> None:
        """Nothing to release: the store owns the connection."""
