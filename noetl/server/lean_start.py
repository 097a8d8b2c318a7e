"""`POST /api/executions` answered without the framework's per-request machinery.

The API's busiest request is a start: under a burst of them, most of the server's CPU went
to the way through FastAPI (routing, the dependencies of authentication and role, the
body's parsing and the response's validation) rather than to the start itself. This pure
ASGI middleware answers the common case of that one route itself:

* a bearer API token the server's token cache read a moment ago (`Gate.at_once`), whose
  role allows starting executions, or no token on a server with authentication off;
* a JSON body that validates as `ExecutionStart`, naming a registered playbook by `path`
  or an inline one, with no `options.parent_execution_id`.

Anything else goes on to the FastAPI route, untouched (the body is handed on as it came),
which answers it exactly as it always did: a missing or unknown token, a session, too low
a role, a body that does not validate, another content type, an unregistered path, a
parent. So every error keeps its one shape, and the route stays the API's description.
The start runs in the same thread pool as the route's would; an error it raises goes to
the app's exception handlers, as the route's would (never to the route again: a start that
failed is not tried twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noetl.auth import Role
from noetl.server.deps import Services
from noetl.server.schemas.executions import ExecutionCreated, ExecutionStart
from noetl.server.starts import start_registered

PATH = "/api/executions"
Handler = Callable[[Request, Exception], Any]


class LeanStart:
    """Answers a plain start itself; passes every other request to `app`."""

    def __init__(
        self, app: ASGIApp, *, services: Services, handlers: Mapping[Any, Handler]
    ) -> None:
        self.app = app
        self.services = services
        # The app's exception handlers (the same mapping, filled after this is built).
        self.handlers = handlers
        self.answered = 0  # starts answered here (read by tests)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        if not self._admitted(scope):
            await self.app(scope, receive, send)
            return
        body, last = await _read(receive)
        start = _parse(body) if last["type"] == "http.request" else None
        if start is None:
            await self.app(scope, _replay(body, last, receive), send)
            return
        try:
            execution_id = await run_in_threadpool(self._start, start)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response: Response = await handler(Request(scope, receive), exc)
            await response(scope, receive, send)
            return
        if execution_id is None:  # not registered: the route says so
            await self.app(scope, _replay(body, last, receive), send)
            return
        self.answered += 1
        response = JSONResponse(
            ExecutionCreated(execution_id=execution_id).model_dump(),
            status_code=201,
            headers={"Location": f"{PATH}/{execution_id}"},
        )
        await response(scope, receive, send)

    def _admitted(self, scope: Scope) -> bool:
        """Whether the request is a JSON body under a cached token that may start."""
        authorization = content_type = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name == b"content-type":
                content_type = value
        if content_type is None:
            return False
        if content_type.split(b";", 1)[0].strip().lower() != b"application/json":
            return False
        bearer = None
        if authorization is not None:
            scheme, _, credential = authorization.decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not credential.strip():
                return False
            bearer = credential.strip()
        # None unless the cache knows the token (or authentication is off).
        principal = self.services.gate.at_once(bearer)
        return principal is not None and principal.role.allows(Role.OPERATOR)

    def _start(self, start: ExecutionStart) -> str | None:
        """Runs in the thread pool: the start, or None when `path` is not registered."""
        services = self.services
        if start.path is not None:
            return start_registered(
                services.catalog,
                services.orchestrator,
                start.path,
                start.version,
                workload=start.workload,
            )
        assert start.playbook is not None  # the model requires one of the two
        return services.orchestrator.start_execution(start.playbook, workload=start.workload)

    def _handler(self, exc: Exception) -> Handler | None:
        for cls in type(exc).__mro__:
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None


def _parse(body: bytes) -> ExecutionStart | None:
    """The body as a start this middleware answers; None: the route decides."""
    try:
        start = ExecutionStart.model_validate(json.loads(body))
    except (ValueError, ValidationError, RecursionError):
        return None
    if start.options.parent_execution_id is not None:
        return None
    return start


async def _read(receive: Receive) -> tuple[bytes, Message]:
    """The whole body, and the last message read (a disconnect ends it early)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), message


def _replay(body: bytes, last: Message, receive: Receive) -> Receive:
    """A `receive` that hands out what was read (the body, or the disconnect), then goes
    on reading."""
    first: Message | None = (
        {"type": "http.request", "body": body, "more_body": False}
        if last["type"] == "http.request"
        else last
    )

    async def replay() -> Message:
        nonlocal first
        if first is not None:
            message, first = first, None
            return message
        return await receive()

    return replay
