"""`POST /api/triggers/{name}`: a schedule's webhook (noetl.runtime.webhooks).

Public to the API's own authentication: the request proves itself with the schedule's
webhook token (`Authorization: Bearer nwh_...`) or an HMAC signature of its body keyed by
that token (`X-NoETL-Signature: sha256=<hex>`), checked here, not with an API token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Request, Response
from fastapi import status as http
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool

from noetl.dsl.limits import json_object
from noetl.errors import TemplateError
from noetl.runtime.webhooks import Proof, deliver
from noetl.server.deps import services
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.schedules import WebhookStarted

router = APIRouter(prefix="/api/triggers", tags=["schedules"])


def _bearer(authorization: str | None) -> str | None:
    scheme, _, credential = (authorization or "").partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else None


def _body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object ({} when empty); 422 for anything else."""
    try:
        return json_object(raw, root="body")
    except ValueError as exc:
        problem = str(exc)
    raise RequestValidationError([{"loc": ("body",), "msg": problem, "type": "value_error"}])


# Async only to read the raw body (a signature signs its bytes); the start itself runs in
# the threadpool, as every other route's work does.
@router.post(
    "/{name:path}",
    summary="Start a schedule's playbook from a webhook (its own token or signature)",
    status_code=http.HTTP_201_CREATED,
    response_model=WebhookStarted,
    responses={
        200: {"model": WebhookStarted, "description": "A repeated Idempotency-Key"},
        401: {"model": ErrorBody, "description": "Unknown trigger, wrong token or signature"},
        409: {"model": ErrorBody, "description": "The schedule is paused"},
    },
)
async def trigger_webhook(
    name: Annotated[str, Path(min_length=1, max_length=2048)],
    request: Request,
    response: Response,
    *,
    authorization: Annotated[str | None, Header()] = None,
    x_noetl_signature: Annotated[str | None, Header(max_length=200)] = None,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> WebhookStarted:
    """Start the schedule's playbook with the JSON body as its workload (or as
    `request.body` in the trigger's workload templates). With `Idempotency-Key`, a repeat
    answers 200 with the first request's execution instead of starting another."""
    deps = services(request)
    raw = await request.body()
    proof = Proof(_bearer(authorization), x_noetl_signature, raw)

    def start() -> Any:  # parsing the body too stays off the event loop
        return deliver(
            deps.orchestrator,
            name,
            proof,
            _body(raw),
            key=idempotency_key,
            now=deps.clock(),
            keyring=deps.keyring,
        )

    try:
        delivery = await run_in_threadpool(start)
    except TemplateError as exc:  # the trigger's workload reads what the body lacks
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"the trigger's {exc}", "type": "value_error"}]
        ) from None
    if delivery.replayed:
        response.status_code = http.HTTP_200_OK
    return WebhookStarted(name=name, execution_id=delivery.execution_id, replayed=delivery.replayed)
