"""The task bus on NATS JetStream (nats-py, asyncio in a daemon thread of its own).

One memory stream (`NOETL_TASKS`) with work-queue retention on `noetl.tasks.>`: each
announcement is delivered to one consumer and gone once acknowledged. The workers of a pool
share one durable pull consumer filtered on their pool's subject, so one announcement wakes
one idle worker. Announcements older than `MAX_AGE_S` are dropped by NATS (a worker that
polls meanwhile claimed those tasks anyway); the stream keeps at most `MAX_PER_POOL` per
pool. After a reconnect (NATS restarted, the memory stream gone) the stream and the consumers
are declared again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Collection
from typing import Any

import nats
import nats.errors
import nats.js.errors as js_errors
from nats.aio.client import Client as NatsClient
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext

from noetl.bus import SUBJECT_PREFIX, subject_of
from noetl.bus.loop import BackgroundLoop, backoff
from noetl.redaction import mask_url

log = logging.getLogger("noetl.bus")

MAX_AGE_S = 60.0
MAX_PER_POOL = 10_000
# A commit queueing many tasks announces at most this many per pool: enough to wake every
# idle worker of a pool, each of which claims a window of tasks.
MAX_ANNOUNCE = 64
_CONSUMER_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class NatsTaskBus:
    """`TaskBus` on NATS JetStream; thread-safe."""

    def __init__(self, url: str, *, stream: str = "NOETL_TASKS") -> None:
        self._url = url
        self._stream = stream
        self._background = BackgroundLoop("noetl-bus")
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._subs: dict[str, Any] = {}
        self._redeclaring: asyncio.Future[None] | None = None
        self._ready = threading.Event()  # connected and the stream declared
        self._closing = False
        self._connecting = self._background.submit(self._connect())

    @property
    def connected(self) -> bool:
        nc = self._nc
        return self._ready.is_set() and nc is not None and nc.is_connected

    def wait_connected(self, timeout: float) -> bool:
        return self._ready.wait(timeout) and self.connected

    # --- connecting -------------------------------------------------------------------

    async def _connect(self) -> None:
        attempt = 0
        while not self._closing:
            try:
                self._nc = await nats.connect(
                    self._url,
                    connect_timeout=2,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    error_cb=self._on_error,
                )
                self._js = self._nc.jetstream()
                await self._declare()
                log.info("task bus connected to %s", mask_url(self._url))
                return
            except Exception as exc:  # NATS away at start: keep trying in the background
                if self._nc is not None:
                    await self._nc.close()
                    self._nc = None
                log.warning("task bus %s unreachable (%s); retrying", mask_url(self._url), exc)
                await asyncio.sleep(backoff(attempt))
                attempt += 1

    async def _declare(self) -> None:
        assert self._js is not None
        config = StreamConfig(
            name=self._stream,
            subjects=[f"{SUBJECT_PREFIX}.>"],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.MEMORY,
            max_age=MAX_AGE_S,
            max_msgs_per_subject=MAX_PER_POOL,
            discard=DiscardPolicy.OLD,
        )
        try:
            await self._js.add_stream(config)
        except js_errors.BadRequestError:
            await self._js.update_stream(config)
        self._subs.clear()
        self._ready.set()

    async def _on_disconnected(self) -> None:
        self._ready.clear()
        log.warning("task bus disconnected; workers wait on the database meanwhile")

    async def _on_reconnected(self) -> None:
        # A restarted server may have lost the memory stream; its JetStream may also not
        # answer yet, so the declaration is tried again until it holds (in a task of its
        # own: the client's reconnect routine awaits this callback).
        if self._redeclaring is None or self._redeclaring.done():
            self._redeclaring = asyncio.ensure_future(self._declare_again())

    async def _declare_again(self) -> None:
        attempt = 0
        while not self._closing:
            nc = self._nc
            if nc is None or not nc.is_connected:
                return  # disconnected again: the next reconnect declares
            try:
                await self._declare()
                log.info("task bus reconnected")
                return
            except Exception as exc:
                log.warning("task bus: declaring the stream again failed (%s); retrying", exc)
                await asyncio.sleep(backoff(attempt))
                attempt += 1

    async def _on_error(self, exc: Exception) -> None:
        log.debug("task bus: %s", exc)

    # --- publishing -------------------------------------------------------------------

    def announce(self, pools: Collection[str]) -> None:
        if not pools or not self.connected:
            return
        counts: dict[str, int] = {}
        for pool in pools:
            counts[pool] = min(counts.get(pool, 0) + 1, MAX_ANNOUNCE)
        self._background.call_soon(self._publish, counts)

    def _publish(self, counts: dict[str, int]) -> None:
        self._background.loop.create_task(self._publish_all(counts))

    async def _publish_all(self, counts: dict[str, int]) -> None:
        nc = self._nc
        if nc is None:
            return
        try:
            for pool, count in counts.items():
                subject = subject_of(pool)
                for _ in range(count):
                    await nc.publish(subject, b"")
        except Exception as exc:  # a hint lost: the workers' polling covers it
            log.debug("task bus: announcement dropped (%s)", exc)

    # --- waiting ----------------------------------------------------------------------

    def wait(self, pool: str, timeout: float) -> bool | None:
        if not self.connected:
            return None
        future = self._background.submit(self._fetch(pool, timeout))
        try:
            return future.result(timeout + 5)
        except Exception as exc:
            log.debug("task bus: waiting failed (%s)", exc)
            future.cancel()
            return None

    async def _fetch(self, pool: str, timeout: float) -> bool | None:
        try:
            sub = self._subs.get(pool)
            if sub is None:
                assert self._js is not None
                durable = "noetl_" + _CONSUMER_UNSAFE.sub("_", pool)
                sub = await self._js.pull_subscribe(
                    subject_of(pool),
                    durable=durable,
                    stream=self._stream,
                    config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=30),
                )
                self._subs[pool] = sub
            messages = await sub.fetch(1, timeout=max(timeout, 0.01))
        except nats.errors.TimeoutError:
            return False
        except Exception as exc:  # the consumer vanished (NATS restarted): declare again
            log.debug("task bus: fetch failed (%s)", exc)
            self._subs.pop(pool, None)
            return None
        for msg in messages:
            await msg.ack()
        return bool(messages)

    def close(self) -> None:
        self._closing = True

        async def _close() -> None:
            if self._redeclaring is not None:
                self._redeclaring.cancel()
            if self._nc is not None:
                await self._nc.close()

        if not self._connecting.done():
            self._connecting.cancel()
        self._background.stop(_close)
