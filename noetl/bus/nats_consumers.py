"""The consumers of `noetl.bus.subscriptions` on NATS JetStream (nats-py, on a
`BackgroundLoop`).

Each subscription is an asyncio task with a connection of its own: it finds the stream
holding the subject (or makes one: `stream_name`, file storage), binds the durable pull
consumer named after the schedule (`durable_name`, explicit acks, `ack_wait_s`), and
fetches a few messages at a time, handing each to the handler in a worker thread and
acting on its verdict before the next. NATS away: the task retries with `backoff`,
logging once when the outage starts and once when it ends; nothing here raises into
the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

import nats
import nats.errors
import nats.js.errors as js_errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from noetl.bus.loop import BackgroundLoop, backoff
from noetl.bus.subscriptions import (
    Handler,
    Message,
    Subscription,
    Verdict,
    durable_name,
    stream_name,
)
from noetl.redaction import mask_url

log = logging.getLogger("noetl.triggers")

BATCH = 8  # messages fetched at once (each is handled, and acked, before the next)
FETCH_WAIT_S = 1.0  # how long a fetch waits for a message before asking again
MSG_ID = "Nats-Msg-Id"


class NatsConsumers:
    """`Consumers` on NATS JetStream; thread-safe."""

    def __init__(self, handler: Handler, *, nak_delay_s: float = 5.0) -> None:
        self._handler = handler
        self._nak_delay = nak_delay_s
        self._background = BackgroundLoop("noetl-triggers")
        self._running: dict[str, tuple[Subscription, asyncio.Task[None]]] = {}

    def sync(self, wanted: Collection[Subscription]) -> None:
        self._background.call_soon(self._sync, list(wanted))

    def _sync(self, wanted: list[Subscription]) -> None:
        by_name = {sub.name: sub for sub in wanted}
        for name, (sub, task) in list(self._running.items()):
            if by_name.get(name) != sub or task.done():
                task.cancel()
                del self._running[name]
        for name, sub in by_name.items():
            if name not in self._running:
                task = self._background.loop.create_task(self._consume(sub))
                self._running[name] = (sub, task)

    def running(self) -> list[str]:
        """The schedules consumed now (for tests and logs)."""
        future = self._background.submit(self._names())
        return future.result(5)

    async def _names(self) -> list[str]:
        return sorted(n for n, (_, task) in self._running.items() if not task.done())

    # --- one subscription ---------------------------------------------------------------

    async def _consume(self, sub: Subscription) -> None:
        where = f"nats trigger {sub.name} ({sub.subject} at {mask_url(sub.url)})"
        nc: NatsClient | None = None
        attempt, down = 0, False
        try:
            while True:
                try:
                    if nc is None or nc.is_closed:
                        nc = await _connect(sub.url)
                    pull = await _bind(nc.jetstream(), sub)
                    if down or attempt:
                        log.info("%s: consuming again", where)
                    else:
                        log.info("%s: consuming", where)
                    attempt, down = 0, False
                    await self._fetch_loop(nc, pull, sub)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if not down:  # once per outage
                        log.warning("%s: cannot consume (%s); retrying", where, _why(exc))
                        down = True
                    await asyncio.sleep(backoff(attempt))
                    attempt += 1
        finally:
            if nc is not None and not nc.is_closed:
                await nc.close()

    async def _fetch_loop(
        self, nc: NatsClient, pull: JetStreamContext.PullSubscription, sub: Subscription
    ) -> None:
        while True:
            try:
                messages = await pull.fetch(BATCH, timeout=FETCH_WAIT_S)
            except nats.errors.TimeoutError:
                if not nc.is_connected:  # not an empty subject: NATS went away
                    raise ConnectionError("disconnected from NATS") from None
                continue
            for msg in messages:
                await self._handle(sub, msg)

    async def _handle(self, sub: Subscription, msg: Msg) -> None:
        meta = msg.metadata
        key = (msg.headers or {}).get(MSG_ID) or f"{meta.stream}:{meta.sequence.stream}"
        message = Message(
            subject=msg.subject,
            data=msg.data,
            key=key,
            stream=meta.stream,
            sequence=meta.sequence.stream,
            published=meta.timestamp.timestamp(),
            delivered=meta.num_delivered,
        )
        loop = asyncio.get_running_loop()
        try:
            verdict = await loop.run_in_executor(None, self._handler, sub, message)
        except Exception:
            log.exception("nats trigger %s: handling message %s failed", sub.name, key)
            verdict = Verdict.NAK
        try:
            if verdict is Verdict.ACK:
                await msg.ack_sync()  # confirmed: NATS will not deliver it again
            elif verdict is Verdict.TERM:
                await msg.term()
            else:
                await msg.nak(delay=self._nak_delay)
        except (TimeoutError, nats.errors.Error) as exc:
            # NATS delivers it again after the ack wait; the handler knows it by its key.
            log.warning(
                "nats trigger %s: %s of message %s not confirmed (%s)",
                sub.name,
                verdict.value,
                key,
                _why(exc),
            )

    def close(self) -> None:
        async def stop_all() -> None:
            tasks = [task for _, task in self._running.values()]
            self._running.clear()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self._background.stop(stop_all)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _connect(url: str) -> NatsClient:
    nc = await nats.connect(
        url,
        name="noetl-triggers",
        connect_timeout=2,
        allow_reconnect=True,
        max_reconnect_attempts=1,  # fail fast when NATS is not there at first...
        reconnect_time_wait=0.5,
        error_cb=_quiet,
    )
    # ...but once connected, reconnect for as long as it takes (the fetches fail meanwhile).
    nc.options["max_reconnect_attempts"] = -1
    return nc


async def _quiet(exc: Exception) -> None:
    log.debug("nats trigger connection: %s", exc)


async def _bind(js: JetStreamContext, sub: Subscription) -> JetStreamContext.PullSubscription:
    """The schedule's durable pull consumer, made (with the stream) when missing."""
    stream = sub.stream
    if stream is None:
        try:
            stream = await js.find_stream_name_by_subject(sub.subject)
        except js_errors.NotFoundError:
            stream = stream_name(sub.subject)
            made = StreamConfig(name=stream, subjects=[sub.subject], storage=StorageType.FILE)
            try:
                await js.add_stream(made)
                log.info("nats trigger %s: made stream %s for %s", sub.name, stream, sub.subject)
            except js_errors.BadRequestError:
                pass  # another server made it first
    config = ConsumerConfig(
        durable_name=durable_name(sub.name),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=sub.ack_wait_s,
        filter_subject=sub.subject,
        max_ack_pending=1000,
    )
    try:
        found = await js.consumer_info(stream, durable_name(sub.name))
    except js_errors.NotFoundError:
        pass
    else:  # made for an earlier version of the trigger: brought to this one
        kept = found.config
        if kept.filter_subject != sub.subject or kept.ack_wait != sub.ack_wait_s:
            await js.add_consumer(stream, config=config)
            log.info("nats trigger %s: consumer updated", sub.name)
    return await js.pull_subscribe(
        sub.subject, durable=durable_name(sub.name), stream=stream, config=config
    )
