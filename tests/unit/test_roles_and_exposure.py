"""Roles, token secrets, and the loopback rule of `noetl server start` (no I/O)."""

from __future__ import annotations

import pytest

from noetl.auth import (
    ANONYMOUS,
    SESSION_PREFIX,
    TOKEN_PREFIX,
    ApiToken,
    Principal,
    Role,
    hash_secret,
    new_secret,
)
from noetl.cli.serve import check_exposure, is_loopback
from noetl.config import Settings
from noetl.errors import ConfigError


def test_each_role_allows_what_the_ones_below_allow() -> None:
    assert [r for r in Role if r.allows(Role.VIEWER)] == [Role.VIEWER, Role.OPERATOR, Role.ADMIN]
    assert [r for r in Role if r.allows(Role.OPERATOR)] == [Role.OPERATOR, Role.ADMIN]
    assert [r for r in Role if r.allows(Role.ADMIN)] == [Role.ADMIN]


def test_secrets_are_random_prefixed_and_stored_as_digests() -> None:
    token, session = new_secret(TOKEN_PREFIX), new_secret(SESSION_PREFIX)
    assert token.startswith("noetl_") and not token.startswith(SESSION_PREFIX)
    assert session.startswith(SESSION_PREFIX)
    assert len(token) == len("noetl_") + 43  # 32 bytes, urlsafe base64 without padding
    assert new_secret() != new_secret()
    digest = hash_secret(token)
    assert len(digest) == 64 and digest == hash_secret(token) != hash_secret(session)


def test_a_token_is_usable_until_revoked_or_expired() -> None:
    token = ApiToken("tok_1", "ci", Role.VIEWER, "h", created_at=0.0, expires_at=100.0)
    assert token.usable(99.9) and token.state(99.9) == "active"
    assert not token.usable(100.0) and token.state(100.0) == "expired"
    revoked = ApiToken("tok_2", "ci", Role.VIEWER, "h", created_at=0.0, revoked=True)
    assert not revoked.usable(1.0) and revoked.state(1.0) == "revoked"
    assert "h" not in {str(v) for v in token.summary(1.0).values()}


def test_principals_say_what_they_are() -> None:
    token = Principal(Role.OPERATOR, "ci", "tok_1")
    assert (token.kind, token.with_session("k").kind, ANONYMOUS.kind) == (
        "token",
        "session",
        "anonymous",
    )
    assert ANONYMOUS.role is Role.ADMIN


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("192.168.1.5", False),
        ("noetl.internal", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_authentication_may_be_off_only_on_loopback() -> None:
    check_exposure(Settings(), "127.0.0.1")  # defaults: auth on
    off = Settings.model_validate({"auth": {"enabled": False}})
    check_exposure(off, "127.0.0.1")
    check_exposure(off, "localhost")
    check_exposure(Settings(), "0.0.0.0")
    with pytest.raises(ConfigError, match=r"refusing to serve the API on 0\.0\.0\.0"):
        check_exposure(off, "0.0.0.0")


def test_session_settings_are_checked_at_start_up() -> None:
    from noetl.config import load_settings, render, resolve

    env = {
        "NOETL_SESSIONS_BACKEND": "redis",
        "NOETL_SESSIONS_NATS_URL": "http://ada:s3cret@nats:4222",
        "NOETL_SESSIONS_TTL_S": "0",
    }
    with pytest.raises(ConfigError) as caught:
        load_settings(None, env)
    message = str(caught.value)
    assert "NOETL_SESSIONS_BACKEND: sessions.backend = 'redis'" in message
    assert "sessions.nats_url" in message and "nats://host:port" in message
    assert "s3cret" not in message
    assert "NOETL_SESSIONS_TTL_S: sessions.ttl_s = '0'" in message
    good = {"NOETL_SESSIONS_NATS_URL": "nats://ada:s3cret@nats:4222", "NOETL_AUTH_ENABLED": "no"}
    shown = render(resolve(None, good))
    assert "s3cret" not in shown and "enabled: false  # env NOETL_AUTH_ENABLED" in shown
