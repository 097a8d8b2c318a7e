"""Named credentials for admins: list, set (values write-only), delete.

The body of `POST /api/credentials` is upstream NoETL's record (`{name, type, data}`), so
upstream's `curl --data-binary @pg_local.json` works once it sends a token. Values are
encrypted with the server's `credentials.key` (NOETL_CREDENTIALS_KEY) and never come back:
answers hold the name, type, key id and times. `noetl credential ...` does the same on
the database directly.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from fastapi import status as http

from noetl.auth import Role
from noetl.core import NotFoundError
from noetl.credentials.records import CredentialError, check_usable, parse_credential
from noetl.credentials.store import check_name, save_credential
from noetl.errors import ConfigError
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.access import (
    CredentialDeleted,
    CredentialIn,
    CredentialList,
    CredentialOut,
)
from noetl.server.schemas.common import ErrorBody

router = APIRouter(
    prefix="/api/credentials", tags=["credentials"], dependencies=[Depends(authenticate)]
)

Name = Annotated[str, Path(min_length=1, max_length=128, description="The credential's name")]


@router.get(
    "",
    summary="List stored credentials (never their values)",
    dependencies=[requires(Role.ADMIN)],
    response_model=CredentialList,
)
def list_credentials(deps: Deps) -> CredentialList:
    rows = deps.store.credentials.all()
    return CredentialList(items=[CredentialOut.model_validate(r.summary()) for r in rows])


@router.post(
    "",
    summary="Store or replace a credential (upstream's {name, type, data}); write-only",
    dependencies=[requires(Role.ADMIN)],
    status_code=http.HTTP_201_CREATED,
    response_model=CredentialOut,
    responses={
        200: {"model": CredentialOut, "description": "Replaced"},
        400: {"model": ErrorBody, "description": "A record a task could not use"},
        503: {"model": ErrorBody, "description": "The server has no credentials key"},
    },
)
def set_credential(body: CredentialIn, deps: Deps, response: Response) -> CredentialOut:
    try:
        credential = parse_credential(check_name(body.name), {"type": body.type, "data": body.data})
        warning = check_usable(credential)
    except CredentialError as exc:  # the client's record: a 400 naming the field
        raise ConfigError(str(exc)) from None
    row, created = save_credential(deps.store.credentials, deps.keyring, credential, deps.clock())
    if not created:
        response.status_code = http.HTTP_200_OK
    return CredentialOut.model_validate({**row.summary(), "created": created, "warning": warning})


@router.delete(
    "/{name}",
    summary="Delete a credential",
    dependencies=[requires(Role.ADMIN)],
    response_model=CredentialDeleted,
    responses={404: {"model": ErrorBody, "description": "No such credential"}},
)
def delete_credential(name: Name, deps: Deps) -> CredentialDeleted:
    if not deps.store.credentials.delete(name):
        raise NotFoundError(f"no credential {name!r}")
    return CredentialDeleted(name=name, deleted=True)
