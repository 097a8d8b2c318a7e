"""The relay loop: claim pending rows, publish, mark.

A pass runs in one transaction: the claimed rows stay locked (other relays skip them)
while they are published, and each is marked sent, retried later or dead in the same
transaction. A relay that dies mid-pass marks nothing: its transaction rolls back and
the rows are claimed again, their publish repeated with the same `Nats-Msg-Id`, which
JetStream drops as a duplicate within the stream's duplicate window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import sql

from noetl.core.backoff import backoff_seconds
from noetl.errors import ConfigError
from noetl.outbox.metrics import OutboxMetrics
from noetl.outbox.schema import CLAIM, COUNT_UNSENT, MARK_FAILED, MARK_SENT, outbox_table

__all__ = ["OutboxRow", "PublishError", "Publisher", "Relay", "RelayConfig"]

log = logging.getLogger("noetl.outbox")


class PublishError(Exception):
    """A publish that was not acknowledged (the row is retried)."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A claimed row: what is published, and how often it was tried before."""

    id: str
    subject: str
    payload: Any
    headers: dict[str, str]
    attempts: int


class Publisher(Protocol):
    """Publishes one message and returns once the broker acknowledged it; raises
    PublishError (or any exception) otherwise."""

    async def publish(
        self, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How the relay works; the defaults are the command's."""

    table: str = "outbox"
    subject_prefix: str = "outbox"
    batch: int = 100
    max_attempts: int = 10
    poll_s: float = 1.0
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 300.0
    # Test hook: seconds to wait after each acknowledged publish, before marking.
    pause_after_publish_s: float = 0.0

    def __post_init__(self) -> None:
        outbox_table(self.table)
        if self.batch < 1 or self.max_attempts < 1:
            raise ConfigError("outbox relay: --batch and --max-attempts must be at least 1")

    def subject(self, row_subject: str) -> str:
        """The subject a row is published to: the prefix, a dot, the row's subject."""
        return f"{self.subject_prefix}.{row_subject}" if self.subject_prefix else row_subject


def _headers(value: Any) -> dict[str, str]:
    # NATS headers are strings: a number or a flag in the column is sent as its text.
    if not isinstance(value, dict):
        return {}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}


def _payload(value: Any) -> bytes:
    if isinstance(value, str | bytes):
        return value.encode() if isinstance(value, str) else value
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


class Relay:
    """Moves pending rows of one outbox table to JetStream."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        publisher: Publisher,
        config: RelayConfig,
        metrics: OutboxMetrics | None = None,
        *,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if conn.info.vendor != "PostgreSQL":  # pragma: no cover - psycopg speaks PostgreSQL
            raise ConfigError("the outbox relay needs PostgreSQL")
        self._conn = conn
        self._publisher = publisher
        self.config = config
        self.metrics = metrics if metrics is not None else OutboxMetrics()
        self._rng = rng
        self._table = outbox_table(config.table)
        self.claimed = 0  # rows claimed by `run` so far

    def _q(self, query: sql.SQL) -> sql.Composed:
        return query.format(table=self._table)

    async def run_once(self) -> int:
        """One pass: claim up to a batch of due rows, publish and mark them; the number
        of rows claimed."""
        async with self._conn.transaction():
            cur = await self._conn.execute(self._q(CLAIM), {"batch": self.config.batch})
            rows = [
                OutboxRow(str(r[0]), str(r[1]), r[2], _headers(r[3]), int(r[4]))
                for r in await cur.fetchall()
            ]
            for row in rows:
                await self._deliver(row)
        await self.refresh_gauges()
        return len(rows)

    async def _deliver(self, row: OutboxRow) -> None:
        table = self.config.table
        try:
            await self._publisher.publish(
                self.config.subject(row.subject), _payload(row.payload), row.id, row.headers
            )
        except Exception as exc:  # any failure of the broker is a failed attempt
            await self._failed(row, f"{type(exc).__name__}: {exc}")
            return
        if self.config.pause_after_publish_s > 0:
            await asyncio.sleep(self.config.pause_after_publish_s)
        await self._conn.execute(self._q(MARK_SENT), {"id": row.id})
        self.metrics.published.child(table).inc()

    async def _failed(self, row: OutboxRow, error: str) -> None:
        attempt = row.attempts + 1
        dead = attempt >= self.config.max_attempts
        delay = (
            0.0
            if dead
            else backoff_seconds(
                attempt,
                initial=self.config.backoff_initial_s,
                max_delay=self.config.backoff_max_s,
                jitter=self._rng(),
            )
        )
        delay = delay if math.isfinite(delay) else self.config.backoff_max_s
        params = {"id": row.id, "error": error[:2000], "dead": dead, "delay": delay}
        await self._conn.execute(self._q(MARK_FAILED), params)
        self.metrics.failed.child(self.config.table).inc()
        if dead:
            self.metrics.dead_lettered.child(self.config.table).inc()
            log.error("outbox row %s dead after %d attempts: %s", row.id, attempt, error)
        else:
            log.warning(
                "outbox row %s attempt %d failed (retry in %.2fs): %s",
                row.id,
                attempt,
                delay,
                error,
            )

    async def refresh_gauges(self) -> tuple[int, float]:
        """Read the pending count and the oldest pending row's age into the gauges."""
        cur = await self._conn.execute(self._q(COUNT_UNSENT))
        found = await cur.fetchone()
        count, lag = (int(found[0]), float(found[1])) if found else (0, 0.0)
        self.metrics.unsent.child(self.config.table).set(count)
        self.metrics.lag.child(self.config.table).set(lag)
        return count, lag

    async def run(self, stopping: asyncio.Event, *, once: bool = False) -> int:
        """Pass after pass until `stopping` is set (or, with `once`, until no row is due);
        a full batch is followed by the next pass at once. The rows claimed in all."""
        start = self.claimed
        while not stopping.is_set():
            claimed = await self.run_once()
            self.claimed += claimed
            if once and claimed == 0:
                break
            if claimed < self.config.batch:
                await _wait(stopping, self.config.poll_s)
        return self.claimed - start


async def _wait(event: asyncio.Event, seconds: float) -> None:
    waiter: Awaitable[bool] = event.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(waiter, seconds)
