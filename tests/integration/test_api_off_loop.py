"""The API's work runs in FastAPI's threadpool, never on its event loop.

Starting an execution renders its first steps' templates (`Decider.start` ->
`Engine.start`), and replays, force-completes and reads fold or decide too: work that
takes up to the render limits. A route declared `async def` would run it on the event loop,
and every other request, `/health` included, would wait for it.
"""

from __future__ import annotations

import inspect

from fastapi.routing import APIRoute

from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.auth import iter_routes
from noetl.store import open_store


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
        for dependency in route.dependant.dependencies:
            assert not inspect.iscoroutinefunction(dependency.call), (path, dependency)
