"""API tokens (`store.tokens`) and the database session store (`store.sessions`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from noetl.auth import ApiToken, Role
from noetl.auth.sessions import HISTORY, Session, SessionConflictError, SessionRevision
from noetl.errors import ConflictError
from noetl.store.connector import Connector, DuplicateKeyError, Row

# The time columns of a token row (created, last used, expires, revoked) and of a session
# row (created, expires, last activity, written), nullable ones included.
_TOKEN_TIMES = (4, 5, 6, 8)
_SESSION_TIMES = (5, 6, 7, 9)


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


def _epochs(db: Connector, row: Row, columns: tuple[int, ...]) -> Row:
    values = list(row)
    for index in columns:
        if values[index] is not None:
            values[index] = db.epoch(values[index])
    return tuple(values)


def _ts(db: Connector, seconds: float | None) -> Any:
    return None if seconds is None else db.ts(seconds)


class Tokens:
    """`TokenStore` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _token(self, row: Row | None) -> ApiToken | None:
        return None if row is None else token_from_row(_epochs(self._db, row, _TOKEN_TIMES))

    def create(self, token: ApiToken) -> None:
        db = self._db
        params = {
            "token_id": token.token_id,
            "name": token.name,
            "role": token.role.value,
            "token_hash": token.token_hash,
            "created_at": db.ts(token.created_at),
            "last_used_at": _ts(db, token.last_used_at),
            "expires_at": _ts(db, token.expires_at),
            "revoked": token.revoked,
            "revoked_at": _ts(db, token.revoked_at),
        }
        try:
            with db.transaction() as tx:
                tx.execute("insert_token", params)
        except DuplicateKeyError:
            raise ConflictError(f"token {token.token_id} already exists") from None

    def find(self, token_hash: str) -> ApiToken | None:
        return self._token(self._db.fetch_one("token_by_hash", {"value": token_hash}))

    def get(self, token_id: str) -> ApiToken | None:
        return self._token(self._db.fetch_one("token_by_id", {"value": token_id}))

    def all(self) -> list[ApiToken]:
        rows = self._db.fetch_all("list_tokens")
        return [token_from_row(_epochs(self._db, row, _TOKEN_TIMES)) for row in rows]

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        params = {"value": token_id, "at": self._db.ts(now)}
        with self._db.transaction() as tx:
            tx.execute("revoke_token", params)
            row = tx.fetch_one("token_by_id", params)
        return self._token(row)

    def touch(self, token_id: str, now: float) -> None:
        self._db.execute("touch_token", {"token_id": token_id, "at": self._db.ts(now)})


class Sessions:
    """`SessionStore` over a connector: one row per revision. Two writers that read the
    same revision both try to insert the next one; the primary key lets one win (SQLite's
    transactions, holding the write lock from their start, never race)."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    @staticmethod
    def _latest(db: Connector, key: str) -> SessionRevision | None:
        row = db.fetch_one("session_revisions", {"key": key, "limit": 1})
        return None if row is None else revision_from_row(_epochs(db, row, _SESSION_TIMES))

    @staticmethod
    def _write(db: Connector, session: Session, revision: int, operation: str, at: float) -> None:
        db.execute(
            "insert_session",
            {
                "key": session.key,
                "revision": revision,
                "operation": operation,
                "token_id": session.token_id,
                "role": session.role.value,
                "created_at": db.ts(session.created_at),
                "expires_at": db.ts(session.expires_at),
                "last_activity_at": db.ts(session.last_activity_at),
                "client": session.client,
                "written_at": db.ts(at),
            },
        )
        db.execute("trim_session", {"key": session.key, "oldest": revision - HISTORY})

    def create(self, session: Session) -> Session:
        try:
            with self._db.transaction() as tx:
                # Expired sessions are dropped here: expiry is fixed when a session is made.
                tx.execute("drop_expired_sessions", {"before": tx.ts(session.created_at)})
                latest = self._latest(tx, session.key)
                if latest is not None and latest.operation == "put":
                    raise SessionConflictError("a session with this key exists")
                revision = 1 if latest is None else latest.revision + 1
                self._write(tx, session, revision, "put", session.created_at)
        except DuplicateKeyError:
            raise SessionConflictError("a session with this key exists") from None
        return replace(session, revision=revision)

    def get(self, key: str) -> Session | None:
        latest = self._latest(self._db, key)
        return None if latest is None else latest.session

    def touch(self, session: Session, now: float) -> Session:
        touched = session.touched(now)
        stale = SessionConflictError(
            f"the session changed since revision {session.revision}; read it again"
        )
        try:
            with self._db.transaction() as tx:
                latest = self._latest(tx, session.key)
                if (
                    latest is None
                    or latest.operation != "put"
                    or latest.revision != session.revision
                ):
                    raise stale
                revision = latest.revision + 1
                self._write(tx, touched, revision, "put", now)
        except DuplicateKeyError:
            raise stale from None
        return replace(touched, revision=revision)

    def delete(self, key: str, now: float) -> bool:
        for _ in range(3):  # a touch that won the race for the next revision: read again
            try:
                with self._db.transaction() as tx:
                    latest = self._latest(tx, key)
                    if latest is None or latest.session is None:
                        return False
                    self._write(tx, latest.session, latest.revision + 1, "delete", now)
                return True
            except DuplicateKeyError:
                continue
        raise SessionConflictError("the session kept changing while it was deleted; retry")

    def history(self, key: str) -> list[SessionRevision]:
        rows = self._db.fetch_all("session_revisions", {"key": key, "limit": HISTORY})
        return [revision_from_row(_epochs(self._db, row, _SESSION_TIMES)) for row in reversed(rows)]

    def close(self) -> None:
        """Nothing to release: the store owns the connections."""
