"""The credentials API (`/api/credentials`): admin only, values write-only. A credential
stored through it is what a worker with the same key reads."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.auth import Role
from noetl.credentials.keys import Keyring, key_id, new_key
from noetl.credentials.store import DatabaseCredentials
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.helpers.auth import auth_headers

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

PW = "pw-canary-api-71"
# Upstream's fixtures/credentials/pg_local.json, with a canary for a password.
PG_LOCAL = {
    "name": "pg_local",
    "type": "postgres",
    "data": {
        "db_host": "localhost",
        "db_port": "54321",
        "db_user": "demo",
        "db_password": PW,
        "db_name": "demo_noetl",
    },
}
KEY = new_key()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    found = SqliteStore(tmp_path / "noetl.db")
    yield found
    found.close()


def client_of(store: SqliteStore, keys: list[str]) -> TestClient:
    app = create_app(
        store, Orchestrator(store, owner="t"), version="t", credential_keys=Keyring(keys)
    )
    return TestClient(app, headers=auth_headers(store))


def test_an_admin_stores_lists_and_deletes_credentials_never_seeing_values(
    store: SqliteStore,
) -> None:
    client = client_of(store, [KEY])
    created = client.post("/api/credentials", json={**PG_LOCAL, "description": "local"})
    assert created.status_code == 201, created.text
    assert created.json() == {
        "name": "pg_local",
        "type": "postgres",
        "key_id": key_id(KEY),
        "created_at": created.json()["created_at"],
        "updated_at": created.json()["updated_at"],
        "created": True,
        "warning": None,
    }
    replaced = client.post("/api/credentials", json=PG_LOCAL)
    assert (replaced.status_code, replaced.json()["created"]) == (200, False)
    listed = client.get("/api/credentials")
    assert [i["name"] for i in listed.json()["items"]] == ["pg_local"]
    # the worker side: the same key opens what the API stored
    worker = DatabaseCredentials(store.credentials, Keyring([KEY]))
    assert worker.credential("pg_local") == {"type": "postgres", "data": PG_LOCAL["data"]}

    deleted = client.delete("/api/credentials/pg_local")
    assert deleted.json() == {"name": "pg_local", "deleted": True}
    missing = client.delete("/api/credentials/pg_local")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    for response in (created, replaced, listed, deleted, missing):
        assert PW not in response.text


def test_only_an_admin_may_touch_credentials(store: SqliteStore) -> None:
    client = client_of(store, [KEY])
    for role in (Role.VIEWER, Role.OPERATOR):
        headers = auth_headers(store, role)
        assert client.get("/api/credentials", headers=headers).status_code == 403
        post = client.post("/api/credentials", json=PG_LOCAL, headers=headers)
        assert post.status_code == 403 and PW not in post.text
    assert store.credentials.all() == []


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (
            {**PG_LOCAL, "data": {**PG_LOCAL["data"], "db_port": "nope"}},
            400,
            "credential 'pg_local' (type 'postgres'): field 'db_port' must be a port number",
        ),
        ({**PG_LOCAL, "name": "bad name"}, 400, "credential name 'bad name' is not valid"),
        ({**PG_LOCAL, "secret": PW}, 422, "body.secret: Extra inputs are not permitted"),
        ({**PG_LOCAL, "data": PW}, 422, "body.data: Input should be a valid dictionary"),
    ],
)
def test_a_bad_record_is_refused_without_repeating_its_values(
    store: SqliteStore, body: dict[str, object], status: int, expected: str
) -> None:
    response = client_of(store, [KEY]).post("/api/credentials", json=body)
    assert response.status_code == status, response.text
    assert expected in response.json()["message"]
    assert PW not in response.text
    assert store.credentials.all() == []


def test_a_server_without_a_key_says_so(store: SqliteStore) -> None:
    response = client_of(store, []).post("/api/credentials", json=PG_LOCAL)
    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "no_credentials_key"
    assert body["message"].startswith("this server: no key to encrypt credentials with")
    assert PW not in json.dumps(body) and store.credentials.all() == []


def test_a_type_no_builtin_tool_takes_is_kept_with_a_warning(store: SqliteStore) -> None:
    record = {"name": "sf", "type": "snowflake", "data": {"sf_private_key": PW}}
    response = client_of(store, [KEY]).post("/api/credentials", json=record)
    assert response.status_code == 201
    assert "no built-in tool takes credentials of type 'snowflake'" in response.json()["warning"]
    assert PW not in response.text
