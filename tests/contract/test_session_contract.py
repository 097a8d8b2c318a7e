"""One contract for every session store: `store.sessions` of the memory, SQLite and
PostgreSQL stores, and the NATS JetStream K/V store (a bucket of its own per test).

Times given to the stores are a fake clock's (the NATS bucket's TTL, a day here, runs on
NATS's own clock and never interferes)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from noetl.auth import SESSION_PREFIX, ApiToken, Role
from noetl.sessions import HISTORY, Session, SessionConflictError, Sessions, SessionStore
from noetl.store import MemoryStore, PostgresStore, SqliteStore
from noetl.store.base import Store

T0 = 1_000_000.0


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("nats", marks=pytest.mark.services),
    ]
)
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    owner: Store | None = None
    adapter: SessionStore
    if request.param == "memory":
        owner = MemoryStore()
    elif request.param == "sqlite":
        owner = SqliteStore(tmp_path / "noetl.db")
    elif request.param == "postgres":
        owner = PostgresStore(request.getfixturevalue("pg_database"))
    if owner is not None:
        adapter = owner.sessions
    else:
        from noetl.sessions.nats import NatsSessionStore

        url = request.getfixturevalue("nats_url")
        adapter = NatsSessionStore(url, bucket=request.getfixturevalue("nats_bucket"))
    yield adapter
    adapter.close()
    if owner is not None:
        owner.close()


def session(key: str = "k" * 64, **changes: object) -> Session:
    base = Session(
        key=key,
        token_id="tok_1",
        role=Role.OPERATOR,
        created_at=T0,
        expires_at=T0 + 3600,
        last_activity_at=T0,
        client="127.0.0.1",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_create_then_get_returns_the_same_session_with_a_revision(sessions: SessionStore) -> None:
    created = sessions.create(session())
    assert created.revision > 0
    assert created == replace(session(), revision=created.revision)
    assert sessions.get(created.key) == created
    assert sessions.get("0" * 64) is None


def test_a_live_key_cannot_be_created_twice(sessions: SessionStore) -> None:
    sessions.create(session())
    with pytest.raises(SessionConflictError):
        sessions.create(session(token_id="tok_other"))
    found = sessions.get(session().key)
    assert found is not None and found.token_id == "tok_1"


def test_touch_writes_a_new_revision(sessions: SessionStore) -> None:
    created = sessions.create(session())
    touched = sessions.touch(created, T0 + 60)
    assert touched.revision > created.revision
    assert touched.last_activity_at == T0 + 60
    assert (touched.created_at, touched.expires_at) == (created.created_at, created.expires_at)
    assert sessions.get(created.key) == touched


def test_a_stale_revision_is_a_conflict(sessions: SessionStore) -> None:
    created = sessions.create(session())
    touched = sessions.touch(created, T0 + 60)
    with pytest.raises(SessionConflictError, match="changed since revision"):
        sessions.touch(created, T0 + 120)  # read before the other touch
    assert sessions.get(created.key) == touched


def test_concurrent_touches_of_one_revision_let_exactly_one_win(sessions: SessionStore) -> None:
    created = sessions.create(session())
    wins: list[Session] = []
    conflicts: list[Exception] = []
    start = threading.Barrier(4)

    def touch(n: int) -> None:
        start.wait()
        try:
            wins.append(sessions.touch(created, T0 + n))
        except SessionConflictError as exc:
            conflicts.append(exc)

    threads = [threading.Thread(target=touch, args=(n,)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and len(conflicts) == 3
    assert sessions.get(created.key) == wins[0]


def test_delete_ends_a_session_and_keeps_it_in_the_history(sessions: SessionStore) -> None:
    created = sessions.create(session())
    assert sessions.delete(created.key, T0 + 5) is True
    assert sessions.get(created.key) is None
    assert sessions.delete(created.key, T0 + 6) is False
    assert sessions.delete("0" * 64, T0) is False
    with pytest.raises(SessionConflictError):
        sessions.touch(created, T0 + 7)
    ops = [r.operation for r in sessions.history(created.key)]
    assert ops == ["put", "delete"]


def test_a_deleted_key_may_be_created_again(sessions: SessionStore) -> None:
    created = sessions.create(session())
    sessions.delete(created.key, T0 + 1)
    again = sessions.create(session(token_id="tok_2", created_at=T0 + 2))
    assert again.revision > created.revision
    assert sessions.get(created.key) == again


def test_history_lists_the_revisions_oldest_first(sessions: SessionStore) -> None:
    first = sessions.create(session())
    second = sessions.touch(first, T0 + 60)
    third = sessions.touch(second, T0 + 120)
    sessions.delete(first.key, T0 + 180)
    history = sessions.history(first.key)
    assert [r.operation for r in history] == ["put", "put", "put", "delete"]
    assert [r.session for r in history[:3]] == [first, second, third]
    assert history[3].session is None
    revisions = [r.revision for r in history]
    assert revisions == sorted(revisions) and len(set(revisions)) == 4
    assert all(r.at > 0 for r in history)
    assert sessions.history("0" * 64) == []


def test_history_keeps_the_last_revisions_only(sessions: SessionStore) -> None:
    current = sessions.create(session())
    for n in range(1, HISTORY + 2):
        current = sessions.touch(current, T0 + n)
    history = sessions.history(current.key)
    assert len(history) == HISTORY
    assert history[-1].session == current
    assert [r.session.last_activity_at for r in history if r.session] == [
        T0 + n for n in range(2, HISTORY + 2)
    ]


def test_keys_are_independent(sessions: SessionStore) -> None:
    a = sessions.create(session("a" * 64))
    b = sessions.create(session("b" * 64, role=Role.VIEWER))
    sessions.delete(a.key, T0 + 1)
    assert sessions.get(a.key) is None
    assert sessions.get(b.key) == b


# --- the login sessions over each store ----------------------------------------------------

TOKEN = ApiToken("tok_1", "console", Role.OPERATOR, "h" * 64, created_at=T0 - 10)


def test_login_check_and_logout(sessions: SessionStore) -> None:
    manager = Sessions(sessions, ttl_s=600)
    secret, opened = manager.login(TOKEN, now=T0, client="10.0.0.1")
    assert secret.startswith(SESSION_PREFIX) and len(secret) > 40
    assert opened.key != secret and secret not in repr(opened)
    assert (opened.role, opened.expires_at, opened.client) == (Role.OPERATOR, T0 + 600, "10.0.0.1")
    assert manager.check(secret, T0 + 1) == opened
    assert manager.check("noetls_wrong", T0 + 1) is None
    assert manager.check("noetl_an_api_token", T0 + 1) is None
    assert manager.logout(secret, T0 + 2) is True
    assert manager.check(secret, T0 + 3) is None
    assert manager.logout(secret, T0 + 4) is False


def test_a_session_expires_after_its_ttl_and_never_after_its_token(
    sessions: SessionStore,
) -> None:
    manager = Sessions(sessions, ttl_s=600)
    secret, _ = manager.login(TOKEN, now=T0)
    assert manager.check(secret, T0 + 599) is not None
    assert manager.check(secret, T0 + 600) is None
    short = replace(TOKEN, token_id="tok_short", expires_at=T0 + 100)
    secret, opened = manager.login(short, now=T0)
    assert opened.expires_at == T0 + 100
    assert manager.check(secret, T0 + 100) is None


def test_checking_records_activity_at_most_once_a_minute(sessions: SessionStore) -> None:
    manager = Sessions(sessions, ttl_s=3600)
    secret, opened = manager.login(TOKEN, now=T0)
    seen = manager.check(secret, T0 + 30)
    assert seen is not None and seen.revision == opened.revision  # no write
    seen = manager.check(secret, T0 + 61)
    assert seen is not None and seen.revision > opened.revision
    assert seen.last_activity_at == T0 + 61
    assert len(manager.history(secret)) == 2
