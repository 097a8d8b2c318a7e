"""One step of an execution: its state, result preview, runs and attempts; the timeline
of all steps; and what the execution's task attempts printed (its logs)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from noetl.auth import Role
from noetl.core import Event, NotFoundError
from noetl.engine import StepRun
from noetl.runtime.step_logs import log_entries
from noetl.runtime.step_runs import runs_of, settle, step_history
from noetl.runtime.step_view import AttemptStatus
from noetl.runtime.timeline import execution_timeline
from noetl.runtime.views import ExecutionView, iter_events
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.redact import masked_json
from noetl.server.routes.executions import ExecutionId, read_view
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.executions import ExecutionTimeline, LogList, StepDetail
from noetl.server.waiting import queue_state
from noetl.store.base import ExecutionRecord, Store

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


def _timeline_state(view: ExecutionView) -> dict[str, Any]:
    """What the timeline needs of the view: copies, the view changes after."""
    state = view.state
    started = state.started_at if state.started_at is not None else view.record.created_at
    return {
        "status": state.status,
        "started_at": started,
        "finished_at": state.finished_at,
        "steps": {name: copy.copy(run) for name, run in state.steps.items()},
    }


@router.get(
    "/{execution_id}/timeline",
    summary="The timeline: when each step, loop item and attempt ran",
    dependencies=[requires(Role.VIEWER)],
    response_model=ExecutionTimeline,
    responses={404: {"model": ErrorBody, "description": "No such execution"}},
)
def get_timeline(
    *,
    execution_id: ExecutionId,
    deps: Deps,
    limit: Annotated[
        int, Query(ge=1, le=500, description="Tasks listed per step; the rest aggregated")
    ] = 20,
) -> dict[str, Any]:
    """Every step from its first start to its last end (`finished_at` null while it is
    not done), with a span per attempt of each of its tasks (a loop: one task per item):
    a retry or a lost lease is a span of its own. At most `limit` tasks are listed per
    step, those that failed, were retried or still run first; `hidden` sums up the rest.
    Read from the whole event log: poll it when `last_seq` changes."""
    now = deps.clock()
    head = read_view(deps, execution_id, _timeline_state)
    rows = execution_timeline(iter_events(deps.store, execution_id), head.pop("steps"), limit=limit)
    return {
        "execution_id": execution_id,
        **head,
        "now": now,
        "limit": limit,
        "steps": [row.to_dict() for row in rows],
    }


@router.get(
    "/{execution_id}/logs",
    summary="What the execution's task attempts printed and logged",
    dependencies=[requires(Role.VIEWER)],
    response_model=LogList,
    responses={404: {"model": ErrorBody, "description": "No such execution"}},
)
def list_logs(
    *,
    execution_id: ExecutionId,
    deps: Deps,
    step: Annotated[str | None, Query(max_length=128, description="Only this step's")] = None,
    after_seq: Annotated[
        int, Query(ge=0, description="Only output recorded after this event (to follow)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> dict[str, Any]:
    """Each task attempt's output (stdout, stderr and log records of python steps, a
    tool's log lines; bounded and masked by the worker), in the order the attempts
    ended, with its step, loop item, attempt and run. To follow a running execution,
    ask again with `after_seq` set to the answer's `last_seq` until `status` is final."""
    record = _record_of(deps.store, execution_id)  # first: its status covers what is read
    read = _Seen(iter_events(deps.store, execution_id))
    items = log_entries(read, step=step, after_seq=after_seq, limit=limit)
    # Following: the next answer starts after the last entry given, or after the last
    # event read when it gave all there were.
    last = items[-1].seq if len(items) >= limit else max(read.last_seq, after_seq)
    return {
        "execution_id": execution_id,
        "status": record.status.value,
        "last_seq": last,
        "items": [entry.to_dict() for entry in items],
    }


class _Seen:
    """The events, remembering the sequence number of the last one read."""

    def __init__(self, events: Iterator[Event]) -> None:
        self.events = events
        self.last_seq = 0

    def __iter__(self) -> Iterator[Event]:
        for event in self.events:
            self.last_seq = event.seq
            yield event


def _record_of(store: Store, execution_id: str) -> ExecutionRecord:
    record = store.get_execution(execution_id)
    if record is None:
        raise NotFoundError(f"execution {execution_id} not found")
    return record
