"""Bodies of `/api/schedules`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from noetl.server.schemas.common import Request, Response


class ScheduleCreate(Request):
    """A schedule made through the API: its `name`, the registered playbook it starts
    (`path`) and its trigger, as a playbook's `triggers:` entry without the name."""

    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$")
    path: str = Field(min_length=1, max_length=1024, description="catalog path of the playbook")
    trigger: dict[str, Any] = Field(
        description="cron or every, timezone, start, end, workload, overlap, catchup, "
        "catchup_window, paused (docs/schedules.md)"
    )


class TickOut(Response):
    tick: float = Field(description="the tick's time, epoch seconds")
    time: str = Field(description="the tick's time, ISO 8601 in the schedule's time zone")
    status: str = Field(description="pending, started, buffered, skipped or failed")
    manual: bool
    execution_id: str | None
    owner: str = Field(description="the server (host:pid) that claimed it")
    error: str | None = None
    claimed_at: float


class ScheduleOut(Response):
    name: str
    path: str
    source: str = Field(description="api, or playbook: made from its triggers block")
    paused: bool
    trigger: dict[str, Any]
    created_at: float
    updated_at: float
    next_ticks: list[str] = Field(description="the next ticks (ISO 8601), none while paused")
    last_tick: TickOut | None = Field(None, description="the newest tick, run now included")


class ScheduleList(Response):
    items: list[ScheduleOut]


class ScheduleDetail(ScheduleOut):
    ticks: list[TickOut] = Field(description="the latest ticks, newest first")


class ScheduleRun(Response):
    name: str
    execution_id: str | None = Field(description="None when the start failed: see `error`")
    error: str | None = None


class ScheduleDeleted(Response):
    name: str
    deleted: bool


class WebhookToken(Response):
    name: str
    token: str = Field(description="shown once: only its SHA-256 is kept")


class WebhookStarted(Response):
    name: str
    execution_id: str
    replayed: bool = Field(description="a repeated Idempotency-Key: the first execution")
