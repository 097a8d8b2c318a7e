"""API tokens read through a short-lived cache: a request's token check without a read of
the database when the same token was read a moment ago.

Without it every authenticated request reads its token's row (revocation is read on every
use), which costs a busy server more than routing the request. With it, a token found in
the last `ttl_s` seconds is taken from memory; its expiry is still checked on every use.
What it trades: a token revoked through another process (another server, or `noetl auth
token revoke` on the database) is still accepted here for at most `ttl_s` seconds. One
revoked through this process's API is dropped at once. Unknown tokens are never cached, so
a token created elsewhere works on its first use.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from noetl.auth import ApiToken, TokenStore

__all__ = ["DEFAULT_RECHECK_S", "CachedTokens"]

# `server.revocation_delay_s`: how long a token read stays trusted.
DEFAULT_RECHECK_S = 1.0
# At most this many tokens are kept; the oldest entry goes first.
MAX_ENTRIES = 4096


class CachedTokens:
    """A `TokenStore` that remembers the tokens it found for `ttl_s` seconds (see the
    module's docstring); `ttl_s` 0 reads the store every time. Thread-safe."""

    def __init__(
        self,
        tokens: TokenStore,
        *,
        ttl_s: float = DEFAULT_RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self.inner = tokens
        self.ttl_s = ttl_s
        self._clock = clock
        self._max = max_entries
        self._lock = threading.Lock()
        # key ("hash:<digest>" or "id:<token_id>") -> (read at, token)
        self._entries: dict[str, tuple[float, ApiToken]] = {}

    def create(self, token: ApiToken) -> None:
        self.inner.create(token)

    def find(self, token_hash: str) -> ApiToken | None:
        return self._read(f"hash:{token_hash}", lambda: self.inner.find(token_hash))

    def get(self, token_id: str) -> ApiToken | None:
        return self._read(f"id:{token_id}", lambda: self.inner.get(token_id))

    def peek(self, token_hash: str) -> ApiToken | None:
        """The token with this digest when it was read within `ttl_s`, else None (without
        reading the store: what a caller on an event loop may ask)."""
        with self._lock:
            entry = self._entries.get(f"hash:{token_hash}")
        if entry is None or self._clock() - entry[0] >= self.ttl_s:
            return None
        return entry[1]

    def all(self) -> list[ApiToken]:
        return self.inner.all()

    def revoke(self, token_id: str, now: float) -> ApiToken | None:
        token = self.inner.revoke(token_id, now)
        self._drop(token_id)
        return token

    def touch(self, token_id: str, now: float) -> None:
        self.inner.touch(token_id, now)
        with self._lock:  # the cached copies know it was used, or they would touch again
            for key, (read_at, token) in list(self._entries.items()):
                if token.token_id == token_id:
                    self._entries[key] = (read_at, dataclasses.replace(token, last_used_at=now))

    def _read(self, key: str, load: Callable[[], ApiToken | None]) -> ApiToken | None:
        if self.ttl_s <= 0:
            return load()
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and now - entry[0] < self.ttl_s:
            return entry[1]
        token = load()
        with self._lock:
            self._entries.pop(key, None)
            if token is None:
                return None
            while len(self._entries) >= self._max:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (now, token)
        return token

    def _drop(self, token_id: str) -> None:
        with self._lock:
            for key in [k for k, (_, t) in self._entries.items() if t.token_id == token_id]:
                del self._entries[key]
