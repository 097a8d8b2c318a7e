"""What every NATS client of NoETL shares: nats-py is asyncio-only and NoETL's callers are
threads, so each client runs an event loop in a daemon thread of its own (`BackgroundLoop`)
and submits coroutines to it; a client that cannot reach NATS retries after `backoff`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["RETRY_S", "BackgroundLoop", "backoff"]

log = logging.getLogger("noetl.bus")

# Waits between attempts to reach NATS: quick at first, then every 2 s.
RETRY_S = (0.2, 0.5, 1.0, 2.0)
_T = TypeVar("_T")


def backoff(attempt: int) -> float:
    """How long to wait before attempt `attempt + 1` (0-based)."""
    return RETRY_S[min(attempt, len(RETRY_S) - 1)]


class BackgroundLoop:
    """An asyncio event loop running in a daemon thread named `name`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        """Run `coro` on the loop; its future, for a thread to wait on."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, last: Callable[[], Awaitable[None]] | None = None, timeout: float = 5) -> None:
        """Run `last()` on the loop (closing connections; at most `timeout` s), then stop
        the loop and its thread."""
        if last is not None:

            async def run_last() -> None:
                await last()

            try:
                self.submit(run_last()).result(timeout)
            except Exception as exc:
                log.debug("closing failed (%s)", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout)
        if not self._thread.is_alive():
            self.loop.close()
