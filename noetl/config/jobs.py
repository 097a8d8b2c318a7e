"""The settings of a server's background jobs: the scheduler loop and retention."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from noetl.config.durations import parse_duration
from noetl.config.section import Section

__all__ = ["RetentionSettings", "SchedulerSettings"]


class RetentionSettings(Section):
    """The server's retention job (`noetl db prune` on a timer): every `interval_s` it
    deletes the history of executions that finished over `older_than` ago (30d, 12h, 90m;
    a bare number is days), `batch` executions per transaction. Off by default."""

    enabled: bool = False
    older_than: str = "30d"
    interval_s: Annotated[float, Field(ge=1, le=7 * 86400)] = 3600.0
    batch: Annotated[int, Field(ge=1, le=100_000)] = 1000

    @field_validator("older_than", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            parse_duration(value)
            return str(value).strip()
        return value

    @property
    def older_than_s(self) -> float:
        return parse_duration(self.older_than)


class SchedulerSettings(Section):
    """The scheduler loop of `noetl server start` and `noetl ui` (noetl.runtime.scheduler):
    schedules are looked at every `poll_s`; a tick later than `grace_s` is missed (it
    fires only by its schedule's catch-up policy); a tick claimed but not started after
    `recover_after_s` (its server died) is started by another server."""

    enabled: bool = True
    poll_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    grace_s: Annotated[float, Field(gt=0, le=86_400)] = 5.0
    recover_after_s: Annotated[float, Field(gt=0, le=86_400)] = 10.0
