"""What the routes share, kept on `app.state` by `create_app` and injected per request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from noetl.credentials.keys import Keyring
from noetl.dsl.policy import DslPolicy
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.scheduler import Scheduler
from noetl.runtime.views import ViewCache
from noetl.server.auth import Gate
from noetl.server.starts import Playbooks
from noetl.store.base import Store


@dataclass(frozen=True)
class Services:
    store: Store
    orchestrator: Orchestrator
    version: str
    clock: Callable[[], float]
    views: ViewCache
    gate: Gate
    keyring: Keyring  # encrypts what POST /api/credentials stores
    catalog: Playbooks  # the registered playbooks as starts read them (kept in memory)
    dsl: DslPolicy = field(default_factory=DslPolicy)  # what the catalog accepts
    scheduler: Scheduler | None = None  # runs schedules now (POST /api/schedules/{name}/run)


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


Deps = Annotated[Services, Depends(services)]
