"""The relay as a service: it keeps relaying across lost database connections.

A connection lost mid-pass rolls that pass back (its rows are published again, with the
same ids, by the next one); the relay connects again after the shared backoff, until it is
stopped. A first connection that fails, or a table that does not exist, is a ConfigError:
there is nothing to wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import errors

from noetl.core.backoff import backoff_seconds
from noetl.errors import ConfigError
from noetl.outbox.metrics import OutboxMetrics
from noetl.outbox.relay import Publisher, Relay, RelayConfig
from noetl.outbox.schema import create_table_sql

__all__ = ["serve"]

log = logging.getLogger("noetl.outbox")

Connect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


async def serve(
    connect: Connect,
    publisher: Publisher,
    config: RelayConfig,
    metrics: OutboxMetrics,
    stopping: asyncio.Event,
    *,
    once: bool = False,
    create_table: bool = False,
) -> int:
    """Relay until `stopping` is set (or, with `once`, until no row is due); the rows
    claimed in all."""
    total, lost = 0, 0
    first = True
    while not stopping.is_set():
        try:
            conn = await connect()
        except psycopg.OperationalError as exc:
            if first:
                raise ConfigError(f"cannot open the outbox database: {exc}") from None
            lost += 1
            await _pause(stopping, lost, f"cannot reconnect to the outbox database: {exc}")
            continue
        first, lost = False, 0
        relay = Relay(conn, publisher, config, metrics)
        try:
            async with conn:
                if create_table:
                    await conn.execute(create_table_sql(config.table))
                await relay.run(stopping, once=once)
                return total + relay.claimed
        except errors.UndefinedTable:
            raise ConfigError(
                f"outbox table {config.table} does not exist: create it with "
                "`noetl outbox init` or --create-table"
            ) from None
        except psycopg.OperationalError as exc:
            total += relay.claimed
            lost += 1
            await _pause(stopping, lost, f"lost the outbox database: {exc}")
    return total


async def _pause(stopping: asyncio.Event, lost: int, why: str) -> None:
    delay = backoff_seconds(lost, initial=0.5, max_delay=30.0)
    log.warning("%s (again in %.1fs)", " ".join(why.split()), delay)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), delay)
