"""The FastAPI application of `noetl server`: routes over a store and an orchestrator.

Process wiring (uvicorn, signals, the orchestrator loop thread) lives in the CLI; this
module only builds the app, so tests can drive it with TestClient.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI, Response

from noetl.auth import Role
from noetl.credentials.keys import Keyring
from noetl.dsl.policy import DslPolicy
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.scheduler import Scheduler
from noetl.runtime.views import ViewCache
from noetl.server.auth import Gate, check_routes, default_deny, requires
from noetl.server.deps import Services
from noetl.server.errors import install_error_handlers
from noetl.server.lean_start import LeanStart
from noetl.server.limits import DEFAULT_MAX_BODY_BYTES, EdgeLimits
from noetl.server.routes import (
    admin,
    credentials,
    dlq,
    execution_playbook,
    executions,
    health,
    playbooks,
    schedules,
    sessions,
    steps,
    tokens,
    triggers,
    ui,
    workers,
)
from noetl.server.starts import Playbooks
from noetl.sessions import Sessions
from noetl.store.base import Store

if TYPE_CHECKING:
    from noetl.observability.metrics import Metrics

DESCRIPTION = """
Start and inspect NoETL executions, keep a catalog of playbooks, and work the dead-letter
queue (replay a task that failed for good, or discard it).

Every route but `/health` and these pages needs `Authorization: Bearer <token>`: an API
token (`noetl auth token create --role viewer|operator|admin`) or a session token
(`POST /api/sessions`). A missing or invalid one is 401, too low a role 403.

Errors have one shape: `{"error": code, "message": text}`, plus `diagnostics` (file, line,
step, key, code, message) for an invalid playbook and `errors` for an invalid request.
A request body over the server's limit (`server.max_body_bytes`, 16 MiB by default) is a
413 `too_large`; a NUL character in any string, or data nested more than 64 levels deep,
is a 422 naming the field.
Values under sensitive keys (password, token, secret, auth, key...) are shown as `***`.

The operator console, a web page over this API, is served at `/ui/`.
"""


def create_app(
    store: Store,
    orchestrator: Orchestrator,
    *,
    version: str,
    clock: Callable[[], float] = time.time,
    metrics: Metrics | None = None,
    metrics_path: str = "/metrics",
    gate: Gate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    credential_keys: Keyring | None = None,
    dsl: DslPolicy | None = None,
    scheduler: Scheduler | None = None,
    lean_start: bool = True,
) -> FastAPI:
    """The API over `store`; executions are started and canceled through `orchestrator`.
    With `metrics`, their Prometheus text is served at `metrics_path` (viewer role).

    `gate` checks credentials; by default authentication is ON, against `store.tokens`,
    with sessions in `store.sessions`. RuntimeError if a route declares no role and is not
    public (noetl.server.auth). A request body over `max_body_bytes` is a 413, and a NUL
    character in the URL a 422, before any route sees the request (noetl.server.limits).
    `credential_keys` encrypt the credentials stored through the API (none: `POST
    /api/credentials` answers 503). `dsl`: what the catalog accepts of the DSL (forms,
    strict validation; noetl.dsl.policy). `lean_start`: a plain `POST /api/executions` is
    answered without FastAPI's per-request machinery (noetl.server.lean_start); off, the
    route answers every start."""
    if gate is None:
        gate = Gate(store.tokens, Sessions(store.sessions), clock=clock)
    app = FastAPI(
        title="NoETL",
        version=version,
        description=DESCRIPTION.strip(),
        dependencies=[Depends(default_deny)],
    )
    app.state.services = Services(
        store=store,
        orchestrator=orchestrator,
        version=version,
        clock=clock,
        views=ViewCache(store),
        gate=gate,
        keyring=credential_keys or Keyring(),
        catalog=Playbooks(store),
        dsl=dsl or DslPolicy(),
        scheduler=scheduler or Scheduler(store, orchestrator, owner="api", clock=clock),
    )
    # Innermost of ours: a plain start is answered before FastAPI's routing (the rest go
    # on to it); inside CatchAll and the limits, which it needs as every route does.
    if lean_start:
        app.add_middleware(LeanStart, services=app.state.services, handlers=app.exception_handlers)
    install_error_handlers(app)
    # Added last, so outermost: an oversized body is refused before anything reads it.
    app.add_middleware(EdgeLimits, max_body_bytes=max_body_bytes)
    app.include_router(health.router)
    app.include_router(playbooks.router)
    app.include_router(executions.router)
    app.include_router(execution_playbook.router)
    app.include_router(steps.router)
    app.include_router(workers.router)
    app.include_router(dlq.router)
    app.include_router(admin.router)
    app.include_router(tokens.router)
    app.include_router(credentials.router)
    app.include_router(sessions.router)
    app.include_router(schedules.router)
    app.include_router(triggers.router)
    if metrics is not None:
        _serve_metrics(app, metrics, metrics_path)
    app.include_router(ui.console_router())
    check_routes(app)
    return app


def _serve_metrics(app: FastAPI, metrics: Metrics, path: str) -> None:
    from noetl.observability.exporter import CONTENT_TYPE, render  # noqa: PLC0415

    registry = metrics.registry

    # A sync route: FastAPI runs it in a thread, so the store queries of a scrape do
    # not block the event loop.
    # Not public: the metrics name playbooks and pools. Prometheus sends a viewer token
    # (`authorization: {credentials_file: ...}` in its scrape config).
    @app.get(path, include_in_schema=False, dependencies=[requires(Role.VIEWER)])
    def scrape() -> Response:
        return Response(render(registry), media_type=CONTENT_TYPE)
