"""A playbook's `triggers:` block: schedules that start it by themselves.

Each entry names a schedule of the playbook: `cron` (in `timezone`) or `every`, optional
`start`/`end`, the `workload` each run gets (templated with the tick: `{{ tick.time }}`),
what a tick does while the previous run still runs (`overlap`) and which ticks missed
while no server was up still fire (`catchup`, within `catchup_window`). The arithmetic
is `noetl.core.ticks`; registering the playbook in the catalog creates its schedules.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from noetl.core.ticks import Catchup, Overlap, TickSpec, parse_duration, valid_cron, zone

__all__ = ["NatsSource", "Trigger", "trigger_spec", "unique_triggers"]

TRIGGER_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
# A NATS subject: dot-separated tokens, `*` and a last `>` as wildcards, no spaces.
NATS_SUBJECT = r"^[^\s.]+(\.[^\s.]+)*$"
STREAM_NAME = r"^[A-Za-z0-9_-]+$"
Duration = Annotated[str | float, Field(description="seconds, or 30s / 5m / 1h30m / 500ms / 2d")]


class NatsSource(BaseModel):
    """A NATS JetStream subject whose messages each start one execution."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: Annotated[str, StringConstraints(pattern=NATS_SUBJECT, max_length=255)]
    stream: Annotated[str, StringConstraints(pattern=STREAM_NAME, max_length=64)] | None = Field(
        default=None, description="the stream holding it; default: made when missing"
    )
    url: str | None = Field(
        default=None, description="the NATS server; default triggers.nats_url, else bus.url"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme.lower() not in ("nats", "tls", "ws", "wss") or not rest:
            raise PydanticCustomError(
                "url", "must be a nats://host:port URL (or tls://, ws://, wss://)"
            )
        return value.strip()


class Trigger(BaseModel):
    """One schedule of a playbook."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, StringConstraints(pattern=TRIGGER_NAME, max_length=128)]
    cron: str | None = Field(default=None, description="5 fields (6: seconds last)")
    every: Duration | None = None
    webhook: bool = Field(
        default=False,
        description="no time table: started by POST /api/triggers/{schedule} with its token",
    )
    nats: NatsSource | None = Field(
        default=None, description="no time table: one execution per message on a subject"
    )
    timezone: str = Field(default="UTC", description="IANA zone the cron is read in")
    start: datetime | None = None
    end: datetime | None = None
    workload: dict[str, Any] = Field(default_factory=dict)
    overlap: Overlap = Overlap.SKIP
    catchup: Catchup = Catchup.LATEST
    catchup_window: Duration = "1h"
    paused: bool = False

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not valid_cron(value):
            raise PydanticCustomError(
                "cron",
                "'{value}' is not a cron expression (5 fields, 6 with seconds)",
                {"value": value},
            )
        return value

    @field_validator("every", "catchup_window")
    @classmethod
    def _duration(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            try:
                parse_duration(value)
            except ValueError as exc:
                raise PydanticCustomError("duration", str(exc)) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zone(value)
        except ValueError as exc:
            raise PydanticCustomError("timezone", str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_of(self) -> Trigger:
        kinds = (self.cron is not None) + (self.every is not None) + (self.nats is not None)
        if kinds + self.webhook != 1:
            raise PydanticCustomError(
                "trigger", "a trigger has exactly one of cron, every, nats and webhook: true"
            )
        start, end = _epoch(self.start), _epoch(self.end)
        if start is not None and end is not None and end < start:
            raise PydanticCustomError("trigger", "end is before start")
        return self


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    if value.tzinfo is None:  # a date without an offset is UTC
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def trigger_spec(trigger: Trigger) -> TickSpec | None:
    """The tick arithmetic's view of a trigger; None for a webhook or a NATS subject (no
    time table)."""
    if trigger.webhook or trigger.nats is not None:
        return None
    return TickSpec(
        cron=trigger.cron,
        every=None if trigger.every is None else parse_duration(trigger.every),
        timezone=trigger.timezone,
        start=_epoch(trigger.start),
        end=_epoch(trigger.end),
        catchup=trigger.catchup,
        catchup_window=parse_duration(trigger.catchup_window),
    )


def unique_triggers(triggers: list[Trigger]) -> list[Trigger]:
    """`triggers`, unless two share a name (a schedule is named by the playbook's path and
    the trigger's name)."""
    seen: set[str] = set()
    for trigger in triggers:
        if trigger.name in seen:
            raise PydanticCustomError(
                "trigger", "two triggers are named '{name}'", {"name": trigger.name}
            )
        seen.add(trigger.name)
    return triggers
