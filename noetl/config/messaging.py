"""The settings of the services NoETL speaks to beside its database (NATS: login
sessions, the task bus, the NATS triggers); sections of `noetl.config.model.Settings`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from noetl.config.section import Section

__all__ = [
    "BusSettings",
    "SessionsSettings",
    "TriggersSettings",
]


_BUCKET = r"^[a-zA-Z0-9_-]+$"


def _check_nats_url(value: str) -> str:
    scheme, sep, rest = value.strip().partition("://")
    if not sep or scheme.lower() not in ("nats", "tls", "ws", "wss") or not rest:
        raise ValueError("must be a nats://host:port URL (or tls://, ws://, wss://)")
    return value.strip()


class SessionsSettings(Section):
    """Login sessions (opened with an API token, used as a bearer credential)."""

    backend: Literal["database", "nats"] = "database"
    nats_url: Annotated[str, Field(min_length=1)] = "nats://127.0.0.1:4222"
    nats_bucket: Annotated[str, Field(min_length=1, max_length=64, pattern=_BUCKET)] = (
        "noetl_sessions"
    )
    ttl_s: Annotated[int, Field(ge=1, le=31 * 86400)] = 86400

    @field_validator("nats_url")
    @classmethod
    def _nats_url(cls, value: str) -> str:
        return _check_nats_url(value)


class BusSettings(Section):
    """The task bus (NATS JetStream): announcements of new tasks that wake workers at once;
    the database's queue stays the source of truth. Unset: workers wait on the database."""

    url: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return _check_nats_url(value)


class TriggersSettings(Section):
    """Event triggers (noetl.runtime.nats_triggers): the NATS server a `nats:` trigger
    without its own `url` consumes from (unset: `bus.url`), and how long a message may
    stay unacknowledged before NATS delivers it again (its server died mid-way)."""

    nats_url: str | None = None
    nats_ack_wait_s: Annotated[float, Field(ge=1, le=3600)] = 30.0

    @field_validator("nats_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        return _check_nats_url(value)
