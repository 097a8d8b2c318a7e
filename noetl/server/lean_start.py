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
A start whose playbook is ready (kept by the server's catalog, its engine built, its
text admitted) is decided in the event loop itself, and written by the start queue's
thread with the starts waiting meanwhile (`noetl.server.starts.StartQueue`): under a burst
of starts, the two thread switches of a start were a fifth of its time. Any other start
runs in the same thread pool as the route's would. An error a start raises goes to the
app's exception handlers, as the route's would (never to the route again: a start that
failed is not tried twice).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noetl.auth import Role
from noetl.core import StalePlaybookError
from noetl.decision.decider import ID_TRIES, Decider
from noetl.server.deps import Services
from noetl.server.schemas.executions import ExecutionCreated, ExecutionStart
from noetl.server.starts import StartQueue, start_registered

PATH = "/api/executions"

# The event loop serves every connection: a start decided there is bounded first. A bigger
# body (its workload, an inline playbook) or playbook text goes to the thread pool.
LOOP_BODY_BYTES = 64 * 1024
LOOP_TEXT_CHARS = 256 * 1024


class _Elsewhere:
    """`LeanStart._in_loop`'s answer for a start that is for the thread pool."""


_ELSEWHERE = _Elsewhere()
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
        self.in_loop = 0  # of which decided in the event loop
        self._starts: StartQueue | None = None  # made at the first start decided in the loop

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
            answer = _ELSEWHERE if len(body) > LOOP_BODY_BYTES else await self._in_loop(start)
            execution_id = (
                await run_in_threadpool(self._start, start)
                if isinstance(answer, _Elsewhere)
                else answer
            )
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

    async def _in_loop(self, start: ExecutionStart) -> str | _Elsewhere:
        """The start decided here, in the event loop, when that costs only CPU (the
        playbook kept by the server's catalog, its engine built, its text admitted):
        two thread switches fewer, and the request's thread is the loop. Its write goes
        to the start queue's thread with the starts waiting meanwhile. `_ELSEWHERE` when
        it is for the thread pool (`_start`): a read or a build first, or a newer version
        of the playbook registered since it was kept."""
        services = self.services
        latest = None
        if start.path is not None:
            record = services.catalog.peek(start.path, start.version)
            if record is None:
                return _ELSEWHERE
            text, path = record.text, record.path
            latest = record.version if start.version is None else None
        else:
            assert start.playbook is not None  # the model requires one of the two
            text, path = start.playbook, None
        decider = services.orchestrator.decider
        if len(text) > LOOP_TEXT_CHARS or not decider.warm(text):
            return _ELSEWHERE
        starting = decider.starting(
            text,
            path=path,
            workload=start.workload,
            parent_execution_id=None,
            now=services.orchestrator.clock(),
            latest=latest,
        )
        for attempt in range(ID_TRIES):
            first = decider.attempt(starting)
            refused = await asyncio.wrap_future(self._queue(decider).put(first.new))
            if refused is None:
                self.in_loop += 1
                return decider.started(first)
            if isinstance(refused, StalePlaybookError):
                services.catalog.forget(refused.path)
                return _ELSEWHERE  # reads the catalog again
            starting.again(refused, attempt)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _queue(self, decider: Decider) -> StartQueue:
        if self._starts is None:
            self._starts = StartQueue(decider.submit_starts)
        return self._starts

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
