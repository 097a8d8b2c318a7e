"""Named credentials used by the real tools: the postgres tool and sink against the real
PostgreSQL (and a server that refuses the password, quoting it), the http tool against a
loopback server that checks and echoes the headers it gets."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from noetl.core import Outcome, Task
from noetl.core.secrets import marker
from noetl.credentials import CredentialConfig
from noetl.credentials.keys import Keyring, new_key
from noetl.credentials.records import parse_credential
from noetl.credentials.scope import SecretScope, default_provider, enter_scope, leave_scope
from noetl.credentials.store import save_credential
from noetl.sinks.postgres import PostgresWriter
from noetl.store import MemoryStore
from noetl.tools.http import HttpTool
from noetl.tools.postgres import PostgresTool
from noetl.worker.tools import ToolRegistry
from tests.helpers.fake_pg import RefusingPostgres
from tests.helpers.loopback import serving

PW = "pw-canary-8d1f"
TOKEN = "tok-canary-8d1f"


def upstream_pg(url: str, password: str = PW, **changes: Any) -> dict[str, Any]:
    """An upstream `{type: postgres, data}` record for the database of `url`."""
    parts = urlsplit(url)
    data = {
        "db_host": parts.hostname,
        "db_port": str(parts.port or 5432),
        "db_user": parts.username,
        "db_password": password,  # the local server trusts: never checked
        "db_name": parts.path.lstrip("/"),
        **changes,
    }
    return {"name": "pg_local", "type": "postgres", "data": data}


def credentials_file(tmp_path: Path, records: dict[str, Any]) -> CredentialConfig:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return CredentialConfig(file=str(path))


def make_task(kind: str, spec: dict[str, Any], args: dict[str, Any] | None = None) -> Task:
    return Task(
        task_id="e.s",
        execution_id="e",
        step="s",
        kind=kind,
        spec=spec,
        args=args or {},
        context={},
        key="e:s",
    )


def payload(outcome: Outcome) -> str:
    return json.dumps(outcome.to_payload())


# --- postgres -----------------------------------------------------------------------------


def test_the_postgres_tool_connects_with_an_upstream_record(
    tmp_path: Path, pg_database: str
) -> None:
    config = credentials_file(tmp_path, {"pg_local": upstream_pg(pg_database)})
    registry = ToolRegistry([PostgresTool()], secrets=default_provider(credentials=config))
    task = make_task(
        "postgres",
        {"credential": "pg_local", "query": "SELECT current_database() AS db, %(e)s AS echo"},
        {"e": f"the password is {PW}"},
    )
    outcome = registry.run(task)
    assert outcome.ok, outcome.error
    database = urlsplit(pg_database).path[1:]
    assert outcome.this["rows"] == [{"db": database, "echo": "the password is ***"}]


def test_a_refused_password_fails_fatally_and_is_never_shown(tmp_path: Path) -> None:
    with RefusingPostgres() as refusing:
        record = upstream_pg(f"postgresql://app@127.0.0.1:{refusing.port}/wh")
        config = credentials_file(tmp_path, {"pg_local": record})
        registry = ToolRegistry([PostgresTool()], secrets=default_provider(credentials=config))
        outcome = registry.run(
            make_task("postgres", {"credential": "pg_local", "query": "SELECT 1"})
        )
        assert refusing.passwords == [PW]  # the server got it, and quoted it back
    assert (outcome.ok, outcome.retryable, outcome.error_type) == (False, False, "FatalError")
    assert outcome.error is not None
    assert f"cannot connect to database 'wh' at 127.0.0.1:{refusing.port} as 'app'" in outcome.error
    assert 'password authentication failed for user "app" (sent "***")' in outcome.error
    assert PW not in payload(outcome)


def test_the_postgres_sink_writes_with_a_credential_from_the_database(pg_database: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE landed (id int PRIMARY KEY, note text)")
    store, key = MemoryStore(), new_key()
    save_credential(
        store.credentials, Keyring([key]), parse_credential("wh", upstream_pg(pg_database)), 1.0
    )
    provider = default_provider(credentials=CredentialConfig(keys=(key,)), store=store.credentials)
    token = enter_scope(SecretScope(provider))
    try:
        summary = PostgresWriter().write(
            [{"id": 1, "note": "a"}], {"table": "landed", "credential": "wh"}, "k"
        )
    finally:
        leave_scope(token)
    assert summary["rows"] == 1
    with psycopg.connect(pg_database) as conn:
        assert conn.execute("SELECT id, note FROM landed").fetchall() == [(1, "a")]


def test_a_credential_of_another_type_is_refused_naming_the_type(tmp_path: Path) -> None:
    record = {"type": "snowflake", "data": {"sf_private_key": "PRIVATE-CANARY"}}
    config = credentials_file(tmp_path, {"sf": record})
    registry = ToolRegistry([PostgresTool()], secrets=default_provider(credentials=config))
    outcome = registry.run(make_task("postgres", {"credential": "sf", "query": "SELECT 1"}))
    assert (outcome.ok, outcome.retryable, outcome.error_type) == (False, False, "CredentialError")
    assert outcome.error == (
        "credential 'sf' (type 'snowflake') cannot be used by the postgres tool: it takes "
        "postgres credentials"
    )
    assert "PRIVATE-CANARY" not in payload(outcome)


# --- http ---------------------------------------------------------------------------------


class Echo(BaseHTTPRequestHandler):
    """Answers 401 without `Authorization: Bearer <TOKEN>` on /bearer; echoes the headers
    it got as JSON (so a secret comes back in the body)."""

    def do_GET(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append(headers)  # type: ignore[attr-defined]
        if self.path.startswith("/hop/"):  # /hop/<port>: a redirect to that port
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.path[5:]}/landed")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        wanted = f"Bearer {TOKEN}"
        status = 401 if self.path == "/bearer" and headers.get("authorization") != wanted else 200
        body = json.dumps({"headers": headers}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve_echo() -> Iterator[ThreadingHTTPServer]:
    with serving(Echo) as server:
        server.seen = []  # type: ignore[attr-defined]
        yield server


echo = pytest.fixture(serve_echo, name="echo")
other = pytest.fixture(serve_echo, name="other")


def call(
    server: ThreadingHTTPServer, records: dict[str, Any], tmp_path: Path, **spec: Any
) -> Outcome:
    config = credentials_file(tmp_path, records)
    registry = ToolRegistry([HttpTool()], secrets=default_provider(credentials=config))
    url = f"http://127.0.0.1:{server.server_address[1]}{spec.pop('path', '/bearer')}"
    try:
        return registry.run(make_task("http", {"url": url, **spec}))
    finally:
        registry.close()


def test_a_bearer_credential_is_sent_as_authorization_and_masked(
    echo: ThreadingHTTPServer, tmp_path: Path
) -> None:
    api = {"type": "bearer", "data": {"token": TOKEN}}
    outcome = call(echo, {"api": api}, tmp_path, credential="api")
    assert outcome.ok, outcome.error
    assert echo.seen[-1]["authorization"] == f"Bearer {TOKEN}"  # type: ignore[attr-defined]
    assert outcome.this["data"]["headers"]["authorization"] == "Bearer ***"
    assert TOKEN not in payload(outcome)
    # without the credential the server refuses (so the header was what let the call in)
    refused = call(echo, {"api": api}, tmp_path)
    assert (refused.ok, refused.this["status_code"]) == (False, 401)


def test_basic_api_key_and_header_credentials(echo: ThreadingHTTPServer, tmp_path: Path) -> None:
    records = {
        "basic": {"type": "basic", "data": {"username": "ada", "password": PW}},
        "key": {"type": "api_key", "data": {"api_key": TOKEN}},
        "custom": {"type": "header", "data": {"header_name": "X-Service-Token", "value": TOKEN}},
    }
    basic = call(echo, records, tmp_path, credential="basic", path="/")
    encoded = base64.b64encode(f"ada:{PW}".encode()).decode()
    assert echo.seen[-1]["authorization"] == f"Basic {encoded}"  # type: ignore[attr-defined]
    assert basic.this["data"]["headers"]["authorization"] == "Basic ***"
    key = call(echo, records, tmp_path, credential="key", path="/")
    assert echo.seen[-1]["x-api-key"] == TOKEN  # type: ignore[attr-defined]
    custom = call(echo, records, tmp_path, credential="custom", path="/")
    assert echo.seen[-1]["x-service-token"] == TOKEN  # type: ignore[attr-defined]
    for outcome in (basic, key, custom):
        assert outcome.ok, outcome.error
        assert PW not in payload(outcome) and TOKEN not in payload(outcome)
        assert encoded not in payload(outcome)


def test_http_credential_mistakes_fail_the_task_before_any_request(
    echo: ThreadingHTTPServer, tmp_path: Path
) -> None:
    records = {
        "api": {"type": "bearer", "data": {"token": TOKEN}},
        "gcp": {"type": "google_service_account", "data": {"private_key": "PK-CANARY"}},
    }
    clash = call(
        echo, records, tmp_path, credential="api", headers={"authorization": "Bearer other"}
    )
    assert (clash.ok, clash.error_type) == (False, "FatalError")
    assert clash.error == (
        "spec.headers sets Authorization and spec.credential 'api' sends it too; keep one"
    )
    cloud = call(echo, records, tmp_path, credential="gcp")
    assert (cloud.ok, cloud.retryable, cloud.error_type) == (False, False, "CredentialError")
    assert "(type 'google_service_account') cannot be used by the http tool" in str(cloud.error)
    missing = call(echo, records, tmp_path, credential="nope")
    assert (missing.ok, missing.error_type) == (False, "SecretError")
    assert "credential 'nope' is not configured on this worker" in str(missing.error)
    assert echo.seen == []  # type: ignore[attr-defined]
    assert "PK-CANARY" not in payload(cloud)


def test_a_worker_without_the_key_fails_the_task_with_a_clear_error(
    echo: ThreadingHTTPServer,
) -> None:
    store = MemoryStore()
    record = parse_credential("api", {"type": "bearer", "data": {"token": TOKEN}})
    save_credential(store.credentials, Keyring([new_key()]), record, 1.0)
    registry = ToolRegistry(
        [HttpTool()],
        secrets=default_provider(credentials=CredentialConfig(), store=store.credentials),
    )
    url = f"http://127.0.0.1:{echo.server_address[1]}/bearer"
    outcome = registry.run(make_task("http", {"url": url, "credential": "api"}))
    registry.close()
    assert (outcome.ok, outcome.retryable, outcome.error_type) == (False, False, "CredentialError")
    assert "no key to decrypt credential 'api' (in the database) with" in str(outcome.error)
    assert "NOETL_CREDENTIALS_KEY" in str(outcome.error)
    assert echo.seen == []  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["api_key", "bearer"])
def test_a_credential_header_does_not_follow_a_redirect_to_another_origin(
    kind: str, echo: ThreadingHTTPServer, other: ThreadingHTTPServer, tmp_path: Path
) -> None:
    record = {"type": kind, "data": {"api_key" if kind == "api_key" else "token": TOKEN}}
    header = "x-api-key" if kind == "api_key" else "authorization"
    here, there = echo.server_address[1], other.server_address[1]
    away = call(echo, {"c": record}, tmp_path, credential="c", path=f"/hop/{there}")
    assert away.ok, away.error
    assert TOKEN in echo.seen[-1][header]  # type: ignore[attr-defined]
    assert header not in other.seen[-1]  # type: ignore[attr-defined]
    home = call(echo, {"c": record}, tmp_path, credential="c", path=f"/hop/{here}")
    assert home.ok, home.error
    assert [TOKEN in seen[header] for seen in echo.seen[-2:]] == [True, True]  # type: ignore[attr-defined]


class _Secrets:
    """A worker's secrets: `api` only."""

    def secret(self, name: str) -> str | None:
        return TOKEN if name == "api" else None

    def credential(self, name: str) -> dict[str, Any] | None:
        return None


def test_a_header_holding_a_secret_does_not_follow_a_redirect_to_another_origin(
    echo: ThreadingHTTPServer, other: ThreadingHTTPServer
) -> None:
    """`headers: {X-Token: "{{ secrets.api }}"}` goes only to the origin it was written for,
    as does a `Cookie`; a header without a secret follows the redirect."""
    here, there = echo.server_address[1], other.server_address[1]
    headers = {"X-Token": f"tok {marker('api')}", "Cookie": "sid=1", "X-Plain": "visible"}

    def hop(to: int) -> Outcome:
        url = f"http://127.0.0.1:{here}/hop/{to}"
        task = replace(make_task("http", {"url": url, "headers": headers}), secrets=("api",))
        registry = ToolRegistry([HttpTool()], secrets=_Secrets())
        try:
            return registry.run(task)
        finally:
            registry.close()

    away = hop(there)
    assert away.ok, away.error
    assert echo.seen[-1]["x-token"] == f"tok {TOKEN}"  # type: ignore[attr-defined]
    assert echo.seen[-1]["cookie"] == "sid=1"  # type: ignore[attr-defined]
    landed = other.seen[-1]  # type: ignore[attr-defined]
    assert "x-token" not in landed and "cookie" not in landed
    assert landed["x-plain"] == "visible"
    home = hop(here)
    assert home.ok, home.error
    assert [seen["x-token"] for seen in echo.seen[-2:]] == [f"tok {TOKEN}"] * 2  # type: ignore[attr-defined]
    assert TOKEN not in payload(away) and TOKEN not in payload(home)
