"""`noetl exec` on a database instead of a server: the server's own API app, run in this
process over the store (the SQLite file `noetl run` writes, or a PostgreSQL URL), so each
command is written once and answers the same either way.

The rule (docs/operations.md, "Inspecting executions"): a command talks to a server only
when one is named (`--server`, `NOETL_SERVER_URL`); otherwise it works on the database of
`--db` (`NOETL_DB`; by default the file `noetl run` writes). There is no authentication
on a database opened directly: who can open the file has it all, as with `noetl dlq --db`.

A cancel is decided here and now for that execution alone (an orchestrator scoped to it:
it touches no other execution's tasks); the process running it (`noetl run`, a worker
over the file) stops when it sees the execution ended.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from noetl import __version__
from noetl.cli.client import Client, Server

__all__ = ["local_client"]

LOCAL_URL = "http://local"


@contextmanager
def local_client(db: str) -> Iterator[Client]:
    """A `Client` whose requests go to the API app over the store of `db`."""

    from noetl.runtime.orchestrator import Orchestrator
    from noetl.server.app import create_app
    from noetl.server.auth import Gate
    from noetl.sessions import Sessions
    from noetl.store import open_store

    store = open_store(db)
    scope: set[str] = set()
    orchestrator = Orchestrator(store, owner=f"cli:{os.getpid()}", scope=lambda: scope)
    gate = Gate(store.tokens, Sessions(store.sessions), enabled=False)
    app = create_app(store, orchestrator, version=__version__, gate=gate)
    transport = AppTransport(app)
    client = Client(Server(LOCAL_URL), transport=transport)
    client.after_cancel = lambda execution_id: _decide(orchestrator, scope, execution_id)
    try:
        yield client
    finally:
        client.close()
        transport.close()
        orchestrator.close()
        store.close()


class AppTransport(httpx.BaseTransport):
    """Requests answered by an ASGI app in this process (httpx's ASGI transport, driven
    by an event loop of its own: the commands are synchronous)."""

    def __init__(self, app: Any) -> None:
        self._asgi = httpx.ASGITransport(app=app)
        self._loop = asyncio.new_event_loop()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def answer() -> httpx.Response:
            sent = httpx.Request(
                request.method, request.url, headers=request.headers, content=request.read()
            )
            response = await self._asgi.handle_async_request(sent)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body)

        return self._loop.run_until_complete(answer())

    def close(self) -> None:
        self._loop.close()


def _decide(orchestrator: Any, scope: set[str], execution_id: str) -> None:
    """Decide the inputs of one execution now (its cancel), and nothing else."""
    scope.add(execution_id)
    for _ in range(10):
        if not orchestrator.run_once():
            break
