"""Redaction: sensitive keys in API responses and logs, secret values, shapes."""

from __future__ import annotations

import pytest

from noetl.redaction import (
    MASK,
    SecretValues,
    mask_url,
    redact,
    redact_event_payload,
    sensitive,
    signature_of,
)


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
        "bearer_token",
        "credential",
        "db_credentials",
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
        "credentials": MASK,
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


def test_the_server_module_still_offers_the_same_functions() -> None:
    from noetl.server import redact as server_redact

    assert server_redact.redact is redact
    assert server_redact.redact_event_payload is redact_event_payload


def test_custom_keys_replace_the_default_list() -> None:
    data = {"pin": "1234", "password": "kept"}
    assert redact(data, keys=("pin",)) == {"pin": MASK, "password": "kept"}


def test_secret_values_are_masked_wherever_they_appear() -> None:
    values = SecretValues()
    assert values.mask("nothing to hide") == "nothing to hide"
    values.remember("s3cr3t-value")
    values.remember("s3cr3t")
    values.remember("ab")  # too short to mask: it would hide every "ab"
    masked = values.mask(
        {"msg": "dsn postgresql://u:s3cr3t-value@h/db", "s3cr3t": ["x s3cr3t y", 3, "ab"]}
    )
    assert masked == {"msg": "dsn postgresql://u:***@h/db", MASK: ["x *** y", 3, "ab"]}


def test_secret_values_forget_the_oldest_past_their_limit() -> None:
    values = SecretValues(limit=2)
    for value in ("first-value", "second-value", "third-value"):
        values.remember(value)
    assert values.mask("first-value second-value third-value") == "first-value *** ***"
    values.clear()
    assert not values
    assert values.mask("second-value") == "second-value"


def test_signature_shows_keys_and_types_never_values() -> None:
    spec = {
        "method": "GET",
        "url": "https://api.example.com/users/7?token=abc",
        "headers": {"Authorization": "Bearer abc"},
        "params": [{"id": 7}],
        "timeout": 2.5,
        "body": None,
        "empty": [],
    }
    signature = signature_of(spec)
    assert signature == (
        "{method:str,url:str,headers:{Authorization:str},params:[{id:int}],"
        "timeout:float,body:null,empty:[]}"
    )
    assert "abc" not in signature and "example" not in signature


def test_signature_is_bounded_in_depth_and_width() -> None:
    deep: dict[str, object] = {"a": {"b": {"c": {"d": {"e": 1}}}}}
    assert signature_of(deep) == "{a:{b:{c:{d:{...}}}}}"
    wide = {f"k{i}": i for i in range(30)}
    assert signature_of(wide).endswith(",...}")
    assert signature_of(wide).count(":int") == 20


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


def test_masked_json_masks_then_cuts() -> None:
    from noetl.server.redact import masked_json  # the API's previews

    value = {"rows": [1, 2], "db": {"password": "hunter2"}}
    text, cut = masked_json(value, 1000)
    assert (text, cut) == ('{"rows": [1, 2], "db": {"password": "***"}}', False)
    short, cut = masked_json(value, 12)
    assert (short, cut) == ('{"rows": [1,', True)
    assert masked_json({"password": "x" * 50}, 30, indent=2) == ('{\n  "password": "***"\n}', False)
    assert masked_json(None, 5) == ("null", False)
