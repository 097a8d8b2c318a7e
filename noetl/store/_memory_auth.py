"""API tokens and the database session store of `MemoryStore` (`.tokens`, `.sessions`):
dicts behind the store's lock, with the same contract as the databases."""

from __future__ import annotations

import threading
from dataclasses import replace

from noetl.auth import ApiToken
from noetl.auth.sessions import HISTORY, Session, SessionConflictError, SessionRevision
from noetl.errors import ConflictError


class MemoryTokens:
    """`TokenStore` in a dict."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._tokens: dict[str, ApiToken] = {}

    def create(self, token: ApiToken) -> None:
        with self._lock:
            taken = token.token_id in self._tokens or any(
                t.token_hash == token.token_hash for t in self._tokens.values()
            )
            if taken:
                raise ConflictError(f"token {token.token_id} already exists")
            self._tokens[token.token_id] = token

    def find(self, token_hash: str) -> ApiToken | None:
        with self._lock:
            return next((t for t in self._tokens.values() if t.token_hash == token_hash), None)

    def get(self, token_id: str) -> ApiToken | None:
        with self._lock:
            return self._tokens.get(token_id)

    def all(self) -> list[ApiToken]:
        with self._lock:
            return sorted(self._tokens.values(), key=lambda t: (t.created_at, t.token_id))

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None or token.revoked:
                return token
            token = self._tokens[token_id] = replace(token, revoked=True, revoked_at=now)
            return token

    def touch(self, token_id: str, now: float) -> None:
        with self._lock:
            token = self._tokens.get(token_id)
            if token is not None:
                self._tokens[token_id] = replace(token, last_used_at=now)


class MemorySessions:
    """`SessionStore` in a dict of revision lists."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._revisions: dict[str, list[SessionRevision]] = {}

    def _append(self, key: str, entry: SessionRevision) -> None:
        kept = self._revisions.setdefault(key, [])
        kept.append(entry)
        del kept[:-HISTORY]

    def _latest(self, key: str) -> SessionRevision | None:
        kept = self._revisions.get(key)
        return kept[-1] if kept else None

    def create(self, session: Session) -> Session:
        with self._lock:
            now = session.created_at
            for key in [k for k, v in self._revisions.items() if _expires(v) < now]:
                del self._revisions[key]
            latest = self._latest(session.key)
            if latest is not None and latest.operation == "put":
                raise SessionConflictError("a session with this key exists")
            created = replace(session, revision=1 if latest is None else latest.revision + 1)
            self._append(session.key, SessionRevision(created.revision, "put", now, created))
            return created

    def get(self, key: str) -> Session | None:
        with self._lock:
            latest = self._latest(key)
            return None if latest is None else latest.session

    def touch(self, session: Session, now: float) -> Session:
        with self._lock:
            latest = self._latest(session.key)
            if latest is None or latest.operation != "put" or latest.revision != session.revision:
                raise SessionConflictError(
                    f"the session changed since revision {session.revision}; read it again"
                )
            touched = replace(session.touched(now), revision=latest.revision + 1)
            self._append(session.key, SessionRevision(touched.revision, "put", now, touched))
            return touched

    def delete(self, key: str, now: float) -> bool:
        with self._lock:
            latest = self._latest(key)
            if latest is None or latest.session is None:
                return False
            self._append(key, SessionRevision(latest.revision + 1, "delete", now, None))
            return True

    def history(self, key: str) -> list[SessionRevision]:
        with self._lock:
            return list(self._revisions.get(key, ()))

    def close(self) -> None:
        """Nothing to release."""


def _expires(revisions: list[SessionRevision]) -> float:
    """When a session's records may go: its expiry (fixed when it was created)."""
    return max(
        (r.session.expires_at for r in revisions if r.session is not None), default=float("inf")
    )
