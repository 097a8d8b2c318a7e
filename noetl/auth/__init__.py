"""Who may call the API: roles, API tokens and the principal a request acts as.

    Role            viewer < operator < admin (each allows what the ones below it allow)
    ApiToken        a stored token: its id, name, role, dates, revoked flag and HASH
    TokenStore      the port the stores implement (`store.tokens`)
    issue_token     make a random token, store its hash, return the token (shown once)
    Principal       who a request acts as: a token, a session of a token, or anonymous

Tokens are `noetl_` followed by 32 random bytes (urlsafe base64), so they carry 256 bits
of entropy. They are stored as SHA-256 digests: nobody can guess a token or reverse its
digest, so a slow password hash (bcrypt, argon2) would add nothing but a cost on every
request, and a plain digest can be looked up by index. The token itself is shown once, by
`noetl auth token create`, and never stored, logged or returned again.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "ANONYMOUS",
    "SESSION_PREFIX",
    "TOKEN_PREFIX",
    "ApiToken",
    "Principal",
    "Role",
    "TokenStore",
    "hash_secret",
    "issue_token",
    "new_secret",
]

TOKEN_PREFIX = "noetl_"
# Session tokens (noetl.sessions) look different, so a bearer says which kind it is.
SESSION_PREFIX = "noetls_"
_SECRET_BYTES = 32


class Role(StrEnum):
    VIEWER = "viewer"  # read: every GET route
    OPERATOR = "operator"  # start and cancel executions, replay and discard dead letters
    ADMIN = "admin"  # force-complete steps, configuration and token management

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may (admin > operator > viewer)."""
        return _RANK[self] >= _RANK[needed]


_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def new_secret(prefix: str = TOKEN_PREFIX) -> str:
    """A new random credential: `prefix` and 32 random bytes, urlsafe base64."""
    return prefix + secrets.token_urlsafe(_SECRET_BYTES)


def hash_secret(secret: str) -> str:
    """The SHA-256 digest (hex) under which a credential is stored and looked up."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A stored API token (epoch seconds). `token_hash` is the digest of the token; the
    token itself is never stored."""

    token_id: str
    name: str
    role: Role
    token_hash: str
    created_at: float
    expires_at: float | None = None
    last_used_at: float | None = None
    revoked: bool = False
    revoked_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def usable(self, now: float) -> bool:
        """Neither revoked nor expired."""
        return not self.revoked and not self.expired(now)

    def state(self, now: float) -> str:
        """`active`, `expired` or `revoked`."""
        if self.revoked:
            return "revoked"
        return "expired" if self.expired(now) else "active"

    def summary(self, now: float) -> dict[str, Any]:
        """What `noetl auth token list` shows (never the digest)."""
        return {
            "id": self.token_id,
            "name": self.name,
            "role": self.role.value,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "expires_at": self.expires_at,
            "revoked": self.revoked,
            "revoked_at": self.revoked_at,
            "state": self.state(now),
        }


class TokenStore(Protocol):
    """Where API tokens are kept: the same database as everything else (`store.tokens`)."""

    def create(self, token: ApiToken) -> None:
        """Store a new token; ConflictError if its id or digest is taken."""

    def find(self, token_hash: str) -> ApiToken | None:
        """The token with this digest (revoked and expired ones too), or None."""

    def get(self, token_id: str) -> ApiToken | None:
        """The token with this id, or None."""

    def all(self) -> list[ApiToken]:
        """Every token, oldest first."""

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        """Mark the token revoked (once: a second revoke keeps the first date); the token
        as it now is, or None when there is no such token."""

    def touch(self, token_id: str, now: float) -> None:
        """Record that the token was used at `now` (`last_used_at`)."""


def issue_token(
    tokens: TokenStore,
    *,
    role: Role,
    name: str,
    now: float,
    expires_in_s: float | None = None,
) -> tuple[str, ApiToken]:
    """Create a token: (the token, to show once; its stored record)."""
    secret = new_secret(TOKEN_PREFIX)
    record = ApiToken(
        token_id="tok_" + secrets.token_hex(6),
        name=name,
        role=Role(role),
        token_hash=hash_secret(secret),
        created_at=now,
        expires_at=None if expires_in_s is None else now + expires_in_s,
    )
    tokens.create(record)
    return secret, record


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as. `token_id` is None only when authentication is off."""

    role: Role
    name: str
    token_id: str | None = None
    session_key: str | None = None  # set when the credential was a session

    @property
    def kind(self) -> str:
        """`token`, `session` or `anonymous`."""
        if self.token_id is None:
            return "anonymous"
        return "session" if self.session_key is not None else "token"

    def with_session(self, session_key: str) -> Principal:
        return replace(self, session_key=session_key)


ANONYMOUS = Principal(role=Role.ADMIN, name="anonymous")
