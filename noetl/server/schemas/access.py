"""Bodies about who may call the API: sessions, API tokens and stored credentials."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from noetl.server.schemas.common import Request, Response


class SessionOut(Response):
    """A session (never its token): `session_id` is a public prefix of its key."""

    session_id: str
    revision: int
    token_id: str
    role: str
    created_at: float
    expires_at: float
    last_activity_at: float
    client: str | None = None


class SessionCreated(SessionOut):
    session_token: str = Field(
        description="Send as `Authorization: Bearer <session_token>`; shown this once"
    )


class SessionEnded(Response):
    session_id: str
    deleted: bool


class SessionRevisionOut(Response):
    revision: int
    operation: str = Field(description="put (a write) or delete (a logout)")
    at: float
    session: SessionOut | None = None


class SessionHistory(Response):
    session_id: str
    items: list[SessionRevisionOut]


class TokenCreate(Request):
    role: Literal["viewer", "operator", "admin"]
    name: str = Field(min_length=1, max_length=200)
    expires_in_days: float | None = Field(None, gt=0, le=3650)


class TokenOut(Response):
    """An API token (never the token itself, nor its digest)."""

    id: str
    name: str
    role: str
    created_at: float
    last_used_at: float | None = None
    expires_at: float | None = None
    revoked: bool
    revoked_at: float | None = None
    state: str = Field(description="active, expired or revoked")


class TokenCreated(TokenOut):
    token: str = Field(description="Send as `Authorization: Bearer <token>`; shown this once")


class TokenList(Response):
    items: list[TokenOut]


class CredentialIn(Request):
    """A credential record in upstream NoETL's format; `description` and `tags` are
    accepted and not kept."""

    name: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1, max_length=64, description="postgres, bearer, basic, ...")
    data: dict[str, Any] = Field(description="The fields; never shown again")
    description: str | None = None
    tags: list[str] | None = None


class CredentialOut(Response):
    """A stored credential: never its values."""

    name: str
    type: str
    key_id: str = Field(description="The id of the key that encrypted it")
    created_at: float
    updated_at: float
    created: bool | None = Field(None, description="On a write: whether the name was new")
    warning: str | None = None


class CredentialList(Response):
    items: list[CredentialOut]


class CredentialDeleted(Response):
    name: str
    deleted: bool
