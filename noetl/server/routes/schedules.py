"""`/api/schedules`: schedules with their next ticks; create, pause, resume, delete and
run now. Schedules made from a playbook's `triggers:` block come and go with the
playbook's registered versions (noetl.runtime.schedule_sync)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi import status as http
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from noetl.auth import Role
from noetl.core import NotFoundError
from noetl.core.ticks import next_ticks, zone
from noetl.dsl.triggers import Trigger, trigger_spec
from noetl.runtime.scheduler import Scheduler
from noetl.runtime.webhooks import new_webhook_token
from noetl.server.auth import authenticate, requires
from noetl.server.deps import Deps
from noetl.server.schemas.common import ErrorBody
from noetl.server.schemas.schedules import (
    ScheduleCreate,
    ScheduleDeleted,
    ScheduleDetail,
    ScheduleList,
    ScheduleOut,
    ScheduleRun,
    TickOut,
    WebhookToken,
)
from noetl.store.base import ScheduleRecord, TickRecord

router = APIRouter(
    prefix="/api/schedules", tags=["schedules"], dependencies=[Depends(authenticate)]
)
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such schedule"}
}
# A playbook's schedules are named `<path>:<trigger>`, and a path has slashes.
Name = Annotated[str, Path(min_length=1, max_length=2048, description="Schedule name")]


def _iso(tick: float, timezone: str) -> str:
    return datetime.fromtimestamp(tick, zone(timezone)).isoformat()


def _tick(tick: TickRecord, timezone: str) -> TickOut:
    return TickOut(
        tick=tick.tick,
        time=_iso(tick.tick, timezone),
        status=tick.status.value,
        manual=tick.manual,
        execution_id=tick.execution_id,
        owner=tick.owner,
        error=tick.error,
        claimed_at=tick.claimed_at,
    )


def _out(deps: Deps, record: ScheduleRecord, count: int) -> dict[str, Any]:
    try:
        trigger: Trigger | None = Trigger.model_validate(record.spec)
    except ValidationError:
        trigger = None  # kept by an older build: shown, never ticks
    timezone = "UTC" if trigger is None else trigger.timezone
    upcoming: list[str] = []
    spec = None if trigger is None else trigger_spec(trigger)
    if spec is not None and not record.paused and count:
        after = max(deps.clock(), record.created_at)
        upcoming = [_iso(t, timezone) for t in next_ticks(spec, after, count)]
    # The newest tick decided, of the time table or run by hand.
    found = [deps.store.schedules.last_tick(record.name, manual=manual) for manual in (False, True)]
    last = max((t for t in found if t is not None), key=lambda t: t.claimed_at, default=None)
    return {
        "name": record.name,
        "path": record.playbook_path,
        "source": record.source,
        "paused": record.paused,
        "trigger": record.spec,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "next_ticks": upcoming,
        "last_tick": None if last is None else _tick(last, timezone),
    }


def _get(deps: Deps, name: str) -> ScheduleRecord:
    record = deps.store.schedules.get(name)
    if record is None:
        raise NotFoundError(f"schedule {name!r} does not exist")
    return record


@router.get(
    "",
    summary="List schedules with their next ticks",
    dependencies=[requires(Role.VIEWER)],
    response_model=ScheduleList,
)
def list_schedules(
    deps: Deps, next_count: Annotated[int, Query(ge=0, le=50, alias="next")] = 3
) -> ScheduleList:
    """Every schedule, by name, with its next `next` ticks and its last one."""
    return ScheduleList(
        items=[ScheduleOut(**_out(deps, r, next_count)) for r in deps.store.schedules.all()]
    )


@router.post(
    "",
    summary="Create or replace a schedule",
    dependencies=[requires(Role.OPERATOR)],
    status_code=http.HTTP_201_CREATED,
    response_model=ScheduleOut,
    responses={422: {"model": ErrorBody, "description": "Invalid trigger or request"}},
)
def create_schedule(body: ScheduleCreate, deps: Deps) -> ScheduleOut:
    """Start the registered playbook `path` on `trigger`. A schedule of that name is
    replaced (its paused state and creation time kept)."""
    if deps.store.get_playbook(body.path) is None:
        raise NotFoundError(f"playbook {body.path!r} is not registered")
    spec = {**body.trigger, "name": body.name.replace("/", "_").replace(":", "_")}
    try:
        trigger = Trigger.model_validate(spec)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", "trigger", *e["loc"])} for e in exc.errors()]
        ) from None
    stored = deps.store.schedules.put(
        ScheduleRecord(
            body.name,
            body.path,
            trigger.model_dump(mode="json", exclude_defaults=True) | {"name": trigger.name},
            "api",
            trigger.paused,
        )
    )
    return ScheduleOut(**_out(deps, stored, 3))


@router.get(
    "/{name:path}",
    summary="A schedule, its next ticks and its latest ticks",
    dependencies=[requires(Role.VIEWER)],
    response_model=ScheduleDetail,
    responses=_NOT_FOUND,
)
def get_schedule(
    name: Name, deps: Deps, limit: Annotated[int, Query(ge=1, le=500)] = 20
) -> ScheduleDetail:
    record = _get(deps, name)
    shown = _out(deps, record, 5)
    timezone = str(record.spec.get("timezone", "UTC"))
    ticks = [_tick(t, timezone) for t in deps.store.schedules.ticks(name, limit=limit)]
    return ScheduleDetail(**shown, ticks=ticks)


def _pause(deps: Deps, name: str, paused: bool) -> ScheduleOut:
    if not deps.store.schedules.set_paused(name, paused):
        raise NotFoundError(f"schedule {name!r} does not exist")
    return ScheduleOut(**_out(deps, _get(deps, name), 3))


@router.post(
    "/{name:path}/pause",
    summary="Pause a schedule: its ticks are not started until it is resumed",
    dependencies=[requires(Role.OPERATOR)],
    response_model=ScheduleOut,
    responses=_NOT_FOUND,
)
def pause_schedule(name: Name, deps: Deps) -> ScheduleOut:
    return _pause(deps, name, True)


@router.post(
    "/{name:path}/resume",
    summary="Resume a paused schedule (ticks missed meanwhile follow its catch-up policy)",
    dependencies=[requires(Role.OPERATOR)],
    response_model=ScheduleOut,
    responses=_NOT_FOUND,
)
def resume_schedule(name: Name, deps: Deps) -> ScheduleOut:
    return _pause(deps, name, False)


@router.post(
    "/{name:path}/run",
    summary="Start the schedule's playbook now (a manual tick)",
    dependencies=[requires(Role.OPERATOR)],
    status_code=http.HTTP_201_CREATED,
    response_model=ScheduleRun,
    responses=_NOT_FOUND,
)
def run_now(name: Name, deps: Deps) -> ScheduleRun:
    """Start it at once, whatever its overlap policy or pause; the tick is recorded as
    manual and does not move the schedule's time table."""
    scheduler = deps.scheduler or Scheduler(deps.store, deps.orchestrator, owner="api")
    execution_id = scheduler.run_now(name)
    error = None
    if execution_id is None:
        last = deps.store.schedules.last_tick(name, manual=True)
        error = None if last is None else last.error
    return ScheduleRun(name=name, execution_id=execution_id, error=error)


@router.post(
    "/{name:path}/token",
    summary="Make a new token for the schedule's webhook (the old one stops working)",
    dependencies=[requires(Role.ADMIN)],
    status_code=http.HTTP_201_CREATED,
    response_model=WebhookToken,
    responses=_NOT_FOUND,
)
def make_token(name: Name, deps: Deps) -> WebhookToken:
    """The token is shown once; `POST /api/triggers/{name}` with `Authorization: Bearer
    <token>`, or with `X-NoETL-Signature: sha256=<HMAC-SHA256 of the body keyed by the
    token>` (only while `credentials.key` is set: the token is kept encrypted with it),
    starts the schedule's playbook."""
    return WebhookToken(name=name, token=new_webhook_token(deps.orchestrator, name, deps.keyring))


@router.delete(
    "/{name:path}",
    summary="Delete a schedule and its ticks",
    dependencies=[requires(Role.OPERATOR)],
    response_model=ScheduleDeleted,
    responses=_NOT_FOUND,
)
def delete_schedule(name: Name, deps: Deps) -> ScheduleDeleted:
    """A schedule from a playbook's triggers comes back when the playbook is registered
    again with them."""
    if not deps.store.schedules.delete(name):
        raise NotFoundError(f"schedule {name!r} does not exist")
    return ScheduleDeleted(name=name, deleted=True)
