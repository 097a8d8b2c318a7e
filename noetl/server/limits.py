"""Limits at the API's edge, applied before any route sees a request (pure ASGI).

* The body: at most `max_body_bytes`. A request that declares more (`Content-Length`) is
  answered 413 without reading it; one that sends more (chunked, or lying about its
  length) is counted while it is read and answered 413 as soon as it passes the limit,
  before anything parses it. So a big request costs the server the limit at most, never
  the size the client chose. The rest of an oversized body is read and dropped (up to a
  bound), so the client gets the answer instead of a broken pipe.
* The URL: a NUL character (`%00`) in the path or the query string is a 422 naming it.
  PostgreSQL cannot store or even compare text holding one.

Request bodies' strings are checked by the request models (`noetl.server.schemas`).
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noetl.server.errors import error_response

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# An oversized body is drained (read and dropped) up to this many times the limit before
# the answer; past that the connection is simply closed after it.
_DRAIN_FACTOR = 8


def _megabytes(nbytes: int) -> str:
    return f"{nbytes / (1024 * 1024):g} MiB"


class _TooLarge(Exception):
    def __init__(self, more: bool) -> None:
        super().__init__("too large")
        self.more = more  # whether the client still has body to send


class EdgeLimits:
    """The body limit and the NUL check of the URL, around the whole application."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = _nul_in_url(scope)
        if where is not None:
            message = f"{where}: holds a NUL character (U+0000), which is not accepted"
            await _answer(
                scope, receive, send, status=422, error="invalid_request", message=message
            )
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._refuse(scope, receive, send, declared=declared, more=declared > 0)
            return
        try:
            body = await self._read(receive)
        except _TooLarge as exc:
            await self._refuse(scope, receive, send, declared=None, more=exc.more)
            return
        except _Disconnected:
            return  # nobody to answer
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        """The whole body, counted as it comes; _TooLarge once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away: let the app see the disconnect as it would.
                raise _Disconnected(message)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge(bool(message.get("more_body", False)))
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, *, declared: int | None, more: bool
    ) -> None:
        limit = self.max_body_bytes
        said = f" (it declares {declared} bytes)" if declared is not None else ""
        message = (
            f"the request body is over the limit of {limit} bytes ({_megabytes(limit)}; "
            f"server.max_body_bytes){said}"
        )
        if more:  # once the body is over, receive() waits for the answer: drain no further
            await _drain(receive, limit * _DRAIN_FACTOR)
        await _answer(
            scope, receive, send, status=413, error="too_large", message=message, limit=limit
        )


class _Disconnected(Exception):
    def __init__(self, message: Message) -> None:
        super().__init__("client disconnected")
        self.message = message


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands out `body` once, then whatever the server sends next (a
    disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _drain(receive: Receive, budget: int) -> None:
    """Read and drop the rest of a body, up to `budget` bytes."""
    read = 0
    while read <= budget:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _answer(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    status: int,
    error: str,
    message: str,
    limit: int | None = None,
) -> None:
    if limit is None:
        response = error_response(status, error, message)
    else:
        # Connection: close, since the rest of an oversized body may still be on its way.
        response = error_response(status, error, message, {"Connection": "close"}, limit=limit)
    await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _nul_in_url(scope: Scope) -> str | None:
    """`path` or `query` when the URL holds a NUL character (raw or %00)."""
    raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
    if b"\x00" in raw_path or b"\x00" in unquote_to_bytes(raw_path):
        return "path"
    query = scope.get("query_string", b"")
    if b"\x00" in query or b"\x00" in unquote_to_bytes(query):
        return "query"
    return None
