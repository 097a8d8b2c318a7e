"""NATS helpers for tests: is JetStream there, and drop a test's K/V bucket."""

from __future__ import annotations

import asyncio

import nats
import nats.js.errors


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
