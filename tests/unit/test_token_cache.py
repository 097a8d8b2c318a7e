"""The short-lived cache of API tokens in front of the token store (noetl.auth.cache)."""

from __future__ import annotations

import threading

import pytest

from noetl.auth import ApiToken, Role, hash_secret, issue_token
from noetl.auth.cache import CachedTokens
from noetl.errors import AuthenticationError
from noetl.server.auth import Gate
from noetl.sessions.manager import Sessions
from noetl.store._memory_auth import MemorySessions, MemoryTokens


class CountingTokens(MemoryTokens):
    """The memory token store, counting its reads."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.reads = 0

    def find(self, token_hash: str) -> ApiToken | None:
        self.reads += 1
        return super().find(token_hash)

    def get(self, token_id: str) -> ApiToken | None:
        self.reads += 1
        return super().get(token_id)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def inner() -> CountingTokens:
    return CountingTokens()


def cached(inner: CountingTokens, clock: Clock, ttl_s: float = 1.0, **kw: int) -> CachedTokens:
    return CachedTokens(inner, ttl_s=ttl_s, clock=clock, **kw)


def gated(inner: CountingTokens, clock: Clock, *, ttl_s: float) -> tuple[CachedTokens, Gate]:
    """The cache over `inner`, and a gate that checks tokens through it at `clock`."""
    tokens = cached(inner, clock, ttl_s=ttl_s)
    return tokens, Gate(tokens, Sessions(MemorySessions(threading.Lock())), clock=lambda: clock.now)


def test_a_token_found_a_moment_ago_is_not_read_again(inner: CountingTokens, clock: Clock) -> None:
    tokens = cached(inner, clock)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    for _ in range(5):
        assert tokens.find(hash_secret(secret)) == record
    assert inner.reads == 1
    clock.now += 1.0  # the entry's time is up: read again
    assert tokens.find(hash_secret(secret)) == record
    assert inner.reads == 2


def test_a_token_revoked_elsewhere_is_seen_once_the_entry_is_old(
    inner: CountingTokens, clock: Clock
) -> None:
    tokens = cached(inner, clock)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    assert tokens.find(hash_secret(secret)) is not None
    inner.revoke(record.token_id, clock.now)  # another process, straight to the database
    clock.now += 0.5
    found = tokens.find(hash_secret(secret))
    assert found is not None and not found.revoked  # within the cache's time: trusted
    clock.now += 0.5
    found = tokens.find(hash_secret(secret))
    assert found is not None and found.revoked


def test_a_token_revoked_through_the_cache_is_dropped_at_once(
    inner: CountingTokens, clock: Clock
) -> None:
    tokens = cached(inner, clock)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    assert tokens.find(hash_secret(secret)) is not None
    assert tokens.get(record.token_id) is not None
    revoked = tokens.revoke(record.token_id, clock.now)
    assert revoked is not None and revoked.revoked
    found = tokens.find(hash_secret(secret))
    by_id = tokens.get(record.token_id)
    assert found is not None and found.revoked
    assert by_id is not None and by_id.revoked


def test_an_unknown_token_is_never_cached(inner: CountingTokens, clock: Clock) -> None:
    tokens = cached(inner, clock)
    secret = "noetl_not-yet-created"
    assert tokens.find(hash_secret(secret)) is None
    assert tokens.find(hash_secret(secret)) is None
    assert inner.reads == 2
    # Created elsewhere a moment later: it works on its first use.
    inner.create(ApiToken("tok_1", "t", Role.VIEWER, hash_secret(secret), created_at=clock.now))
    assert tokens.find(hash_secret(secret)) is not None


def test_a_touch_reaches_the_cached_copies(inner: CountingTokens, clock: Clock) -> None:
    tokens = cached(inner, clock)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    assert tokens.find(hash_secret(secret)) is not None
    tokens.touch(record.token_id, 1234.0)
    found = tokens.find(hash_secret(secret))
    assert found is not None and found.last_used_at == 1234.0
    assert inner.reads == 1


def test_no_time_reads_every_time(inner: CountingTokens, clock: Clock) -> None:
    tokens = cached(inner, clock, ttl_s=0)
    secret, _ = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    for _ in range(3):
        tokens.find(hash_secret(secret))
    assert inner.reads == 3


def test_the_cache_keeps_at_most_its_number_of_entries(inner: CountingTokens, clock: Clock) -> None:
    tokens = cached(inner, clock, max_entries=3)
    secrets = [
        issue_token(tokens, role=Role.VIEWER, name=f"t{i}", now=clock.now)[0] for i in range(5)
    ]
    for secret in secrets:
        tokens.find(hash_secret(secret))
    assert len(tokens._entries) == 3
    inner.reads = 0
    tokens.find(hash_secret(secrets[-1]))  # the newest stayed
    tokens.find(hash_secret(secrets[0]))  # the oldest went
    assert inner.reads == 1


def test_the_gate_through_the_cache_refuses_a_token_revoked_through_it(
    inner: CountingTokens, clock: Clock
) -> None:
    tokens, gate = gated(inner, clock, ttl_s=30)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    assert gate.authenticate(secret).token_id == record.token_id
    assert gate.authenticate(secret).token_id == record.token_id
    assert inner.reads == 1
    tokens.revoke(record.token_id, clock.now)
    with pytest.raises(AuthenticationError):
        gate.authenticate(secret)


def test_an_expired_token_is_refused_even_when_cached(inner: CountingTokens, clock: Clock) -> None:
    tokens, gate = gated(inner, clock, ttl_s=30)
    secret, _ = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now, expires_in_s=5)
    assert gate.authenticate(secret).role is Role.OPERATOR
    clock.now += 5
    with pytest.raises(AuthenticationError):
        gate.authenticate(secret)
    assert inner.reads == 1


def test_the_gate_answers_at_once_only_from_a_fresh_cached_token(
    inner: CountingTokens, clock: Clock
) -> None:
    tokens, gate = gated(inner, clock, ttl_s=90)
    secret, record = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now)
    assert gate.at_once(secret) is None  # never read: the database decides
    assert gate.at_once(None) is None
    assert gate.at_once("noetls_a-session") is None  # sessions are read every time
    gate.authenticate(secret)  # reads it, and records its use
    principal = gate.at_once(secret)
    assert principal is not None and principal.token_id == record.token_id
    clock.now += 61  # still cached, but its use is to be recorded again: not at once
    assert gate.at_once(secret) is None
    gate.authenticate(secret)  # records it
    assert gate.at_once(secret) is not None
    clock.now += 90  # the entry is old
    assert gate.at_once(secret) is None
    assert Gate(tokens, gate.sessions, enabled=False).at_once(None) is not None


def test_the_gate_does_not_answer_at_once_for_a_token_past_its_expiry(
    inner: CountingTokens, clock: Clock
) -> None:
    tokens, gate = gated(inner, clock, ttl_s=30)
    secret, _ = issue_token(tokens, role=Role.OPERATOR, name="t", now=clock.now, expires_in_s=5)
    gate.authenticate(secret)
    assert gate.at_once(secret) is not None
    clock.now += 5
    assert gate.at_once(secret) is None
    with pytest.raises(AuthenticationError):
        gate.authenticate(secret)
