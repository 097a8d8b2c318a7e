"""NATS helpers for tests: is JetStream there, K/V buckets, streams, publishing."""

from __future__ import annotations

import asyncio

import nats
import nats.js.errors
from nats.js.api import StreamConfig


def jetstream_reason(url: str) -> str | None:
    """None when NATS at `url` answers with JetStream enabled; else why not."""

    async def probe() -> None:
        nc = await nats.connect(
            url, connect_timeout=2, max_reconnect_attempts=1, reconnect_time_wait=0.1
        )
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(asyncio.wait_for(probe(), 10))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


def delete_bucket(url: str, bucket: str) -> None:
    """Delete K/V bucket `bucket` if it exists."""

    async def drop() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            await nc.jetstream().delete_key_value(bucket)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(drop(), 10))


def raw_get(url: str, bucket: str, key: str) -> bytes | None:
    """The value under `key` in `bucket` as NATS has it now (None: none, deleted or
    expired), bypassing the store."""

    async def get() -> bytes | None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            kv = await nc.jetstream().key_value(bucket)
            try:
                entry = await kv.get(key)
            except nats.js.errors.KeyNotFoundError:
                return None
            return entry.value
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(get(), 10))


def bucket_config(url: str, bucket: str) -> tuple[int, float | None]:
    """(history, ttl in seconds) of the bucket."""

    async def status() -> tuple[int, float | None]:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            kv = await nc.jetstream().key_value(bucket)
            found = await kv.status()
            return found.history, found.ttl
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(status(), 10))


def publish(
    url: str, subject: str, payloads: list[bytes], *, msg_ids: list[str | None] | None = None
) -> list[int]:
    """Publish each payload to JetStream (with its Nats-Msg-Id when given); the stream
    sequences NATS acknowledged."""

    async def send() -> list[int]:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            js = nc.jetstream()
            ids = msg_ids or [None] * len(payloads)
            sequences = []
            for payload, msg_id in zip(payloads, ids, strict=True):
                headers = {"Nats-Msg-Id": msg_id} if msg_id else None
                ack = await js.publish(subject, payload, headers=headers, timeout=5)
                sequences.append(ack.seq)
            return sequences
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(send(), 30))


def add_stream(url: str, name: str, subjects: list[str], *, duplicate_window: float) -> None:
    """Make stream `name` over `subjects` with that duplicate window (seconds)."""

    async def add() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            config = StreamConfig(name=name, subjects=subjects, duplicate_window=duplicate_window)
            await nc.jetstream().add_stream(config)
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(add(), 10))


def delete_stream(url: str, name: str) -> None:
    """Delete stream `name` if it exists."""

    async def drop() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            await nc.jetstream().delete_stream(name)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(drop(), 10))


def consumer_state(url: str, stream: str, durable: str) -> dict[str, int]:
    """What NATS knows of a consumer: messages not yet delivered (`pending`), delivered
    and not acknowledged (`ack_pending`), delivered more than once (`redelivered`), and
    the stream sequence of its acknowledged floor (`ack_floor`)."""

    async def info() -> dict[str, int]:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            found = await nc.jetstream().consumer_info(stream, durable)
            return {
                "pending": found.num_pending or 0,
                "ack_pending": found.num_ack_pending or 0,
                "redelivered": found.num_redelivered or 0,
                "ack_floor": (found.ack_floor.stream_seq or 0) if found.ack_floor else 0,
            }
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(info(), 10))


def consumer_config(url: str, stream: str, durable: str) -> str | None:
    """The subject a consumer is filtered on."""

    async def info() -> str | None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            found = await nc.jetstream().consumer_info(stream, durable)
            return found.config.filter_subject
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(info(), 10))
