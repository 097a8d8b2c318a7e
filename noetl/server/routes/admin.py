"""Operator actions beyond the everyday API: force-complete a parked or stuck step."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi import status as http

from noetl.auth import Role
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.operations import ForceCompleteRequest, ForceCompleteResult

router = APIRouter(prefix="/api/admin", tags=["admin"], dependencies=[Depends(authenticate)])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such execution or step"},
    409: {"model": ErrorBody, "description": "The execution or the step has finished"},
}


@router.post(
    "/executions/{execution_id}/steps/{step}/force-complete",
    summary="Mark a parked, pending or stuck step done",
    dependencies=[requires(Role.ADMIN)],
    status_code=http.HTTP_202_ACCEPTED,
    response_model=ForceCompleteResult,
    responses=_ERRORS,
)
def force_complete(
    execution_id: Annotated[str, Path(min_length=1, max_length=64)],
    step: Annotated[str, Path(min_length=1, max_length=200)],
    deps: Deps,
    body: ForceCompleteRequest | None = None,
) -> ForceCompleteResult:
    """The step finishes with `status` (ok by default) and `result`; its tasks still in
    flight are canceled, and it routes on as if it had finished by itself (runbook B)."""
    request = body or ForceCompleteRequest()
    deps.orchestrator.force_complete(
        execution_id,
        step,
        status=request.status,
        result=request.result,
        reason=request.reason,
        by="api",
    )
    return ForceCompleteResult(execution_id=execution_id, step=step, accepted=True)
