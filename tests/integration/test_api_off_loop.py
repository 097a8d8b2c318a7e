"""The API's work runs in FastAPI's threadpool, never on its event loop.

Starting an execution renders its first steps' templates (`Decider.start` ->
`Engine.start`), and replays, force-completes and reads fold or decide too: work that
takes up to the render limits. A route declared `async def` would run it on the event loop,
and every other request, `/health` included, would wait for it. The authentication
dependencies alone are coroutines: they answer from memory, and send what reads the
database to the threadpool.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time

import httpx
from fastapi.routing import APIRoute

from noetl.auth import ApiToken, Role, issue_token
from noetl.auth.cache import CachedTokens
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.auth import Gate, authenticate, default_deny, iter_routes
from noetl.sessions.manager import Sessions
from noetl.store import open_store
from noetl.store._memory_auth import MemorySessions, MemoryTokens


def test_every_route_is_a_plain_function_run_in_the_threadpool() -> None:
    store = open_store("memory://")
    app = create_app(store, Orchestrator(store, owner="t"), version="t")
    routes = {path: r for path, r, _ in iter_routes(app) if isinstance(r, APIRoute)}
    assert {"/api/executions", "/api/executions/{execution_id}/cancel", "/health"} <= set(routes)
    on_loop = [path for path, r in routes.items() if inspect.iscoroutinefunction(r.endpoint)]
    # The webhook reads its raw body on the loop (a signature signs the bytes); parsing it
    # and starting the playbook run in the threadpool.
    assert on_loop == ["/api/triggers/{name:path}"]
    for path, route in routes.items():
        for dependency in _all_dependencies(route.dependant):
            if inspect.iscoroutinefunction(dependency.call):
                assert dependency.call in ON_LOOP or _is_role_check(dependency.call), (
                    path,
                    dependency,
                )


# The coroutine dependencies allowed: they read memory only (noetl.server.auth).
ON_LOOP = {authenticate, default_deny}


def _is_role_check(call: object) -> bool:
    return getattr(call, "__module__", "") == "noetl.server.auth" and getattr(
        call, "__name__", ""
    ).startswith("requires_")


def _all_dependencies(dependant: object) -> list[object]:
    found = []
    for sub in getattr(dependant, "dependencies", []):
        found.append(sub)
        found.extend(_all_dependencies(sub))
    return found


class SlowTokens(MemoryTokens):
    """A token store whose reads take a while, as a busy database's."""

    def find(self, token_hash: str) -> ApiToken | None:
        time.sleep(0.5)
        return super().find(token_hash)


def test_a_token_read_from_the_database_does_not_hold_up_the_event_loop() -> None:
    store = open_store("memory://")
    tokens = CachedTokens(SlowTokens(threading.Lock()), ttl_s=30)
    gate = Gate(tokens, Sessions(MemorySessions(threading.Lock())))
    secret, _ = issue_token(tokens, role=Role.VIEWER, name="slow", now=time.time())
    app = create_app(store, Orchestrator(store, owner="t"), version="t", gate=gate)

    async def both() -> tuple[float, float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            began = time.monotonic()

            async def listed() -> float:
                headers = {"Authorization": f"Bearer {secret}"}
                answer = await client.get("/api/executions", headers=headers)
                assert answer.status_code == 200, answer.text
                return time.monotonic() - began

            async def health() -> float:
                await asyncio.sleep(0.05)  # the listing is reading its token by now
                assert (await client.get("/health")).status_code == 200
                return time.monotonic() - began

            slow, quick = await asyncio.gather(listed(), health())
            # Read a moment ago: the next request answers from memory.
            again = time.monotonic()
            headers = {"Authorization": f"Bearer {secret}"}
            assert (await client.get("/api/executions", headers=headers)).status_code == 200
            assert time.monotonic() - again < 0.4
            return slow, quick

    slow, quick = asyncio.run(both())
    assert slow >= 0.5
    assert quick < 0.4, f"/health waited {quick:.2f} s for a token read"
