"""The JetStream side of the relay: the stream (created when missing, with its duplicate
window) and a Publisher that waits for each publish's ack."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import nats
import nats.errors
import nats.js.errors as js_errors
from nats.aio.client import Client as NatsClient
from nats.js.api import StreamConfig

from noetl.errors import ConfigError
from noetl.outbox.relay import PublishError

__all__ = ["JetStreamPublisher", "connect", "ensure_stream"]

log = logging.getLogger("noetl.outbox")


async def connect(url: str, *, timeout_s: float = 15.0) -> NatsClient:
    """A NATS connection that reconnects for ever once made; ConfigError naming the URL
    when it cannot be made within `timeout_s`."""
    try:
        # Reconnects without end also keep an unreachable first connect retrying: bounded.
        return await asyncio.wait_for(
            nats.connect(
                url, connect_timeout=5, max_reconnect_attempts=-1, error_cb=_connection_error
            ),
            timeout_s,
        )
    except TimeoutError:
        raise ConfigError(f"cannot connect to NATS at {url} within {timeout_s:g}s") from None
    except (nats.errors.Error, OSError) as exc:
        raise ConfigError(f"cannot connect to NATS at {url}: {exc}") from None


async def _connection_error(exc: Exception) -> None:
    # One line per failed (re)connect, not the client's default traceback.
    log.warning("nats: %s: %s", type(exc).__name__, exc)


async def ensure_stream(
    nc: NatsClient, name: str, subjects: list[str], duplicate_window_s: float
) -> bool:
    """Create stream `name` over `subjects` when it does not exist (True when created).
    An existing stream is left as it is."""
    js = nc.jetstream()
    try:
        await js.stream_info(name)
        return False
    except js_errors.NotFoundError:
        pass
    config = StreamConfig(name=name, subjects=subjects, duplicate_window=duplicate_window_s)
    await js.add_stream(config)
    return True


class JetStreamPublisher:
    """Publishes with `Nats-Msg-Id` and waits for the ack (at most `timeout_s`)."""

    def __init__(self, nc: NatsClient, *, timeout_s: float = 5.0) -> None:
        self._js = nc.jetstream(timeout=timeout_s)
        self._timeout = timeout_s

    async def publish(
        self, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]
    ) -> None:
        sent: dict[str, Any] = {**headers, "Nats-Msg-Id": msg_id}
        try:
            await self._js.publish(subject, payload, timeout=self._timeout, headers=sent)
        except (nats.errors.Error, js_errors.Error, OSError) as exc:
            raise PublishError(f"{type(exc).__name__}: {exc}") from exc
