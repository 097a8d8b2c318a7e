"""`GET /api/workers`: the workers that registered with the database, and which are alive."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from noetl.auth import Role
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.operations import WorkerList, WorkerOut
from noetl.server.waiting import ALIVE_WITHIN_S, is_alive

router = APIRouter(prefix="/api/workers", tags=["workers"], dependencies=[Depends(authenticate)])


@router.get(
    "",
    summary="List workers and whether they are alive",
    dependencies=[requires(Role.VIEWER)],
    response_model=WorkerList,
)
def list_workers(
    deps: Deps,
    alive_within_s: Annotated[
        float, Query(gt=0, le=86_400, description="A heartbeat this recent counts as alive")
    ] = ALIVE_WITHIN_S,
    include_stopped: Annotated[
        bool, Query(description="Also list workers that stopped or went silent")
    ] = False,
) -> WorkerList:
    """A worker heartbeats every third of its lease (10 s by default); one killed without
    a chance to say so keeps its last status, and its heartbeat ages."""
    now = deps.clock()
    items = []
    for worker in deps.store.list_workers():
        age = max(0.0, now - worker.heartbeat_at)
        alive = is_alive(worker, now, alive_within_s)
        if not alive and not include_stopped:
            continue
        items.append(
            WorkerOut(
                worker_id=worker.worker_id,
                pool=worker.pool,
                hostname=worker.hostname,
                pid=worker.pid,
                status=worker.status,
                started_at=worker.started_at,
                heartbeat_at=worker.heartbeat_at,
                heartbeat_age_s=round(age, 3),
                alive=alive,
            )
        )
    return WorkerList(items=items, alive=sum(1 for w in items if w.alive))
