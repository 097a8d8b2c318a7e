"""Credential records: upstream's `{type, data}` format and NoETL's untyped maps, mapped to
what the postgres tool and sink, the http tool and the s3 sink need; which values are
masked; no message ever holds a value."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from noetl.credentials.records import (
    Credential,
    CredentialError,
    http_auth,
    parse_credential,
    postgres_conninfo,
    s3_keys,
    secret_values,
)

PASSWORD = "pw-'quoted' \\ back slash"
UPSTREAM_PG = {
    "name": "pg_local",
    "type": "postgres",
    "data": {
        "db_host": "localhost",
        "db_port": "54321",
        "db_user": "demo",
        "db_password": PASSWORD,
        "db_name": "demo_noetl",
    },
}


def cred(raw: dict[str, Any], name: str = "c") -> Credential:
    return parse_credential(name, raw)


def refused(call: Any, raw: dict[str, Any], *secrets: str) -> str:
    with pytest.raises(CredentialError) as caught:
        call(cred(raw))
    message = str(caught.value)
    for secret in secrets:
        assert secret not in message
    return message


# --- the record ---------------------------------------------------------------------------


def test_an_upstream_record_has_a_type_and_its_data() -> None:
    found = cred(UPSTREAM_PG, "pg_local")
    assert found == Credential("pg_local", "postgres", UPSTREAM_PG["data"])
    # fields may stand beside `type`; descriptive keys are not fields
    flat = cred({"type": "Bearer", "token": "t0k", "description": "x", "tags": ["a"]})
    assert flat == Credential("c", "bearer", {"token": "t0k"})
    assert cred({"type": "postgresql", "data": {}}).type == "postgres"


def test_a_map_without_type_is_the_older_untyped_form() -> None:
    assert cred({"dsn": "postgresql://x"}) == Credential("c", None, {"dsn": "postgresql://x"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": 5}, "`type` must be a non-empty string"),
        ({"type": " "}, "`type` must be a non-empty string"),
        ({"type": "postgres", "data": ["secret-list"]}, "`data` must be a map"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_credential(
    raw: dict[str, Any], expected: str
) -> None:
    with pytest.raises(CredentialError, match=expected) as caught:
        cred(raw, "bad")
    assert "credential 'bad'" in str(caught.value)
    assert "secret-list" not in str(caught.value)


# --- postgres -----------------------------------------------------------------------------


def test_upstream_postgres_fields_become_a_connection_string() -> None:
    conninfo = postgres_conninfo(cred(UPSTREAM_PG))
    assert conninfo_to_dict(conninfo) == {
        "host": "localhost",
        "port": "54321",
        "user": "demo",
        "password": PASSWORD,  # quotes and backslashes survive libpq's parser
        "dbname": "demo_noetl",
    }


def test_other_spellings_ssl_and_integer_ports_are_read() -> None:
    raw = {
        "type": "postgres",
        "data": {
            "host": "db",
            "port": 5432,
            "database": "w",
            "username": "u",
            "password": "p",
            "ssl": True,
            "sslrootcert": "/ca.pem",
            "comment": "ignored: not a connection field",
        },
    }
    assert conninfo_to_dict(postgres_conninfo(cred(raw))) == {
        "host": "db",
        "port": "5432",
        "dbname": "w",
        "user": "u",
        "password": "p",
        "sslmode": "require",
        "sslrootcert": "/ca.pem",
    }


def test_a_dsn_is_used_as_it_is_typed_or_not() -> None:
    dsn = "postgresql://u:p@h:1/d"
    assert postgres_conninfo(cred({"dsn": dsn})) == dsn
    assert postgres_conninfo(cred({"type": "postgres", "data": {"dsn": dsn}})) == dsn
    # the older untyped libpq keywords (what the sink took)
    keywords = cred({"host": "h", "dbname": "d", "user": "u"})
    expected = {"host": "h", "dbname": "d", "user": "u"}
    assert conninfo_to_dict(postgres_conninfo(keywords)) == expected


def test_postgres_mistakes_name_the_field_never_the_value() -> None:
    data = UPSTREAM_PG["data"]
    assert "field 'db_port' must be a port number" in refused(
        postgres_conninfo, {"type": "postgres", "data": {**data, "db_port": "five"}}, PASSWORD
    )
    assert "fields 'db_host' and 'host' disagree" in refused(
        postgres_conninfo, {"type": "postgres", "data": {**data, "host": "elsewhere"}}, PASSWORD
    )
    assert "has no connection fields: db_host" in refused(
        postgres_conninfo, {"type": "postgres", "data": {"note": "x"}}
    )
    assert "field 'db_password' must be a string" in refused(
        postgres_conninfo, {"type": "postgres", "data": {**data, "db_password": ["x"]}}
    )


@pytest.mark.parametrize("kind", ["snowflake", "google_service_account", "bearer", "nats"])
def test_the_postgres_tool_refuses_other_types_naming_the_type(kind: str) -> None:
    message = refused(
        postgres_conninfo,
        {"type": kind, "data": {"sf_private_key": "PRIVATE-KEY-CANARY"}},
        "PRIVATE-KEY-CANARY",
    )
    assert message == (
        f"credential 'c' (type {kind!r}) cannot be used by the postgres tool: it takes "
        "postgres credentials"
    )


# --- http ---------------------------------------------------------------------------------


def test_bearer_and_basic_credentials_are_authorization_headers() -> None:
    bearer = http_auth(cred({"type": "bearer", "data": {"token": "t0k3n"}}))
    assert (bearer.header, bearer.value, bearer.derived) == ("Authorization", "Bearer t0k3n", ())
    basic = http_auth(cred({"type": "basic", "data": {"username": "ada", "password": "pw:1"}}))
    encoded = base64.b64encode(b"ada:pw:1").decode()
    assert (basic.header, basic.value) == ("Authorization", f"Basic {encoded}")
    assert basic.derived == (encoded,)  # the encoded form is masked too


def test_api_key_and_header_credentials_name_their_header() -> None:
    default = http_auth(cred({"type": "api_key", "data": {"api_key": "k1"}}))
    assert (default.header, default.value) == ("X-API-Key", "k1")
    named = http_auth(cred({"type": "api_key", "data": {"value": "k2", "header_name": "X-Token"}}))
    assert (named.header, named.value) == ("X-Token", "k2")
    header = http_auth(cred({"type": "header", "data": {"name": "X-Custom", "value": "v"}}))
    assert (header.header, header.value) == ("X-Custom", "v")


def test_http_mistakes_and_other_types_are_refused_without_values() -> None:
    assert "has no 'token' or 'value' or 'access_token' field" in refused(
        http_auth, {"type": "bearer", "data": {}}
    )
    assert "line break" in refused(
        http_auth, {"type": "bearer", "data": {"token": "a\r\nX-Evil: 1"}}, "X-Evil"
    )
    assert "header name is not a valid name" in refused(
        http_auth, {"type": "header", "data": {"name": "Bad Name", "value": "v-canary"}}, "v-canary"
    )
    assert "username cannot hold ':'" in refused(
        http_auth,
        {"type": "basic", "data": {"username": "a:b", "password": "pw-canary"}},
        "pw-canary",
    )
    assert refused(http_auth, {"type": "oauth2_client_credentials", "data": {}}) == (
        "credential 'c' (type 'oauth2_client_credentials') cannot be used by the http tool: "
        "it takes bearer, basic, api_key, header credentials"
    )
    assert refused(http_auth, {"token": "untyped-canary"}, "untyped-canary") == (
        "credential 'c' cannot be used by the http tool: it takes bearer, basic, api_key, "
        "header credentials"
    )


# --- s3 -----------------------------------------------------------------------------------


def test_s3_keys_from_typed_and_untyped_credentials() -> None:
    keys = {"aws_access_key_id": "AK", "aws_secret_access_key": "SK"}
    assert s3_keys(cred(keys)) == keys
    assert s3_keys(cred({"type": "s3", "data": {**keys, "aws_session_token": "ST"}})) == {
        **keys,
        "aws_session_token": "ST",
    }
    assert "needs aws_access_key_id and aws_secret_access_key" in refused(
        s3_keys, {"aws_access_key_id": "AK"}
    )
    assert "cannot be used by the s3 sink" in refused(s3_keys, {"type": "postgres", "data": {}})


# --- masking ------------------------------------------------------------------------------


def test_known_types_mask_their_secrets_not_hosts_or_users() -> None:
    assert secret_values(cred(UPSTREAM_PG)) == [PASSWORD]
    assert secret_values(cred({"type": "bearer", "data": {"token": "t"}})) == ["t"]
    assert secret_values(cred({"type": "header", "data": {"name": "X-A", "value": "v"}})) == ["v"]
    assert set(secret_values(cred({"type": "api_key", "data": {"api_key": "k"}}))) == {"k"}
    dsn = {"type": "postgres", "data": {"dsn": "postgresql://u:p@h/d"}}
    assert secret_values(cred(dsn)) == ["postgresql://u:p@h/d"]


def test_unknown_types_and_untyped_maps_mask_every_string() -> None:
    snowflake = {"type": "snowflake", "data": {"sf_account": "acct", "nested": {"k": ["pk"]}}}
    assert sorted(secret_values(cred(snowflake))) == ["acct", "pk"]
    assert sorted(secret_values(cred({"dsn": "d", "port": 5, "user": "u"}))) == ["d", "u"]
