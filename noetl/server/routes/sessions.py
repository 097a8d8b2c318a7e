"""Login sessions: open one with an API token, check it, end it, read its history.

A browser (the web console) logs in once with `POST /api/sessions` and an API token, keeps
the session token it gets (in memory or sessionStorage, not a cookie, so no other site can
make the browser use it) and sends it as `Authorization: Bearer <session token>` on every
call. The path's `{token}` is a session token; it is only ever checked, never stored.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi import status as http

from noetl.auth import Principal, Role
from noetl.core import NotFoundError
from noetl.errors import AuthenticationError, ConflictError, PermissionDeniedError
from noetl.server.auth import BAD_SESSION, authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.access import (
    SessionCreated,
    SessionEnded,
    SessionHistory,
    SessionOut,
    SessionRevisionOut,
)
from noetl.server.schemas.common import ErrorBody

router = APIRouter(prefix="/api/sessions", tags=["sessions"], dependencies=[Depends(authenticate)])

SessionToken = Annotated[str, Path(min_length=1, max_length=256, description="A session token")]
Viewer = Annotated[Principal, requires(Role.VIEWER)]
_REFUSED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No such session, or it expired or was ended"}
}


@router.post(
    "",
    summary="Log in: open a session with the API token of the request",
    dependencies=[requires(Role.VIEWER)],
    status_code=http.HTTP_201_CREATED,
    response_model=SessionCreated,
    responses={403: {"model": ErrorBody, "description": "The credential is not an API token"}},
)
def login(request: Request, deps: Deps, principal: Viewer) -> SessionCreated:
    """The session has the token's role and expires `sessions.ttl_s` from now (or when
    the token does, if sooner). Its token is in the answer, this once."""
    if principal.kind == "anonymous":
        raise ConflictError("authentication is off on this server (auth.enabled: false)")
    if principal.kind != "token":
        raise PermissionDeniedError("open a session with an API token, not with a session")
    assert principal.token_id is not None  # a token principal has one
    token = deps.gate.tokens.get(principal.token_id)
    if token is None:  # revoked and gone since it was checked: as if it never was
        raise AuthenticationError("the token is not valid (unknown, expired or revoked)")
    client = request.client.host if request.client else None
    secret, session = deps.gate.sessions.login(token, now=deps.clock(), client=client)
    return SessionCreated(session_token=secret, **session.public())


@router.get(
    "/{token}",
    summary="Check a session: its role and expiry",
    dependencies=[requires(Role.VIEWER)],
    response_model=SessionOut,
    responses=_REFUSED,
)
def check_session(token: SessionToken, deps: Deps) -> SessionOut:
    session = deps.gate.sessions.check(token, deps.clock())
    if session is None:
        raise AuthenticationError(BAD_SESSION)
    return SessionOut(**session.public())


@router.delete(
    "/{token}",
    summary="Log out: end a session",
    dependencies=[requires(Role.VIEWER)],
    response_model=SessionEnded,
    responses=_REFUSED,
)
def logout(token: SessionToken, deps: Deps) -> SessionEnded:
    """The session is refused from now on; its history keeps the deletion."""
    sessions = deps.gate.sessions
    if not sessions.logout(token, deps.clock()):
        raise AuthenticationError(BAD_SESSION)
    return SessionEnded(session_id=sessions.key(token)[:16], deleted=True)


@router.get(
    "/{token}/history",
    summary="A session's last revisions (writes and its deletion)",
    dependencies=[requires(Role.VIEWER)],
    response_model=SessionHistory,
    responses={**_REFUSED, 404: {"model": ErrorBody, "description": "No history left"}},
)
def session_history(token: SessionToken, deps: Deps, principal: Viewer) -> SessionHistory:
    """Of a live session for anyone who holds it; of any session (ended or expired ones
    too) for an admin."""
    sessions = deps.gate.sessions
    if not principal.role.allows(Role.ADMIN) and sessions.check(token, deps.clock()) is None:
        raise AuthenticationError(BAD_SESSION)
    revisions = sessions.history(token)
    if not revisions:
        raise NotFoundError("no such session (or its records have expired)")
    return SessionHistory(
        session_id=sessions.key(token)[:16],
        items=[SessionRevisionOut.model_validate(r.public()) for r in revisions],
    )
