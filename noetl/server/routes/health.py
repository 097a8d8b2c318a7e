"""`GET /health`: is the server up, and can it reach its database?"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from noetl.server.deps import Deps
from noetl.server.schemas.common import Health

log = logging.getLogger("noetl.server")
router = APIRouter(tags=["health"])


@router.get(
    "/health",
    summary="Server and database health",
    response_model=Health,
    responses={503: {"model": Health, "description": "The database is unavailable"}},
)
def health(deps: Deps) -> JSONResponse:
    """`database` is `ok` when a trivial query succeeds; otherwise the answer is 503."""
    try:
        deps.store.list_executions(limit=1)
    except Exception as exc:  # any driver error means the same thing here: not reachable
        log.warning("health check: the database is unavailable: %s", exc)
        body = Health(status="degraded", version=deps.version, database="unavailable")
        return JSONResponse(body.model_dump(), status_code=503)
    body = Health(status="ok", version=deps.version, database="ok")
    return JSONResponse(body.model_dump())
