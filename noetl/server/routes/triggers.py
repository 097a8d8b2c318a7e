"""`POST /api/triggers/{name}`: a schedule's webhook (noetl.runtime.webhooks).

Public to the API's own authentication: the request carries the schedule's webhook token
(`Authorization: Bearer nwh_...`), checked here, not an API token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Response
from fastapi import status as http

from noetl.runtime.webhooks import deliver
from noetl.server.deps import Deps
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.schedules import WebhookStarted

router = APIRouter(prefix="/api/triggers", tags=["schedules"])


def _bearer(authorization: str | None) -> str | None:
    scheme, _, credential = (authorization or "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else None


@router.post(
    "/{name:path}",
    summary="Start a schedule's playbook from a webhook (its own token)",
    status_code=http.HTTP_201_CREATED,
    response_model=WebhookStarted,
    responses={
        200: {"model": WebhookStarted, "description": "A repeated Idempotency-Key"},
        401: {"model": ErrorBody, "description": "Unknown trigger or wrong token"},
        409: {"model": ErrorBody, "description": "The schedule is paused"},
    },
)
def trigger_webhook(
    name: Annotated[str, Path(min_length=1, max_length=2048)],
    deps: Deps,
    response: Response,
    *,
    body: Annotated[dict[str, Any] | None, Body()] = None,
    authorization: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> WebhookStarted:
    """Start the schedule's playbook with the JSON body as its workload (or as
    `request.body` in the trigger's workload templates). With `Idempotency-Key`, a repeat
    answers 200 with the first request's execution instead of starting another."""
    delivery = deliver(
        deps.orchestrator,
        name,
        _bearer(authorization),
        body or {},
        key=idempotency_key,
        now=deps.clock(),
    )
    if delivery.replayed:
        response.status_code = http.HTTP_200_OK
    return WebhookStarted(name=name, execution_id=delivery.execution_id, replayed=delivery.replayed)
