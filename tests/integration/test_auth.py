"""API authentication over a real SQLite store (TestClient): every route is either public
or needs a role, tokens and sessions as bearer credentials, and the session routes on both
session backends (the database and NATS K/V)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI

from noetl.auth import Role, issue_token
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.auth import Gate, check_routes, is_public, iter_routes
from noetl.sessions import Sessions, SessionStore
from noetl.store import SqliteStore
from tests.helpers.auth import bearer
from tests.helpers.testclient import TestClient

NO_TOOLS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: no_tools
  path: tests/no_tools
workflow:
  - step: start
"""
T0 = 1_800_000_000.0
WRONG = "noetl_" + "A" * 43


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    adapter = SqliteStore(tmp_path / "noetl.db")
    yield adapter
    adapter.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["database", pytest.param("nats", marks=pytest.mark.services)])
def session_store(request: pytest.FixtureRequest, store: SqliteStore) -> Iterator[SessionStore]:
    if request.param == "database":
        yield store.sessions
        return
    from noetl.sessions.nats import NatsSessionStore

    nats = NatsSessionStore(
        request.getfixturevalue("nats_url"), bucket=request.getfixturevalue("nats_bucket")
    )
    yield nats
    nats.close()


@pytest.fixture
def app(store: SqliteStore, clock: Clock, session_store: SessionStore) -> FastAPI:
    gate = Gate(store.tokens, Sessions(session_store, ttl_s=3600), clock=clock)
    return create_app(store, Orchestrator(store, owner="t"), version="t", clock=clock, gate=gate)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def tokens(store: SqliteStore) -> dict[Role, str]:
    """A token of each role."""
    return {role: issue_token(store.tokens, role=role, name=role.value, now=T0)[0] for role in Role}


def login(client: TestClient, token: str) -> str:
    response = client.post("/api/sessions", headers=bearer(token))
    assert response.status_code == 201, response.text
    session: str = response.json()["session_token"]
    return session


def assert_refused(response: Any, status: int, *needles: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == {401: "unauthorized", 403: "forbidden"}[status]
    assert set(body) == {"error", "message"}
    for needle in needles:
        assert needle in body["message"], body["message"]
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")


# --- every route ----------------------------------------------------------------------------


def concrete(path: str, client: TestClient, tokens: dict[Role, str]) -> str:
    """`path` with its parameters filled in; `{token}` is a new live session each time."""
    if "{token}" in path:
        path = path.replace("{token}", login(client, tokens[Role.ADMIN]))
    return (
        path.replace("{execution_id}", "no-such-execution")
        .replace("{step}", "start")
        .replace("{path:path}", "tests/no_tools")
        .replace("{message_id}", "no-such-message")
        .replace("{token_id}", "tok_none")
        .replace("/api/credentials/{name}", "/api/credentials/no-such-credential")
        .replace("{name:path}", "console.css")
    )


def routes(app: FastAPI) -> list[tuple[str, str, Role | None]]:
    out = []
    for path, route, role in iter_routes(app):
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                out.append((method, path, role))
    return out


def test_every_route_is_public_or_refuses_without_the_right_role(
    app: FastAPI, client: TestClient, tokens: dict[Role, str]
) -> None:
    found = routes(app)
    assert len(found) >= 27  # 22 API operations, /health and 4 pages of docs
    public = {(m, p) for m, p, role in found if role is None}
    assert public == {
        ("GET", "/health"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
        ("GET", "/docs/oauth2-redirect"),
        ("GET", "/redoc"),
        # the console's page and files (its API calls are not public), and the redirect
        ("GET", "/"),
        ("GET", "/ui"),
        ("GET", "/ui/"),
        ("GET", "/ui/{name:path}"),
        # a schedule's webhook: it checks its own token, not an API token
        ("POST", "/api/triggers/{name:path}"),
    }
    for method, path, role in found:
        if role is None:
            assert is_public(path), path
            response = client.request(method, concrete(path, client, tokens))
            if path.startswith("/api/triggers/"):
                for token in tokens.values():  # no API token is a webhook's token
                    url = concrete(path, client, tokens)
                    denied = client.request(method, url, headers=bearer(token))
                    assert_refused(denied, 401, "wrong token")
                assert_refused(response, 401, "wrong token")
                continue
            assert response.status_code == 200, (method, path, response.text)
            continue
        where = (method, path)
        missing = client.request(method, concrete(path, client, tokens))
        assert_refused(missing, 401, "missing bearer token")
        wrong = client.request(method, concrete(path, client, tokens), headers=bearer(WRONG))
        assert_refused(wrong, 401, "not valid")
        basic = client.request(
            method, concrete(path, client, tokens), headers={"Authorization": "Basic eDp5"}
        )
        assert_refused(basic, 401)
        for lower in (r for r in Role if r.rank < role.rank):
            url = concrete(path, client, tokens)
            denied = client.request(method, url, headers=bearer(tokens[lower]))
            assert_refused(denied, 403, f"needs the {role.value} role", lower.value)
        for enough in (r for r in Role if r.rank >= role.rank):
            url = concrete(path, client, tokens)
            allowed = client.request(method, url, headers=bearer(tokens[enough]))
            assert allowed.status_code not in (401, 403), (where, enough, allowed.text)


def test_the_roles_of_the_routes_are_as_documented(app: FastAPI) -> None:
    declared = {(m, p): role for m, p, role in routes(app) if role is not None}
    assert declared[("GET", "/api/executions")] is Role.VIEWER
    assert declared[("POST", "/api/executions")] is Role.OPERATOR
    assert declared[("POST", "/api/executions/{execution_id}/cancel")] is Role.OPERATOR
    assert declared[("POST", "/api/playbooks")] is Role.OPERATOR
    assert declared[("POST", "/api/dlq/{message_id}/replay")] is Role.OPERATOR
    assert declared[("POST", "/api/dlq/{message_id}/discard")] is Role.OPERATOR
    force = "/api/admin/executions/{execution_id}/steps/{step}/force-complete"
    assert declared[("POST", force)] is Role.ADMIN
    assert declared[("POST", "/api/admin/tokens")] is Role.ADMIN
    for method in ("GET", "POST"):
        assert declared[(method, "/api/credentials")] is Role.ADMIN
    assert declared[("DELETE", "/api/credentials/{name}")] is Role.ADMIN
    assert {role for (method, _), role in declared.items() if method == "GET"} <= {
        Role.VIEWER,
        Role.ADMIN,
    }


def test_an_app_with_a_route_that_declares_no_role_is_refused() -> None:
    app = FastAPI()
    router = APIRouter(prefix="/api/new")

    @router.get("/thing")
    def thing() -> dict[str, int]:
        return {"n": 1}

    app.include_router(router)
    with pytest.raises(RuntimeError, match="/api/new/thing declares no role"):
        check_routes(app)


def test_a_route_added_later_without_a_role_needs_admin(
    app: FastAPI, client: TestClient, tokens: dict[Role, str]
) -> None:
    @app.get("/api/late")
    def late() -> dict[str, int]:
        return {"n": 1}

    assert_refused(client.get("/api/late"), 401)
    assert_refused(client.get("/api/late", headers=bearer(tokens[Role.OPERATOR])), 403, "admin")
    assert client.get("/api/late", headers=bearer(tokens[Role.ADMIN])).json() == {"n": 1}


def test_the_openapi_document_declares_the_bearer_scheme(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"].lower() == "bearer"
    assert spec["paths"]["/api/executions"]["get"]["security"] == [{"bearer": []}]
    assert "security" not in spec["paths"]["/health"]["get"]


# --- tokens -----------------------------------------------------------------------------------


def test_revoked_and_expired_tokens_are_refused(
    client: TestClient, store: SqliteStore, clock: Clock
) -> None:
    secret, _ = issue_token(store.tokens, role=Role.ADMIN, name="x", now=T0, expires_in_s=60)
    assert client.get("/api/executions", headers=bearer(secret)).status_code == 200
    clock.now = T0 + 60
    assert_refused(client.get("/api/executions", headers=bearer(secret)), 401, "not valid")
    other, record = issue_token(store.tokens, role=Role.ADMIN, name="y", now=T0)
    assert client.get("/api/executions", headers=bearer(other)).status_code == 200
    store.tokens.revoke(record.token_id, clock.now)
    assert_refused(client.get("/api/executions", headers=bearer(other)), 401, "not valid")


def test_last_used_at_is_recorded_at_most_once_a_minute(
    client: TestClient, store: SqliteStore, clock: Clock
) -> None:
    secret, token = issue_token(store.tokens, role=Role.VIEWER, name="x", now=T0)
    client.get("/api/executions", headers=bearer(secret))
    assert store.tokens.get(token.token_id).last_used_at == T0  # type: ignore[union-attr]
    clock.now = T0 + 30
    client.get("/api/executions", headers=bearer(secret))
    assert store.tokens.get(token.token_id).last_used_at == T0  # type: ignore[union-attr]
    clock.now = T0 + 61
    client.get("/api/executions", headers=bearer(secret))
    assert store.tokens.get(token.token_id).last_used_at == T0 + 61  # type: ignore[union-attr]


def test_admins_manage_tokens_through_the_api(client: TestClient, tokens: dict[Role, str]) -> None:
    admin = bearer(tokens[Role.ADMIN])
    created = client.post(
        "/api/admin/tokens", json={"role": "operator", "name": "ci", "expires_in_days": 1},
        headers=admin,
    )  # fmt: skip
    assert created.status_code == 201, created.text
    body = created.json()
    secret = body.pop("token")
    assert body["expires_at"] == T0 + 86400 and body["state"] == "active"
    started = client.post("/api/playbooks", json={"content": NO_TOOLS}, headers=bearer(secret))
    assert started.status_code == 201
    listed = client.get("/api/admin/tokens", headers=admin)
    assert sorted(t["name"] for t in listed.json()["items"]) == [
        "admin",
        "ci",
        "operator",
        "viewer",
    ]
    assert secret not in listed.text and all(t not in listed.text for t in tokens.values())
    assert "hash" not in listed.text
    revoked = client.post(f"/api/admin/tokens/{body['id']}/revoke", headers=admin)
    assert revoked.json()["state"] == "revoked"
    assert_refused(client.get("/api/playbooks", headers=bearer(secret)), 401)
    missing = client.post("/api/admin/tokens/tok_none/revoke", headers=admin)
    assert missing.status_code == 404


def test_with_authentication_off_every_request_acts_as_admin(store: SqliteStore) -> None:
    gate = Gate(store.tokens, Sessions(store.sessions), enabled=False)
    app = create_app(store, Orchestrator(store, owner="t"), version="t", gate=gate)
    with TestClient(app) as client:
        assert client.get("/api/executions").status_code == 200
        response = client.post("/api/admin/tokens", json={"role": "viewer", "name": "v"})
        assert response.status_code == 201
        refused = client.post("/api/sessions")
        assert refused.status_code == 409 and "auth.enabled" in refused.json()["message"]


# --- sessions (on both backends) ----------------------------------------------------------------


def test_a_session_is_a_bearer_credential_with_its_tokens_role(
    client: TestClient, tokens: dict[Role, str]
) -> None:
    opened = client.post("/api/sessions", headers=bearer(tokens[Role.OPERATOR]))
    assert opened.status_code == 201
    body = opened.json()
    session = body["session_token"]
    assert session.startswith("noetls_")
    assert (body["role"], body["expires_at"], body["created_at"]) == ("operator", T0 + 3600, T0)
    as_session = bearer(session)
    assert (
        client.post("/api/playbooks", json={"content": NO_TOOLS}, headers=as_session).status_code
        == 201
    )
    denied = client.post(
        "/api/admin/tokens", json={"role": "viewer", "name": "v"}, headers=as_session
    )
    assert_refused(denied, 403, "session of token 'operator'")
    checked = client.get(f"/api/sessions/{session}", headers=as_session)
    assert checked.status_code == 200
    assert (
        checked.json()["session_id"] == body["session_id"] and "session_token" not in checked.json()
    )
    # A session cannot open another one (it would outlive its expiry).
    assert_refused(client.post("/api/sessions", headers=as_session), 403, "API token")


def test_a_logged_out_session_is_refused(client: TestClient, tokens: dict[Role, str]) -> None:
    session = login(client, tokens[Role.VIEWER])
    ended = client.delete(f"/api/sessions/{session}", headers=bearer(session))
    assert ended.status_code == 200 and ended.json()["deleted"] is True
    assert_refused(client.get("/api/executions", headers=bearer(session)), 401, "logged out")
    viewer = bearer(tokens[Role.VIEWER])
    assert_refused(client.get(f"/api/sessions/{session}", headers=viewer), 401)
    assert_refused(client.delete(f"/api/sessions/{session}", headers=viewer), 401)


def test_an_expired_session_is_refused(
    client: TestClient, tokens: dict[Role, str], clock: Clock
) -> None:
    session = login(client, tokens[Role.VIEWER])
    clock.now = T0 + 3599
    assert client.get("/api/executions", headers=bearer(session)).status_code == 200
    clock.now = T0 + 3600
    assert_refused(client.get("/api/executions", headers=bearer(session)), 401, "expired")
    assert_refused(client.get(f"/api/sessions/{session}", headers=bearer(tokens[Role.VIEWER])), 401)


def test_revoking_a_token_ends_its_sessions(
    client: TestClient, store: SqliteStore, clock: Clock
) -> None:
    secret, token = issue_token(store.tokens, role=Role.OPERATOR, name="console", now=T0)
    session = login(client, secret)
    assert client.get("/api/executions", headers=bearer(session)).status_code == 200
    store.tokens.revoke(token.token_id, clock.now)
    assert_refused(client.get("/api/executions", headers=bearer(session)), 401)


def test_session_history(client: TestClient, tokens: dict[Role, str], clock: Clock) -> None:
    session = login(client, tokens[Role.VIEWER])
    clock.now = T0 + 61  # a use a minute later records the activity
    assert client.get("/api/executions", headers=bearer(session)).status_code == 200
    history = client.get(f"/api/sessions/{session}/history", headers=bearer(session))
    assert history.status_code == 200, history.text
    items = history.json()["items"]
    assert [(i["operation"], i["session"]["last_activity_at"]) for i in items] == [
        ("put", T0),
        ("put", T0 + 61),
    ]
    assert items[0]["revision"] < items[1]["revision"]
    client.delete(f"/api/sessions/{session}", headers=bearer(session))
    viewer, admin = bearer(tokens[Role.VIEWER]), bearer(tokens[Role.ADMIN])
    assert_refused(client.get(f"/api/sessions/{session}/history", headers=viewer), 401)
    audit = client.get(f"/api/sessions/{session}/history", headers=admin)
    assert [i["operation"] for i in audit.json()["items"]] == ["put", "put", "delete"]
    assert audit.json()["items"][-1]["session"] is None
    unknown = client.get("/api/sessions/noetls_nothing/history", headers=admin)
    assert unknown.status_code == 404


def test_the_session_token_is_never_stored_or_shown_again(
    client: TestClient, tokens: dict[Role, str], session_store: SessionStore
) -> None:
    session = login(client, tokens[Role.VIEWER])
    checked = client.get(f"/api/sessions/{session}", headers=bearer(session))
    history = client.get(f"/api/sessions/{session}/history", headers=bearer(session))
    assert session not in checked.text + history.text
    key = Sessions.key(session)
    stored = session_store.get(key)
    assert stored is not None and session not in repr(stored)


def test_health_needs_no_token_and_keeps_working(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200 and response.json()["database"] == "ok"
    assert time.time() > 0
