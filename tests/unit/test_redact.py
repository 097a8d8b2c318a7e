"""Masking of sensitive values in API responses."""

from __future__ import annotations

import pytest

from noetl.redaction import mask_url
from noetl.server.redact import MASK, redact, redact_event_payload, sensitive


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "DB_PASSWORD",
        "token",
        "api_token",
        "refreshToken",
        "secret",
        "client_secret",
        "Authorization",
        "key",
        "api_key",
        "apiKey",
        "auth",
        "oauth_state",
    ],
)
def test_sensitive_keys(key: str) -> None:
    assert sensitive(key)


@pytest.mark.parametrize("key", ["user", "name", "amount", "items", "url", 3])
def test_harmless_keys(key: object) -> None:
    assert not sensitive(key)


def test_redact_is_recursive_and_leaves_the_input_alone() -> None:
    data = {
        "user": "ada",
        "api_token": "t0k3n",
        "db": {"host": "h", "Password": "pw", "port": 5432},
        "headers": [{"Authorization": "Bearer x", "accept": "json"}, "plain"],
        "credentials": {"secret": {"nested": "whole value hidden"}},
        "count": 3,
    }
    before = repr(data)
    assert redact(data) == {
        "user": "ada",
        "api_token": MASK,
        "db": {"host": "h", "Password": MASK, "port": 5432},
        "headers": [{"Authorization": MASK, "accept": "json"}, "plain"],
        "credentials": {"secret": MASK},
        "count": 3,
    }
    assert repr(data) == before


def test_a_sensitive_key_hides_its_whole_value() -> None:
    assert redact({"auth": {"user": "u", "pw": "p"}}) == {"auth": MASK}
    assert redact({"tokens": ["a", "b"]}) == {"tokens": MASK}


def test_scalars_and_lists_pass_through() -> None:
    assert redact("password") == "password"
    assert redact([1, {"token": 2}]) == [1, {"token": MASK}]
    assert redact(None) is None


def test_keep_only_spares_top_level_keys() -> None:
    data = {"key": "orders:1", "nested": {"key": "hidden"}}
    assert redact(data, keep=("key",)) == {"key": "orders:1", "nested": {"key": MASK}}


def test_event_payload_keeps_engine_identifiers_and_masks_user_data() -> None:
    payload = {
        "index": 0,
        "key": "user-7",
        "collect_key": "user-7",
        "task": {
            "task_id": "e1.fetch.0",
            "key": "e1:fetch:0",
            "args": {"api_key": "k", "id": 7},
            "context": {"workload": {"password": "pw"}},
        },
        "workload": {"token": "t", "n": 1},
    }
    assert redact_event_payload(payload) == {
        "index": 0,
        "key": "user-7",
        "collect_key": "user-7",
        "task": {
            "task_id": "e1.fetch.0",
            "key": "e1:fetch:0",
            "args": {"api_key": MASK, "id": 7},
            "context": {"workload": {"password": MASK}},
        },
        "workload": {"token": MASK, "n": 1},
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://ada:s3cret@db:5432/x", "postgresql://ada:***@db:5432/x"),
        ("postgresql://ada@db/x?sslmode=require", "postgresql://ada@db/x?sslmode=require"),
        ("https://u:p%40ss@otel:4318/v1?token=abc&x=1", "https://u:***@otel:4318/v1?token=***&x=1"),
        ("host=db password=s3cret user=ada", "host=db password=*** user=ada"),
        ("host=db PASSWORD = 's3 cret'", "host=db PASSWORD = ***"),
        ("http://[broken", "http://***"),
        ("./.noetl/noetl.db", "./.noetl/noetl.db"),
        ("memory://", "memory://"),
    ],
)
def test_mask_url_hides_passwords(text: str, expected: str) -> None:
    assert mask_url(text) == expected


def test_the_api_and_the_rest_share_one_rule() -> None:
    from noetl import redaction
    from noetl.server import redact as api

    assert api.sensitive is redaction.sensitive and api.REDACT_KEYS is redaction.REDACT_KEYS
