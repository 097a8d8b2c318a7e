"""The NATS K/V session store against the real NATS JetStream server: the bucket it makes,
NATS dropping expired sessions by itself, and what an unreachable server looks like. (The
store's contract is tests/contract/test_session_contract.py.)"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import nats.js.errors as js_errors
import pytest
from nats.js.kv import KeyValue

from noetl.auth import ApiToken, Role
from noetl.config import Settings
from noetl.sessions import Sessions, open_session_store
from noetl.sessions.nats import NatsSessionStore
from noetl.store import MemoryStore, StoreUnavailableError
from tests.helpers.nats import bucket_config, raw_get

TOKEN = ApiToken("tok_1", "console", Role.VIEWER, "h" * 64, created_at=0.0)


@pytest.fixture
def nats_store(nats_url: str, nats_bucket: str) -> Iterator[NatsSessionStore]:
    store = NatsSessionStore(nats_url, bucket=nats_bucket, ttl_s=600)
    yield store
    store.close()


def test_the_bucket_keeps_five_revisions_and_the_sessions_ttl(
    nats_store: NatsSessionStore, nats_url: str, nats_bucket: str
) -> None:
    assert bucket_config(nats_url, nats_bucket) == (5, 600.0)
    # Opened again with another TTL (the setting changed), the bucket takes it.
    again = NatsSessionStore(nats_url, bucket=nats_bucket, ttl_s=120)
    again.close()
    assert bucket_config(nats_url, nats_bucket) == (5, 120.0)


def test_sessions_are_stored_under_the_digest_of_their_token(
    nats_store: NatsSessionStore, nats_url: str, nats_bucket: str
) -> None:
    manager = Sessions(nats_store, ttl_s=600)
    secret, session = manager.login(TOKEN, now=time.time())
    value = raw_get(nats_url, nats_bucket, f"session.{session.key}")
    assert value is not None and b'"token_id":"tok_1"' in value
    assert secret.encode() not in value
    assert raw_get(nats_url, nats_bucket, f"session.{secret}") is None


def test_nats_drops_a_session_once_the_bucket_ttl_has_passed(
    nats_url: str, nats_bucket: str
) -> None:
    store = NatsSessionStore(nats_url, bucket=nats_bucket, ttl_s=1)
    try:
        secret, session = Sessions(store, ttl_s=1).login(TOKEN, now=time.time())
        key = f"session.{session.key}"
        assert raw_get(nats_url, nats_bucket, key) is not None
        deadline = time.monotonic() + 10
        while raw_get(nats_url, nats_bucket, key) is not None:
            assert time.monotonic() < deadline, "NATS kept the session past its TTL"
            time.sleep(0.2)
        assert store.get(session.key) is None
        assert Sessions(store, ttl_s=1).check(secret, time.time()) is None
    finally:
        store.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_unreachable_server_fails_fast_without_showing_the_password() -> None:
    url = f"nats://ada:s3cret@127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        NatsSessionStore(url, timeout_s=1)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "NATS session store" in message and "127.0.0.1" in message
    assert "s3cret" not in message


def test_the_backend_setting_chooses_the_store(nats_url: str, nats_bucket: str) -> None:
    store = MemoryStore()
    database = Settings()
    assert open_session_store(database.sessions, store) is store.sessions
    nats = Settings.model_validate(
        {"sessions": {"backend": "nats", "nats_url": nats_url, "nats_bucket": nats_bucket}}
    )
    opened = open_session_store(nats.sessions, store)
    try:
        assert isinstance(opened, NatsSessionStore) and opened.bucket == nats_bucket
        assert opened.ttl_s == 86400
    finally:
        opened.close()


def test_a_history_read_that_nats_py_ends_early_is_read_again(
    nats_store: NatsSessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nats-py's history watcher can end before its first entry on a loaded machine (it
    # raises NoKeysError for a key that has revisions): the first read here does that.
    manager = Sessions(nats_store, ttl_s=600)
    secret, _ = manager.login(TOKEN, now=time.time())
    real = KeyValue.history
    calls: list[str] = []

    async def early_once(self: KeyValue, key: str) -> list[KeyValue.Entry]:
        calls.append(key)
        if len(calls) == 1:
            raise js_errors.NoKeysError
        return await real(self, key)

    monkeypatch.setattr(KeyValue, "history", early_once)
    history = manager.history(secret)
    assert [entry.operation for entry in history] == ["put"]
    assert len(calls) == 2
    # A key with no value at all is empty at once, not read again and again.
    calls.clear()
    assert nats_store.history("no-such-session") == []
    assert len(calls) == 1  # ended early too, but the key has no value: believed
