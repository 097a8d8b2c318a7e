"""The one place where errors become HTTP responses.

    AuthenticationError            401 unauthorized      (WWW-Authenticate: Bearer)
    PermissionDeniedError          403 forbidden         (the role is too low)
    PlaybookError                  422 invalid_playbook  (with every diagnostic)
    TooComplexError                422 too_complex       (the plan's score, complexity.refuse)
    RequestValidationError         422 invalid_request   (naming each bad field)
    HistoryPrunedError             410 pruned            (retention deleted its history)
    NotFoundError                  404 not_found
    ConfigError                    400 bad_config
    ConcurrencyError               409 conflict          (retry)
    ConflictError                  409 conflict          (the state does not allow it)
    StoreUnavailableError          503 unavailable       (Retry-After when transient)
    CredentialKeyError             503 no_credentials_key (the server has no usable key)
    HTTPException (routing, 405)   its own status (a body too deep to parse: 422)
    anything else                  500 internal          (logged; the message is generic)

Every error body has the same shape (`noetl.server.schemas.common.ErrorBody`): `error` and
`message`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noetl.core import (
    ConcurrencyError,
    HistoryPrunedError,
    NotFoundError,
    StoreUnavailableError,
)
from noetl.credentials.keys import CredentialKeyError
from noetl.dsl.limits import MAX_DEPTH
from noetl.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    PermissionDeniedError,
    PlaybookError,
    TooComplexError,
)

log = logging.getLogger("noetl.server")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
}
# RFC 6750: a 401 names the scheme the client should use.
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="noetl"'}


def error_response(
    status: int,
    error: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {"error": error, "message": message, **extra}
    return JSONResponse(body, status_code=status, headers=headers)


def _where(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """`body.workload` for ("body", "workload"); `query.limit` for ("query", "limit")."""
    return ".".join(str(part) for part in loc) or "request"


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        loc = list(err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "json_invalid":
            # pydantic's loc for bad JSON is (body, offset); say what it is.
            detail = (err.get("ctx") or {}).get("error")
            msg = f"invalid JSON ({detail})" if detail else "invalid JSON"
            loc = ["body"]
        # "Value error, give exactly one..." -> "give exactly one..."
        msg = msg.removeprefix("Value error, ")
        out.append({"loc": loc, "msg": msg, "type": str(err.get("type", "invalid"))})
    return out


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _field_errors(exc)
    message = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
    return error_response(422, "invalid_request", message, errors=errors)


async def _playbook(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PlaybookError)
    diagnostics = [d.to_dict() for d in exc.diagnostics]
    count = len(diagnostics)
    message = f"the playbook is invalid ({count} error{'s' if count != 1 else ''})"
    return error_response(422, "invalid_playbook", message, diagnostics=diagnostics)


async def _too_complex(_: Request, exc: Exception) -> JSONResponse:
    return error_response(422, "too_complex", str(exc))


async def _unauthorized(_: Request, exc: Exception) -> JSONResponse:
    return error_response(401, "unauthorized", str(exc), headers=CHALLENGE)


async def _forbidden(_: Request, exc: Exception) -> JSONResponse:
    return error_response(403, "forbidden", str(exc))


async def _not_found(_: Request, exc: Exception) -> JSONResponse:
    return error_response(404, "not_found", str(exc))


async def _pruned(_: Request, exc: Exception) -> JSONResponse:
    return error_response(410, "pruned", str(exc))


async def _config(_: Request, exc: Exception) -> JSONResponse:
    return error_response(400, "bad_config", str(exc))


async def _conflict(_: Request, exc: Exception) -> JSONResponse:
    return error_response(409, "conflict", f"{exc}; retry the request")


async def _state_conflict(_: Request, exc: Exception) -> JSONResponse:
    return error_response(409, "conflict", str(exc))


async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    log.warning("store unavailable: %s", exc)
    retryable = getattr(exc, "retryable", False)
    headers = {"Retry-After": "1"} if retryable else None
    return error_response(503, "unavailable", str(exc), headers=headers)


async def _no_key(_: Request, exc: Exception) -> JSONResponse:
    return error_response(503, "no_credentials_key", f"this server: {exc}")


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
        # FastAPI's own JSON parsing gave up on a body nested thousands of levels deep.
        message = f"body: nests more than {MAX_DEPTH} levels deep (the limit)"
        errors = [{"loc": ["body"], "msg": message, "type": "too_deep"}]
        return error_response(422, "invalid_request", message, errors=errors)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


def internal_error() -> JSONResponse:
    return error_response(500, "internal", "internal server error; the server log has details")


class CatchAll:
    """Turns an unexpected exception into a logged, generic 500 (pure ASGI middleware).

    Starlette's own last-resort handler re-raises after answering, so the error would be
    logged twice and TestClient would raise; this answers once and logs once.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            if started:  # too late to answer; let the server close the connection
                raise
            await internal_error()(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Register every mapping above on `app`."""
    app.add_exception_handler(AuthenticationError, _unauthorized)
    app.add_exception_handler(PermissionDeniedError, _forbidden)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(PlaybookError, _playbook)
    app.add_exception_handler(TooComplexError, _too_complex)
    app.add_exception_handler(HistoryPrunedError, _pruned)
    app.add_exception_handler(NotFoundError, _not_found)
    app.add_exception_handler(ConfigError, _config)
    app.add_exception_handler(CredentialKeyError, _no_key)
    app.add_exception_handler(ConcurrencyError, _conflict)
    app.add_exception_handler(ConflictError, _state_conflict)
    app.add_exception_handler(StoreUnavailableError, _unavailable)
    app.add_exception_handler(HTTPException, _http)
    app.add_middleware(CatchAll)
