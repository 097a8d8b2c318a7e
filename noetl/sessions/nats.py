"""The session store on a NATS JetStream K/V bucket (seed 004, phase 3).

One bucket (`noetl_sessions` by default) in memory storage, with the sessions' TTL as its
`max_age` (NATS drops a record that long after its last write, so an abandoned session
costs nothing) and 5 revisions kept per key (the history). A session's key is
`session.<sha256 of its token>`. Updates are optimistic: `touch` writes with
`update(key, value, last=revision)`, which NATS refuses when another write came first.

nats-py is asyncio-only and the API's routes are synchronous, so the store runs its own
event loop in a daemon thread and each call waits for its coroutine there (the hop costs
tens of microseconds). Expiry is also checked by the caller against `expires_at`, so a
session is refused on time whatever the bucket's TTL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors as js_errors
from nats.aio.client import Client as NatsClient
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from noetl.auth.sessions import HISTORY, Session, SessionConflictError, SessionRevision
from noetl.core import StoreUnavailableError
from noetl.redaction import mask_url

__all__ = ["DEFAULT_BUCKET", "NatsSessionStore"]

log = logging.getLogger("noetl.sessions")

DEFAULT_BUCKET = "noetl_sessions"
# Reads of a key's history before an empty answer is believed (see `_entries`).
HISTORY_READS = 3
_KEY_PREFIX = "session."
_T = TypeVar("_T")


def _encode(session: Session) -> bytes:
    return json.dumps(session.value(), separators=(",", ":")).encode("utf-8")


def _decode(key: str, revision: int, data: bytes) -> Session:
    return Session.from_value(key, revision, json.loads(data))


class NatsSessionStore:
    """`SessionStore` on a NATS K/V bucket; thread-safe. Raises StoreUnavailableError
    (naming the server, never its credentials) when NATS cannot be reached."""

    def __init__(
        self,
        url: str,
        *,
        bucket: str = DEFAULT_BUCKET,
        ttl_s: float = 86400,
        timeout_s: float = 2.0,
    ) -> None:
        self.url = url
        self.bucket = bucket
        self.ttl_s = ttl_s
        self._where = f"the NATS session store at {mask_url(url)} (bucket {bucket})"
        self._timeout = timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="noetl-nats-sessions", daemon=True
        )
        self._thread.start()
        try:
            self._nc, self._kv = self._run(self._open(), timeout=timeout_s * 3)
        except BaseException:
            self._stop_loop()
            raise

    def __repr__(self) -> str:
        return f"NatsSessionStore({mask_url(self.url)!r}, bucket={self.bucket!r})"

    # --- plumbing ----------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, _T], *, timeout: float | None = None) -> _T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout or self._timeout * 2)
        except (SessionConflictError, StoreUnavailableError):
            raise
        except TimeoutError:
            future.cancel()
            raise StoreUnavailableError(
                f"{self._where} did not answer in time", retryable=True
            ) from None
        except (nats.errors.Error, OSError) as exc:
            raise StoreUnavailableError(
                f"{self._where} is unavailable ({type(exc).__name__}: {exc})", retryable=True
            ) from None

    async def _open(self) -> tuple[NatsClient, KeyValue]:
        async def on_error(exc: Exception) -> None:
            log.warning("%s: %s", self._where, exc)

        nc = await nats.connect(
            self.url,
            name="noetl-sessions",
            connect_timeout=self._timeout,
            allow_reconnect=True,
            # nats-py retries its FIRST connection as these allow: fail fast if NATS is
            # not there when we start...
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=on_error,
        )
        # ...but once connected, reconnect for as long as it takes after a NATS restart
        # (calls fail with StoreUnavailableError meanwhile).
        nc.options["max_reconnect_attempts"] = -1
        nc.options["reconnect_time_wait"] = 1.0
        try:
            js = nc.jetstream(timeout=self._timeout)
            try:
                kv = await js.key_value(self.bucket)
            except js_errors.BucketNotFoundError:
                config = KeyValueConfig(
                    bucket=self.bucket,
                    history=HISTORY,
                    ttl=self.ttl_s,
                    storage=StorageType.MEMORY,
                    description="NoETL login sessions",
                )
                kv = await js.create_key_value(config)
            await self._align_ttl(kv, js)
        except BaseException:
            await nc.close()
            raise
        return nc, kv

    async def _align_ttl(self, kv: KeyValue, js: Any) -> None:
        """A bucket made with another TTL (the setting changed) gets this one."""
        status = await kv.status()
        if status.ttl is not None and abs(status.ttl - self.ttl_s) < 1e-3:
            return
        config = status.stream_info.config
        config.max_age = self.ttl_s
        await js.update_stream(config)
        log.info("%s: TTL set to %g s (was %s)", self._where, self.ttl_s, status.ttl)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    @staticmethod
    def _key(key: str) -> str:
        return _KEY_PREFIX + key

    # --- the store -----------------------------------------------------------------------

    def create(self, session: Session) -> Session:
        async def create() -> int:
            try:
                return await self._kv.create(self._key(session.key), _encode(session))
            except js_errors.KeyWrongLastSequenceError:
                raise SessionConflictError("a session with this key exists") from None

        revision = self._run(create())
        return Session.from_value(session.key, revision, session.value())

    def get(self, key: str) -> Session | None:
        async def get() -> Session | None:
            try:
                entry = await self._kv.get(self._key(key))
            except js_errors.KeyNotFoundError:  # none, deleted or dropped by the TTL
                return None
            if entry.value is None or entry.revision is None:
                return None
            return _decode(key, entry.revision, entry.value)

        return self._run(get())

    def touch(self, session: Session, now: float) -> Session:
        touched = session.touched(now)

        async def update() -> int:
            try:
                return await self._kv.update(
                    self._key(session.key), _encode(touched), last=session.revision
                )
            except js_errors.KeyWrongLastSequenceError:
                raise SessionConflictError(
                    f"the session changed since revision {session.revision}; read it again"
                ) from None

        revision = self._run(update())
        return Session.from_value(session.key, revision, touched.value())

    def delete(self, key: str, now: float) -> bool:
        async def delete() -> bool:
            try:
                await self._kv.get(self._key(key))
            except js_errors.KeyNotFoundError:
                return False
            await self._kv.delete(self._key(key))
            return True

        return self._run(delete())

    def history(self, key: str) -> list[SessionRevision]:
        async def history() -> list[SessionRevision]:
            entries = await self._entries(self._key(key))
            out = []
            for entry in entries[-HISTORY:]:
                revision = int(entry.revision or 0)
                at = entry.created.timestamp() if isinstance(entry.created, datetime) else 0.0
                if entry.operation in ("DEL", "PURGE") or not entry.value:
                    out.append(SessionRevision(revision, "delete", at))
                else:
                    session = _decode(key, revision, entry.value)
                    out.append(SessionRevision(revision, "put", at, session))
            return out

        return self._run(history())

    async def _entries(self, key: str) -> list[Any]:
        """The revisions NATS keeps of `key`, oldest first. nats-py's watcher may end
        before its first entry when the entries arrive before it has counted them (seen on
        a loaded machine): an empty history of a key that has a value is read again."""
        for _ in range(HISTORY_READS):
            try:
                return list(await self._kv.history(key))
            except js_errors.NoKeysError:
                try:
                    await self._kv.get(key)
                except js_errors.KeyNotFoundError:
                    return []
        return []

    def close(self) -> None:
        """Drain the connection and stop the loop thread."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._nc.drain(), timeout=self._timeout)
        except StoreUnavailableError:
            pass  # closing anyway
        finally:
            self._stop_loop()
