"""Login sessions over a `SessionStore`: open one for an API token, check one, end one.

A session token is `noetls_` and 32 random bytes; the store keeps only its SHA-256 digest
(the key). A session expires `ttl_s` after it was opened, and never after the token it
came from; its expiry does not move, so a stolen session token is good for that long at
most. Checking a session records its activity at most once a minute (`touch_every_s`),
so validating costs one read, not a write.
"""

from __future__ import annotations

from noetl.auth import SESSION_PREFIX, ApiToken, hash_secret, new_secret
from noetl.auth.sessions import Session, SessionConflictError, SessionRevision, SessionStore

__all__ = ["DEFAULT_TTL_S", "TOUCH_EVERY_S", "Sessions"]

DEFAULT_TTL_S = 86400.0
TOUCH_EVERY_S = 60.0


class Sessions:
    """Login sessions kept in `store` (database or NATS)."""

    def __init__(
        self,
        store: SessionStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        touch_every_s: float = TOUCH_EVERY_S,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.touch_every_s = touch_every_s

    @staticmethod
    def key(secret: str) -> str:
        """The store key of a session token."""
        return hash_secret(secret)

    def login(
        self, token: ApiToken, *, now: float, client: str | None = None
    ) -> tuple[str, Session]:
        """Open a session for `token` (checked by the caller): (the session token, shown
        once; the session)."""
        secret = new_secret(SESSION_PREFIX)
        expires_at = now + self.ttl_s
        if token.expires_at is not None:
            expires_at = min(expires_at, token.expires_at)
        session = Session(
            key=self.key(secret),
            token_id=token.token_id,
            role=token.role,
            created_at=now,
            expires_at=expires_at,
            last_activity_at=now,
            client=client,
        )
        return secret, self.store.create(session)

    def check(self, secret: str, now: float) -> Session | None:
        """The live session of `secret`, or None (not a session token, unknown, logged
        out or expired). Records the activity when the last record is a minute old."""
        if not secret.startswith(SESSION_PREFIX):
            return None
        session = self.store.get(self.key(secret))
        if session is None or session.expired(now):
            return None
        if now - session.last_activity_at >= self.touch_every_s:
            try:
                session = self.store.touch(session, now)
            except SessionConflictError:
                # Another request touched it (or logged it out) first: read it again.
                session = self.store.get(session.key)
                if session is None or session.expired(now):
                    return None
        return session

    def logout(self, secret: str, now: float) -> bool:
        """End the session of `secret`; False when there is no live one."""
        if self.check(secret, now) is None:
            return False
        return self.store.delete(self.key(secret), now)

    def history(self, secret: str) -> list[SessionRevision]:
        """The last revisions of the session of `secret`, oldest first."""
        return self.store.history(self.key(secret))

    def close(self) -> None:
        self.store.close()
