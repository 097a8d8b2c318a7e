"""The FastAPI application of `noetl server`: routes over a store and an orchestrator.

Process wiring (uvicorn, signals, the orchestrator loop thread) lives in the CLI; this
module only builds the app, so tests can drive it with TestClient.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI

from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.views import ViewCache
from noetl.server.deps import Services
from noetl.server.errors import install_error_handlers
from noetl.server.routes import admin, dlq, executions, health, playbooks, steps, ui, workers
from noetl.store.base import Store

DESCRIPTION = """
Start and inspect NoETL executions, keep a catalog of playbooks, and work the dead-letter
queue (replay a task that failed for good, or discard it).

Errors have one shape: `{"error": code, "message": text}`, plus `diagnostics` (file, line,
step, key, code, message) for an invalid playbook and `errors` for an invalid request.
Values under sensitive keys (password, token, secret, auth, key...) are shown as `***`.

The operator console, a web page over this API, is served at `/ui/`.
"""


def create_app(
    store: Store,
    orchestrator: Orchestrator,
    *,
    version: str,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """The API over `store`; executions are started and canceled through `orchestrator`."""
    app = FastAPI(title="NoETL", version=version, description=DESCRIPTION.strip())
    app.state.services = Services(
        store=store,
        orchestrator=orchestrator,
        version=version,
        clock=clock,
        views=ViewCache(store),
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(playbooks.router)
    app.include_router(executions.router)
    app.include_router(steps.router)
    app.include_router(workers.router)
    app.include_router(dlq.router)
    app.include_router(admin.router)
    app.include_router(ui.console_router())
    return app
