"""The session store port: versioned session records under a key, with history.

A session is what a login with an API token opens (`noetl.sessions.manager`): a record
keyed by the SHA-256 digest of its session token (the token itself is never stored), with
the role of the token it came from, its expiry and its last activity. Every write makes a
new revision; `touch` succeeds only if the record is still at the revision it was read at
(optimistic concurrency, as NATS K/V's `update(key, value, last=revision)`), and the last
`HISTORY` revisions (deletions included) can be read back.

Adapters: `store.sessions` of every Store (the database, the default) and
`noetl.sessions.nats.NatsSessionStore` (a NATS JetStream K/V bucket). One contract suite
(tests/contract/test_session_contract.py) runs against all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from noetl.auth import Role
from noetl.errors import ConflictError

__all__ = [
    "HISTORY",
    "Session",
    "SessionConflictError",
    "SessionRevision",
    "SessionStore",
]

HISTORY = 5  # revisions kept per session, as the NATS bucket's `history`


class SessionConflictError(ConflictError):
    """The session changed (or was deleted) since it was read: its revision is not the
    one the update expected."""


@dataclass(frozen=True, slots=True)
class Session:
    """One revision of a session (epoch seconds). `key` is the digest of its token."""

    key: str
    token_id: str
    role: Role
    created_at: float
    expires_at: float
    last_activity_at: float
    client: str | None = None
    revision: int = 0

    @property
    def session_id(self) -> str:
        """A short public name of the session (a prefix of its key, never the token)."""
        return self.key[:16]

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def touched(self, now: float) -> Session:
        return replace(self, last_activity_at=now)

    def value(self) -> dict[str, Any]:
        """The stored fields (the key and the revision are the store's)."""
        return {
            "token_id": self.token_id,
            "role": self.role.value,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "last_activity_at": self.last_activity_at,
            "client": self.client,
        }

    @classmethod
    def from_value(cls, key: str, revision: int, value: dict[str, Any]) -> Session:
        return cls(
            key=key,
            token_id=str(value["token_id"]),
            role=Role(value["role"]),
            created_at=float(value["created_at"]),
            expires_at=float(value["expires_at"]),
            last_activity_at=float(value["last_activity_at"]),
            client=value.get("client"),
            revision=revision,
        )

    def public(self) -> dict[str, Any]:
        """What the API shows of a session."""
        return {"session_id": self.session_id, "revision": self.revision, **self.value()}


@dataclass(frozen=True, slots=True)
class SessionRevision:
    """One entry of a session's history: a write (`put`, with the session as written)
    or a deletion (`delete`, without one)."""

    revision: int
    operation: Literal["put", "delete"]
    at: float
    session: Session | None = None

    def public(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "operation": self.operation,
            "at": self.at,
            "session": None if self.session is None else self.session.public(),
        }


class SessionStore(Protocol):
    """Versioned session records by key."""

    def create(self, session: Session) -> Session:
        """Store a new session (its first revision; a key whose last revision is a
        deletion may be created again); the session with its revision.
        SessionConflictError when a live session has that key."""

    def get(self, key: str) -> Session | None:
        """The latest revision, or None when there is none or it is a deletion. Expiry is
        the caller's to check (`Session.expired`); a store may also drop expired records
        by itself (NATS: the bucket's TTL)."""

    def touch(self, session: Session, now: float) -> Session:
        """Write `session` with `last_activity_at = now` as a new revision, only if the
        stored latest revision is still `session.revision`; the new revision.
        SessionConflictError otherwise (changed, deleted or gone)."""

    def delete(self, key: str, now: float) -> bool:
        """Record a deletion (it stays in the history); False when there is no live
        session under `key`."""

    def history(self, key: str) -> list[SessionRevision]:
        """The last `HISTORY` revisions, oldest first; empty when there are none."""

    def close(self) -> None:
        """Release what the store holds (a store over the database holds nothing)."""
