"""`/api/schedules` over a real SQLite store: a playbook registered with a triggers block
makes its schedules; list (with next ticks), create, pause, resume, run now, delete."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl import __version__
from noetl.credentials.keys import Keyring, new_key
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.helpers.auth import auth_headers
from tests.helpers.testclient import TestClient

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: nightly, path: etl/nightly}
workload: {day: null}
triggers:
  - name: night
    cron: "30 2 * * *"
    timezone: Europe/Berlin
    workload: {day: "{{ tick.date }}"}
workflow:
  - step: start
    tool: {kind: noop, args: {day: "{{ workload.day }}"}}
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    store = SqliteStore(tmp_path / "noetl.db")
    app = create_app(store, Orchestrator(store, owner="test"), version=__version__)
    with TestClient(app, headers=auth_headers(store)) as test_client:
        yield test_client
    store.close()


def register(client: TestClient, text: str) -> None:
    response = client.post("/api/playbooks", json={"content": text})
    assert response.status_code == 201, response.text


def test_a_registered_playbook_makes_its_schedules(client: TestClient) -> None:
    register(client, PLAYBOOK)
    items = client.get("/api/schedules").json()["items"]
    assert [(i["name"], i["path"], i["source"], i["paused"]) for i in items] == [
        ("etl/nightly:night", "etl/nightly", "playbook", False)
    ]
    upcoming = items[0]["next_ticks"]
    assert len(upcoming) == 3
    assert all("T02:30:00+0" in t for t in upcoming)  # 02:30 Berlin time, CET or CEST
    # a new version without the block removes them
    register(
        client,
        PLAYBOOK.split("triggers:", maxsplit=1)[0] + "workflow:" + PLAYBOOK.split("workflow:")[1],
    )
    assert client.get("/api/schedules").json()["items"] == []


def test_create_pause_resume_run_delete(client: TestClient) -> None:
    register(client, PLAYBOOK)
    made = client.post(
        "/api/schedules",
        json={"name": "often", "path": "etl/nightly", "trigger": {"every": "30s"}},
    )
    assert made.status_code == 201, made.text
    assert made.json()["source"] == "api"
    paused = client.post("/api/schedules/often/pause").json()
    assert (paused["paused"], paused["next_ticks"]) == (True, [])
    assert client.post("/api/schedules/often/resume").json()["paused"] is False
    run = client.post("/api/schedules/etl/nightly:night/run")
    assert run.status_code == 201, run.text
    execution_id = run.json()["execution_id"]
    assert client.get(f"/api/executions/{execution_id}").json()["status"] == "running"
    detail = client.get("/api/schedules/etl/nightly:night").json()
    assert [(t["status"], t["manual"], t["execution_id"]) for t in detail["ticks"]] == [
        ("started", True, execution_id)
    ]
    assert client.delete("/api/schedules/often").json() == {"name": "often", "deleted": True}
    assert client.delete("/api/schedules/often").status_code == 404
    assert client.post("/api/schedules/nope/run").status_code == 404


def test_a_bad_trigger_or_playbook_is_refused(client: TestClient) -> None:
    register(client, PLAYBOOK)
    bad = client.post(
        "/api/schedules",
        json={"name": "x", "path": "etl/nightly", "trigger": {"cron": "0 25 * * *"}},
    )
    assert bad.status_code == 422
    assert "trigger" in bad.text and "cron" in bad.text
    missing = client.post(
        "/api/schedules", json={"name": "x", "path": "etl/none", "trigger": {"every": 5}}
    )
    assert missing.status_code == 404
    invalid = client.post(
        "/api/playbooks",
        json={"content": PLAYBOOK.replace("02:30", "x").replace("Europe/Berlin", "Nowhere/Land")},
    )
    assert invalid.status_code == 422
    assert "timezone" in invalid.text


HOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hooked, path: etl/hooked}
workload: {ref: null}
triggers:
  - name: push
    webhook: true
    workload: {ref: "{{ request.body.ref }}"}
workflow:
  - step: start
    tool: {kind: noop, args: {ref: "{{ workload.ref }}"}}
"""


def test_a_webhook_starts_once_per_idempotency_key(client: TestClient) -> None:
    register(client, HOOK)
    listed = client.get("/api/schedules").json()["items"]
    assert [(i["name"], i["next_ticks"]) for i in listed] == [("etl/hooked:push", [])]
    url = "/api/triggers/etl/hooked:push"
    anonymous = {"Authorization": ""}
    # no token made yet: refused, as with a wrong one (no hint of which schedules exist)
    assert client.post(url, json={}, headers=anonymous).status_code == 401
    made = client.post("/api/schedules/etl/hooked:push/token")
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    assert token.startswith("nwh_")
    bearer = {"Authorization": f"Bearer {token}"}
    assert (
        client.post(url, json={}, headers={"Authorization": "Bearer nwh_wrong"}).status_code == 401
    )
    assert client.post("/api/triggers/etl/none:x", headers=bearer).status_code == 401
    keyed = {**bearer, "Idempotency-Key": "delivery-1"}
    first = client.post(url, json={"ref": "main"}, headers=keyed)
    assert first.status_code == 201, first.text
    again = client.post(url, json={"ref": "other"}, headers=keyed)
    assert again.status_code == 200
    assert again.json() == {**first.json(), "replayed": True}
    other = client.post(url, json={"ref": "dev"}, headers={**bearer, "Idempotency-Key": "d-2"})
    assert other.status_code == 201
    assert other.json()["execution_id"] != first.json()["execution_id"]
    events = client.get(f"/api/executions/{first.json()['execution_id']}/events").json()
    items = events["items"] if isinstance(events, dict) else events
    assert items[0]["payload"]["workload"]["ref"] == "main"
    # an API token is not a webhook token
    assert client.post(url, json={}).status_code == 401
    client.post("/api/schedules/etl/hooked:push/pause")
    assert client.post(url, json={}, headers=bearer).status_code == 409


def test_a_webhook_takes_a_signature_of_its_body(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "signed.db")
    app = create_app(
        store,
        Orchestrator(store, owner="test"),
        version=__version__,
        credential_keys=Keyring([new_key()]),
    )
    with TestClient(app, headers=auth_headers(store)) as client:
        register(client, HOOK)
        token = client.post("/api/schedules/etl/hooked:push/token").json()["token"]
        raw = json.dumps({"ref": "signed"}).encode()
        good = "sha256=" + hmac.new(token.encode(), raw, hashlib.sha256).hexdigest()
        url = "/api/triggers/etl/hooked:push"
        plain = {"Authorization": "", "Content-Type": "application/json"}
        signed = client.post(url, content=raw, headers={**plain, "X-NoETL-Signature": good})
        assert signed.status_code == 201, signed.text
        forged = "sha256=" + hmac.new(b"nwh_guess", raw, hashlib.sha256).hexdigest()
        assert (
            client.post(
                url, content=raw, headers={**plain, "X-NoETL-Signature": forged}
            ).status_code
            == 401
        )
        tampered = json.dumps({"ref": "other"}).encode()
        assert (
            client.post(
                url, content=tampered, headers={**plain, "X-NoETL-Signature": good}
            ).status_code
            == 401
        )
        assert (
            client.post(
                url, content=b"[1]", headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 422
        )
    store.close()


def test_without_the_credentials_key_only_the_token_works(client: TestClient) -> None:
    register(client, HOOK)
    token = client.post("/api/schedules/etl/hooked:push/token").json()["token"]
    raw = b"{}"
    good = "sha256=" + hmac.new(token.encode(), raw, hashlib.sha256).hexdigest()
    url = "/api/triggers/etl/hooked:push"
    denied = client.post(url, content=raw, headers={"Authorization": "", "X-NoETL-Signature": good})
    assert denied.status_code == 401  # the token was not kept: nothing to check it with
    lacking = client.post(url, content=raw, headers={"Authorization": f"Bearer {token}"})
    assert lacking.status_code == 422  # the trigger's workload reads request.body.ref
    assert "ref" in lacking.json()["message"]
    raw = b'{"ref": "main"}'
    assert (
        client.post(url, content=raw, headers={"Authorization": f"Bearer {token}"}).status_code
        == 201
    )
