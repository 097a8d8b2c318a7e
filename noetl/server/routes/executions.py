"""Executions: start, list, inspect (status, graph, events) and cancel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi import status as http
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from noetl.auth import Role
from noetl.core import ExecutionStatus, NotFoundError
from noetl.dsl.complexity import Complexity, estimate
from noetl.redaction import redact, redact_event_payload
from noetl.runtime.views import EVENT_CHUNK, ExecutionView, iter_events
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps, services
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.executions import (
    CancelResult,
    EventList,
    ExecutionCreated,
    ExecutionDetail,
    ExecutionGraph,
    ExecutionList,
    ExecutionStart,
    ExecutionSummary,
)
from noetl.server.starts import start_registered
from noetl.server.waiting import queue_state
from noetl.store.base import ExecutionRecord, Store

router = APIRouter(
    prefix="/api/executions", tags=["executions"], dependencies=[Depends(authenticate)]
)

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such execution"}
}
T = TypeVar("T")

ExecutionId = Annotated[str, Path(min_length=1, max_length=64, description="Execution id")]


def read_view(deps: Deps, execution_id: str, use: Callable[[ExecutionView], T]) -> T:
    """`use(view)` on the execution's current view (cached, caught up from the log)."""
    found = deps.views.read(execution_id, lambda view: (use(view),))
    if found is None:
        raise NotFoundError(f"execution {execution_id} not found")
    return found[0]


def _record(store: Store, execution_id: str) -> ExecutionRecord:
    record = store.get_execution(execution_id)
    if record is None:
        raise NotFoundError(f"execution {execution_id} not found")
    return record


# A plain function, as every route here: FastAPI runs it in its threadpool. Starting an
# execution renders its first steps' templates (within the render limits of
# noetl.dsl.template_limits), work that must never run on the event loop `/health` answers on.
# The API's busiest route under a burst of starts: it reads the services from the request
# and returns its response made (the model documents it), as each dependency FastAPI
# resolves and each response it validates for a plain route is one more switch to a
# worker thread, which costs a busy server more than the work.
@router.post(
    "",
    summary="Start an execution",
    dependencies=[requires(Role.OPERATOR)],
    status_code=http.HTTP_201_CREATED,
    response_model=ExecutionCreated,
    responses={
        404: {"model": ErrorBody, "description": "No such registered playbook"},
        413: {"model": ErrorBody, "description": "The body is over server.max_body_bytes"},
        422: {
            "model": ErrorBody,
            "description": "Invalid playbook or request (a NUL character, data nested more "
            "than 64 levels, an unknown options.parent_execution_id)",
        },
    },
)
def start_execution(body: ExecutionStart, request: Request) -> Response:
    """Run a registered playbook (`path`, optionally `version`) or an inline one
    (`playbook`) with `workload` merged over its defaults. The execution is created and its
    first tasks queued in one transaction; workers pick them up. `options.parent_execution_id`
    must name an existing execution."""
    deps = services(request)
    if body.path is not None and deps.catalog.get(body.path, body.version) is None:
        which = f"version {body.version} of " if body.version is not None else ""
        raise NotFoundError(f"{which}playbook {body.path!r} is not registered")
    parent = body.options.parent_execution_id
    if parent is not None and deps.store.get_execution(parent) is None:
        # A parent that does not exist would be a dangling link the console follows.
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "options", "parent_execution_id"),
                    "msg": f"no execution {parent!r} exists",
                    "type": "not_found",
                }
            ]
        )
    if body.path is not None:
        execution_id = start_registered(
            deps.catalog,
            deps.orchestrator,
            body.path,
            body.version,
            workload=body.workload,
            parent_execution_id=parent,
        )
        if execution_id is None:  # not possible: versions are never deleted
            raise NotFoundError(f"playbook {body.path!r} is not registered")
    else:
        assert body.playbook is not None  # the model requires one of the two
        execution_id = deps.orchestrator.start_execution(
            body.playbook, workload=body.workload, parent_execution_id=parent
        )
    return JSONResponse(
        ExecutionCreated(execution_id=execution_id).model_dump(),
        status_code=http.HTTP_201_CREATED,
        headers={"Location": f"{router.prefix}/{execution_id}"},
    )


@router.get(
    "",
    summary="List executions, newest first",
    dependencies=[requires(Role.VIEWER)],
    response_model=ExecutionList,
)
def list_executions(
    deps: Deps,
    status: Annotated[ExecutionStatus | None, Query(description="Only this status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> ExecutionList:
    # One row more than asked says whether there is a next page, without counting.
    records = deps.store.list_executions(status=status, limit=limit + 1, offset=offset)
    more = len(records) > limit
    items = [
        ExecutionSummary(
            execution_id=r.execution_id,
            status=r.status,
            playbook_name=r.playbook_name,
            playbook_path=r.playbook_path,
            created_at=r.created_at,
            updated_at=r.updated_at,
            finished_at=r.finished_at,
            parent_execution_id=r.parent_execution_id,
            pruned_at=r.pruned_at,
        )
        for r in records[:limit]
    ]
    next_offset = offset + limit if more else None
    return ExecutionList(items=items, limit=limit, offset=offset, next_offset=next_offset)


@router.get(
    "/{execution_id}",
    summary="Execution status: steps, loop counters, context",
    dependencies=[requires(Role.VIEWER)],
    response_model=ExecutionDetail,
    response_model_exclude_unset=True,
    responses=_NOT_FOUND,
)
def get_execution(execution_id: ExecutionId, deps: Deps) -> dict[str, Any]:
    """The object `noetl run --json` prints, folded from the event log (so it is current
    while the execution runs), with sensitive context and workload values masked; with
    the execution's tasks waiting in the queue, whether a live worker can take them, and
    its pending dead letters by step."""
    now = deps.clock()
    out, found = read_view(deps, execution_id, lambda view: (view.to_dict(now), _complexity(view)))
    out["context"] = redact(out["context"])
    if "ctx" in out:
        out["ctx"] = redact(out["ctx"])
    out["workload"] = redact(out["workload"])
    # Whether its queued work has a worker to take it, and what waits for an operator.
    out.update(queue_state(deps.store, execution_id, now).to_dict())
    out["dead_letters"] = deps.store.pending_dead_letters(execution_id)
    warn = deps.orchestrator.decider.options.complexity_warn
    out["complexity"] = None if found is None else found.to_dict()
    out["too_complex"] = found is not None and warn is not None and found.score >= warn
    return out


def _complexity(view: ExecutionView) -> Complexity | None:
    """The plan's complexity (noetl.dsl.complexity), with the workload it started with."""
    if view.graph is None:
        return None
    return estimate(view.graph.playbook, view.state.workload)


@router.post(
    "/{execution_id}/cancel",
    summary="Cancel an execution",
    dependencies=[requires(Role.OPERATOR)],
    status_code=http.HTTP_202_ACCEPTED,
    response_model=CancelResult,
    responses=_NOT_FOUND,
)
def cancel_execution(execution_id: ExecutionId, deps: Deps) -> CancelResult:
    """Ask the orchestrator to cancel; `canceled` is false when the execution had already
    finished. Asking twice is harmless."""
    record = _record(deps.store, execution_id)
    canceled = deps.orchestrator.cancel(execution_id, by="api")
    return CancelResult(execution_id=execution_id, canceled=canceled, status=record.status)


@router.get(
    "/{execution_id}/graph",
    summary="The execution's graph: step states and the edges taken",
    dependencies=[requires(Role.VIEWER)],
    response_model=ExecutionGraph,
    response_model_exclude_unset=True,
    responses=_NOT_FOUND,
)
def get_graph(execution_id: ExecutionId, deps: Deps) -> dict[str, Any]:
    """Every step with its status (and loop counters: `completed` of `total`), and every
    edge of the playbook with whether the execution followed it."""
    return read_view(deps, execution_id, ExecutionView.graph_dict)


def _event_list(
    deps: Deps,
    execution_id: str,
    *,
    event_type: str | None,
    step: str | None,
    from_timestamp: float | None,
    after_seq: int,
    limit: int,
) -> EventList:
    items: list[dict[str, Any]] = []
    filtered = event_type is not None or step is not None or from_timestamp is not None
    # Unfiltered, a page is exactly the next `limit` events: read no more than that.
    chunk = EVENT_CHUNK if filtered else min(limit, EVENT_CHUNK)
    for event in iter_events(deps.store, execution_id, after_seq, chunk=chunk):
        if (
            (event_type is not None and event.type != event_type)
            or (step is not None and event.step != step)
            or (from_timestamp is not None and event.ts < from_timestamp)
        ):
            continue
        out = event.to_dict()
        del out["execution_id"]
        out["payload"] = redact_event_payload(event.payload)
        items.append(out)
        if len(items) >= limit:
            break
    return EventList.model_validate({"execution_id": execution_id, "items": items})


TypeFilter = Annotated[
    str | None, Query(max_length=64, description="Only this type, e.g. step.finished")
]
FromTimestamp = Annotated[float | None, Query(description="Only events at or after (epoch s)")]
AfterSeq = Annotated[int, Query(ge=0, description="Only events after this sequence number")]
Limit = Annotated[int, Query(ge=1, le=10_000)]


@router.get(
    "/{execution_id}/events",
    summary="The execution's event log, filtered",
    dependencies=[requires(Role.VIEWER)],
    response_model=EventList,
    responses=_NOT_FOUND,
)
def list_events(
    *,
    execution_id: ExecutionId,
    deps: Deps,
    event_type: TypeFilter = None,
    step: Annotated[str | None, Query(max_length=128)] = None,
    from_timestamp: FromTimestamp = None,
    after_seq: AfterSeq = 0,
    limit: Limit = 1000,
) -> EventList:
    """Events in sequence order; payload values under sensitive keys are masked.

    Page through a long log with `after_seq` (the `seq` of the last event received) and
    `limit`. `seq` is gapless from 1 to the execution's `last_seq`, so the last N events
    are `after_seq = last_seq - N`. With filters, a page holds up to `limit` matching
    events found after `after_seq`."""
    return _event_list(
        deps,
        execution_id,
        event_type=event_type,
        step=step,
        from_timestamp=from_timestamp,
        after_seq=after_seq,
        limit=limit,
    )


@router.get(
    "/{execution_id}/steps/{step}/events",
    summary="The events of one step",
    dependencies=[requires(Role.VIEWER)],
    response_model=EventList,
    responses=_NOT_FOUND,
)
def list_step_events(
    *,
    execution_id: ExecutionId,
    step: Annotated[str, Path(min_length=1, max_length=128)],
    deps: Deps,
    event_type: TypeFilter = None,
    from_timestamp: FromTimestamp = None,
    after_seq: AfterSeq = 0,
    limit: Limit = 1000,
) -> EventList:
    return _event_list(
        deps,
        execution_id,
        event_type=event_type,
        step=step,
        from_timestamp=from_timestamp,
        after_seq=after_seq,
        limit=limit,
    )
