"""Login sessions (seed 004, phase 3): a session opened with an API token, usable as a
bearer credential until it expires or is logged out.

    base     Session, SessionRevision, SessionStore (the port), SessionConflictError
    manager  Sessions: login, check, logout, history over a SessionStore
    nats     NatsSessionStore: a NATS JetStream K/V bucket (imports nats-py)
    open_session_store(settings, store): the store `sessions.backend` names

The database adapters are `store.sessions` of every Store (noetl.store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from noetl.auth.sessions import (
    HISTORY,
    Session,
    SessionConflictError,
    SessionRevision,
    SessionStore,
)
from noetl.config.extras import check_sessions
from noetl.sessions.manager import DEFAULT_TTL_S, Sessions

if TYPE_CHECKING:
    from noetl.config.messaging import SessionsSettings
    from noetl.store.base import Store

__all__ = [
    "DEFAULT_TTL_S",
    "HISTORY",
    "Session",
    "SessionConflictError",
    "SessionRevision",
    "SessionStore",
    "Sessions",
    "open_session_store",
]


def open_session_store(settings: SessionsSettings, store: Store) -> SessionStore:
    """`store.sessions` for `backend: database`; a NATS K/V store for `backend: nats`
    (connected now: StoreUnavailableError if NATS cannot be reached; MissingExtraError
    without the `nats` extra)."""
    if settings.backend == "database":
        return store.sessions
    check_sessions(settings)  # MissingExtraError without nats-py
    from noetl.sessions.nats import NatsSessionStore  # noqa: PLC0415 - only this backend needs nats-py

    return NatsSessionStore(settings.nats_url, bucket=settings.nats_bucket, ttl_s=settings.ttl_s)
