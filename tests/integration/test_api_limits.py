"""Limits at the API's edge: data too deep, NUL characters, bodies over the limit, a parent
that does not exist. Over a real SQLite file and a real PostgreSQL (FastAPI's TestClient);
the real server over a socket is in tests/distributed/test_bad_input.py."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from noetl import __version__
from noetl.core import Event
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store.base import Append, Store
from tests.helpers.auth import auth_headers

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: echo
workload:
  note: hi
workflow:
  - step: start
    tool:
      kind: noop
      args:
        note: "{{ workload.note }}"
"""
LIMIT = 64 * 1024


def nested(levels: int) -> Any:
    """A value `levels` maps deep: {"a": {"a": ... "leaf"}}."""
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.fixture
def app(store: Store) -> FastAPI:
    return create_app(
        store, Orchestrator(store, owner="test"), version=__version__, max_body_bytes=LIMIT
    )


@pytest.fixture
def client(app: FastAPI, store: Store) -> Iterator[TestClient]:
    with TestClient(app, headers=auth_headers(store)) as test_client:
        yield test_client


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == code, body
    return body


def executions(client: TestClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.get("/api/executions").json()["items"]
    return items


@pytest.mark.parametrize("levels", [65, 350, 900])
def test_a_workload_nested_too_deep_is_refused_naming_the_limit(
    client: TestClient, levels: int
) -> None:
    response = client.post(
        "/api/executions", json={"playbook": PLAYBOOK, "workload": {"d": nested(levels)}}
    )
    body = error(response, 422, "invalid_request")
    assert "body.workload" in body["message"]
    assert "more than 64 levels deep" in body["message"]
    assert executions(client) == []


def test_a_workload_at_the_depth_limit_is_accepted(client: TestClient) -> None:
    response = client.post(
        "/api/executions", json={"playbook": PLAYBOOK, "workload": {"d": nested(63)}}
    )
    assert response.status_code == 201, response.text


def test_a_body_too_deep_for_the_json_parser_is_a_422(client: TestClient) -> None:
    depth = 30_000  # past json's recursion limit, under the body limit
    raw = '{"playbook": "x", "workload": ' + "[" * depth + "]" * depth + "}"
    response = client.post(
        "/api/executions", content=raw.encode(), headers={"content-type": "application/json"}
    )
    body = error(response, 422, "invalid_request")
    assert "more than 64 levels deep" in body["message"]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"playbook": PLAYBOOK, "workload": {"note": "a\u0000b"}}, "body.workload"),
        ({"playbook": PLAYBOOK, "workload": {"list": ["ok", {"k\u0000": 1}]}}, "body.workload"),
        ({"playbook": PLAYBOOK + "#\u0000"}, "body.playbook"),
        ({"path": "x\u0000y"}, "body.path"),
        (
            {"playbook": PLAYBOOK, "options": {"parent_execution_id": "1\u00002"}},
            "body.options.parent_execution_id",
        ),
    ],
)
def test_a_nul_character_in_any_string_is_a_422_naming_the_field(
    client: TestClient, body: dict[str, Any], where: str
) -> None:
    found = error(client.post("/api/executions", json=body), 422, "invalid_request")
    assert where in found["message"]
    assert "NUL character" in found["message"]
    assert executions(client) == []


def test_a_number_json_cannot_hold_is_a_422(client: TestClient) -> None:
    raw = '{"playbook": "x", "workload": {"ratio": NaN}}'
    response = client.post(
        "/api/executions", content=raw.encode(), headers={"content-type": "application/json"}
    )
    found = error(response, 422, "invalid_request")
    assert "body.workload" in found["message"] and "workload.ratio" in found["message"]
    assert executions(client) == []


def test_a_nul_character_in_other_routes_is_a_422(client: TestClient) -> None:
    found = error(
        client.post("/api/playbooks", json={"content": "x", "path": "a\u0000"}),
        422,
        "invalid_request",
    )
    assert "body.path" in found["message"]
    for url in ("/api/executions/12%0034", "/api/playbooks/a%00b", "/api/executions?status=%00"):
        found = error(client.get(url), 422, "invalid_request")
        assert "NUL character" in found["message"], url


def test_a_body_over_the_limit_is_413_naming_the_limit(client: TestClient) -> None:
    blob = "x" * (LIMIT + 1)
    response = client.post("/api/executions", json={"playbook": PLAYBOOK, "workload": {"b": blob}})
    body = error(response, 413, "too_large")
    assert str(LIMIT) in body["message"] and "server.max_body_bytes" in body["message"]
    assert body["limit"] == LIMIT
    assert executions(client) == []


def test_a_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"playbook": "x", "workload": {"b": "'
        for _ in range(LIMIT // 1024 + 8):
            yield b"y" * 1024
        yield b'"}}'

    response = client.post(
        "/api/executions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}
    body = error(response, 413, "too_large")
    assert str(LIMIT) in body["message"]
    assert executions(client) == []


def test_a_body_under_the_limit_is_read(client: TestClient) -> None:
    blob = "x" * (LIMIT // 2)
    response = client.post("/api/executions", json={"playbook": PLAYBOOK, "workload": {"b": blob}})
    assert response.status_code == 201, response.text
    execution_id = response.json()["execution_id"]
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["workload"]["b"] == blob


def test_a_parent_that_does_not_exist_is_refused(client: TestClient) -> None:
    body = {"playbook": PLAYBOOK, "options": {"parent_execution_id": "404404404"}}
    found = error(client.post("/api/executions", json=body), 422, "invalid_request")
    assert "body.options.parent_execution_id" in found["message"]
    assert "404404404" in found["message"]
    assert executions(client) == []
    parent = client.post("/api/executions", json={"playbook": PLAYBOOK}).json()["execution_id"]
    body = {"playbook": PLAYBOOK, "options": {"parent_execution_id": parent}}
    response = client.post("/api/executions", json=body)
    assert response.status_code == 201, response.text
    child = client.get(f"/api/executions/{response.json()['execution_id']}").json()
    assert child["parent_execution_id"] == parent


def test_an_execution_holding_data_too_deep_is_still_shown(
    client: TestClient, store: Store
) -> None:
    """Data stored before these limits (or by a tool of an older worker) is shown with
    its deepest part replaced by a marker, never a 500."""
    execution_id = client.post("/api/executions", json={"playbook": PLAYBOOK}).json()[
        "execution_id"
    ]
    last = store.load_events(execution_id)[-1]
    deep = nested(900)
    event = Event(
        last.seq + 1,
        "step.finished",
        execution_id,
        last.ts,
        "start",
        {"status": "ok", "result": deep},
    )
    store.commit([Append(execution_id, last.seq, [event])])
    detail = client.get(f"/api/executions/{execution_id}")
    assert detail.status_code == 200, detail.text
    events = client.get(f"/api/executions/{execution_id}/events")
    assert events.status_code == 200, events.text
    assert "nested deeper than 64 levels: not shown" in events.text
    step = client.get(f"/api/executions/{execution_id}/steps/start")
    assert step.status_code == 200, step.text
    assert step.json()["status"] == "ok"
