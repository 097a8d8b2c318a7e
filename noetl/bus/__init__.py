"""The task bus (seed 004): NATS JetStream announcements that wake workers.

The store's queue stays the source of truth (leases, fencing tokens, the event log). After
a commit that queues tasks, the process that committed publishes an announcement per new
task on `noetl.tasks.<pool>` (a work-queue stream); an idle worker of that pool pulls one
and claims from the database as it always does. An announcement is only a wake-up: a lost
one costs at most the worker's polling interval, a duplicate one a claim that finds nothing.
While NATS is unreachable the worker waits on the database's notifications instead, and the
bus reconnects in the background.

nats-py is imported only when a bus is opened (`open_bus`), so the CLI stays light.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Protocol

__all__ = ["SUBJECT_PREFIX", "TaskBus", "attach_bus", "open_bus", "subject_of"]

SUBJECT_PREFIX = "noetl.tasks"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def subject_of(pool: str) -> str:
    """The subject of a pool's announcements (characters NATS treats specially become _)."""
    return f"{SUBJECT_PREFIX}.{_UNSAFE.sub('_', pool)}"


class TaskBus(Protocol):
    def announce(self, pools: Collection[str]) -> None:
        """Publish one announcement per entry (a pool per new task); never blocks, never
        raises: while NATS is away the announcements are dropped."""

    def wait(self, pool: str, timeout: float) -> bool | None:
        """Wait for an announcement on `pool`: True when one came, False at the timeout,
        None at once when the bus is not connected (the caller waits on the database)."""

    def close(self) -> None: ...


def open_bus(url: str, *, stream: str = "NOETL_TASKS") -> TaskBus:
    """A bus on the NATS server at `url`; it connects in the background (and reconnects)."""
    from noetl.bus.nats_bus import NatsTaskBus  # noqa: PLC0415 - nats loads only here

    return NatsTaskBus(url, stream=stream)


def attach_bus(store: object, url: str | None) -> TaskBus | None:
    """Open the bus at `url` (None: no bus) and have `store` announce the tasks its commits
    make claimable. Only the PostgreSQL store announces: the others serve one process."""
    if not url:
        return None
    bus = open_bus(url)
    from noetl.store.postgres import PostgresStore  # noqa: PLC0415 - psycopg only here

    if isinstance(store, PostgresStore):
        store.announce_tasks = bus.announce
    return bus
