"""One step of an execution: its state, result preview, runs and attempts."""

from __future__ import annotations

import copy
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from noetl.auth import Role
from noetl.core import NotFoundError
from noetl.engine import StepRun
from noetl.runtime.step_runs import runs_of, settle, step_history
from noetl.runtime.step_view import AttemptStatus
from noetl.runtime.views import ExecutionView, iter_events
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.redact import masked_json
from noetl.server.routes.executions import ExecutionId, read_view
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.executions import StepDetail
from noetl.server.waiting import queue_state

router = APIRouter(
    prefix="/api/executions", tags=["executions"], dependencies=[Depends(authenticate)]
)

# An attempt's output is a glance ("what did item 7 return?"); the step result is longer.
OUTPUT_PREVIEW = 300


def _step_state(
    view: ExecutionView, step: str, result_limit: int
) -> tuple[dict[str, Any], StepRun]:
    """The step's state for the answer, and a copy of its run (the view changes after)."""
    run = view.state.steps.get(step)
    if run is None:
        raise NotFoundError(f"execution {view.record.execution_id} has no step {step!r}")
    out: dict[str, Any] = run.summary()
    out.update(
        run=run.run, runs=runs_of(run), started_at=run.started_at, finished_at=run.finished_at
    )
    if run.status.done and run.finished_at is not None:
        out["result"], out["result_truncated"] = masked_json(run.result, result_limit, indent=2)
    else:
        out["result"], out["result_truncated"] = None, False
    return out, copy.copy(run)


@router.get(
    "/{execution_id}/steps/{step}",
    summary="One step: status, loop counters, result preview and attempts",
    dependencies=[requires(Role.VIEWER)],
    response_model=StepDetail,
    responses={404: {"model": ErrorBody, "description": "No such execution or step"}},
)
def get_step(
    *,
    execution_id: ExecutionId,
    step: Annotated[str, Path(min_length=1, max_length=128)],
    deps: Deps,
    status: Annotated[
        AttemptStatus | None, Query(description="Only attempts with this status")
    ] = None,
    run: Annotated[int | None, Query(ge=1, description="Only attempts of this run")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Attempts per page")] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
    result_limit: Annotated[
        int, Query(ge=0, le=1_000_000, description="Characters of the result shown")
    ] = 4000,
    run_limit: Annotated[
        int, Query(ge=1, le=1000, description="Runs listed: the latest this many")
    ] = 100,
) -> dict[str, Any]:
    """The step as the engine sees it, with every attempt of each of its tasks (a loop
    has one task per item; a retry or a lost lease adds an attempt), in the order they
    began. A step on a cycle of the graph runs more than once: `runs` counts its runs,
    `run` is the latest, `run_history` lists the latest `run_limit` of them (oldest first)
    and each attempt names its run. `queued` counts its tasks waiting in the queue, and
    `waiting_without_workers` says no live worker takes them. Sensitive values in the
    result and outputs are masked."""
    out, current = read_view(deps, execution_id, lambda view: _step_state(view, step, result_limit))
    attempts, runs = step_history(iter_events(deps.store, execution_id), step)
    settle(runs, attempts, current)
    if status is not None:
        attempts = [a for a in attempts if a.status is status]
    if run is not None:
        attempts = [a for a in attempts if a.run == run]
    page = []
    for attempt in attempts[offset : offset + limit]:
        item = attempt.to_dict()
        output = item.pop("output")
        item["output"] = None if output is None else masked_json(output, OUTPUT_PREVIEW)[0]
        page.append(item)
    out.update(
        execution_id=execution_id,
        step=step,
        run_history=[entry.to_dict() for entry in runs[-run_limit:]],
        attempts=page,
        attempts_total=len(attempts),
        limit=limit,
        offset=offset,
    )
    waiting = queue_state(deps.store, execution_id, deps.clock())
    out.update(
        queued=waiting.queued.get(step, 0),
        waiting_without_workers=step in waiting.waiting,
        dead_letters=deps.store.pending_dead_letters(execution_id).get(step, 0),
    )
    return out
