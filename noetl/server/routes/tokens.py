"""API token management for admins: list, create (the token is shown once), revoke.

`noetl auth token ...` does the same on the database directly (the first admin token has
to be made without the API)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from fastapi import status as http

from noetl.auth import Role, issue_token
from noetl.core import NotFoundError
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.access import TokenCreate, TokenCreated, TokenList, TokenOut
from noetl.server.schemas.common import ErrorBody

router = APIRouter(prefix="/api/admin/tokens", tags=["admin"], dependencies=[Depends(authenticate)])

TokenId = Annotated[str, Path(min_length=1, max_length=64, description="The token's id")]


@router.get(
    "",
    summary="List API tokens (never the tokens themselves)",
    dependencies=[requires(Role.ADMIN)],
    response_model=TokenList,
)
def list_tokens(deps: Deps) -> TokenList:
    now = deps.clock()
    return TokenList(
        items=[TokenOut.model_validate(t.summary(now)) for t in deps.gate.tokens.all()]
    )


@router.post(
    "",
    summary="Create an API token; the answer holds it, this once",
    dependencies=[requires(Role.ADMIN)],
    status_code=http.HTTP_201_CREATED,
    response_model=TokenCreated,
)
def create_token(body: TokenCreate, deps: Deps) -> TokenCreated:
    now = deps.clock()
    expires_in = None if body.expires_in_days is None else body.expires_in_days * 86400
    secret, token = issue_token(
        deps.gate.tokens, role=Role(body.role), name=body.name, now=now, expires_in_s=expires_in
    )
    return TokenCreated(token=secret, **token.summary(now))


@router.post(
    "/{token_id}/revoke",
    summary="Revoke an API token (and the sessions opened with it)",
    dependencies=[requires(Role.ADMIN)],
    response_model=TokenOut,
    responses={404: {"model": ErrorBody, "description": "No such token"}},
)
def revoke_token(token_id: TokenId, deps: Deps) -> TokenOut:
    now = deps.clock()
    token = deps.gate.tokens.revoke(token_id, now)
    if token is None:
        raise NotFoundError(f"no API token {token_id!r}")
    return TokenOut.model_validate(token.summary(now))
