"""The HTTP API over a real SQLite file and a real Orchestrator (FastAPI's TestClient).

Playbooks whose steps have no tool finish inside `start_execution`, so most tests need no
worker; the few that need a running execution play the worker's part with the store's
queue (`claim`, `complete`) and turn the orchestrator by hand (`run_once`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.routing import Route

from noetl import __version__
from noetl.core import Outcome
from noetl.dsl.validate import load_playbook_text
from noetl.errors import ConfigError
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.auth import Gate
from noetl.sessions import Sessions
from noetl.store import MemoryStore, SqliteStore, StoreUnavailableError
from noetl.store.base import Store
from noetl.worker.tools import ToolRegistry
from tests.helpers.auth import auth_headers

with warnings.catch_warnings():
    # Starlette asks for `httpx2` instead of `httpx`; either drives the app the same way.
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

NO_TOOLS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: no_tools
  path: tests/no_tools
workload:
  api_token: s3cr3t
  user: ada
workflow:
  - step: start
    result:
      pick: "{{ workload }}"
      as: creds
    next: [items]
  - step: items
    loop:
      collection: [1, 2, 3]
"""

ROUTING = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: routing
workload:
  amount: 250
workflow:
  - step: start
    next:
      mode: exclusive
      to:
        - step: large
          when: "{{ workload.amount >= 1000 }}"
        - step: medium
          when: "{{ workload.amount >= 100 }}"
        - step: small
  - step: large
  - step: medium
  - step: small
"""

WITH_TOOL = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: with_tool
workflow:
  - step: start
    next: [work]
  - step: work
    loop:
      collection: [1, 2, 3]
      mode: parallel
    tool:
      kind: noop
      args:
        n: "{{ item }}"
"""

INVALID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: broken
workflow:
  - step: start
    next: nowhere
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    adapter = SqliteStore(tmp_path / "noetl.db")
    yield adapter
    adapter.close()


@pytest.fixture
def orchestrator(store: SqliteStore) -> Orchestrator:
    return Orchestrator(store, owner="test")


@pytest.fixture
def app(store: SqliteStore, orchestrator: Orchestrator) -> FastAPI:
    return create_app(store, orchestrator, version=__version__)


@pytest.fixture
def client(app: FastAPI, store: SqliteStore) -> Iterator[TestClient]:
    """A client that sends an admin token (tests/integration/test_auth.py covers the
    roles)."""
    with TestClient(app, headers=auth_headers(store)) as test_client:
        yield test_client


def start(client: TestClient, body: dict[str, Any]) -> str:
    response = client.post("/api/executions", json=body)
    assert response.status_code == 201, response.text
    execution_id: str = response.json()["execution_id"]
    assert response.headers["location"] == f"/api/executions/{execution_id}"
    return execution_id


def assert_error(response: Any, status: int, error: str, *needles: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == error
    for needle in needles:
        assert needle in body["message"], body["message"]
    return body


# --- health and docs ---------------------------------------------------------------------


def test_health(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__, "database": "ok"}


class BrokenStore:
    """A store whose every call fails the way its class says."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise self.error

        return fail


def broken_client(error: Exception) -> TestClient:
    store: Any = BrokenStore(error)
    # Authentication off: the store that would hold the tokens is the broken one.
    gate = Gate(store.tokens, Sessions(store.sessions), enabled=False)
    return TestClient(
        create_app(store, Orchestrator(store, owner="test"), version="9.9", gate=gate)
    )


def test_health_when_the_database_is_down() -> None:
    response = broken_client(StoreUnavailableError("db is gone")).get("/health")
    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "version": "9.9", "database": "unavailable"}


def test_store_unavailable_is_503_and_config_error_400() -> None:
    busy = broken_client(StoreUnavailableError("database is busy", retryable=True))
    response = busy.get("/api/executions")
    assert_error(response, 503, "unavailable", "database is busy")
    assert response.headers["retry-after"] == "1"
    gone = broken_client(StoreUnavailableError("cannot open /x.db"))
    assert "retry-after" not in gone.get("/api/playbooks").headers
    response = broken_client(ConfigError("bad store URL")).get("/api/executions/1")
    assert_error(response, 400, "bad_config", "bad store URL")


def test_unexpected_errors_are_a_generic_logged_500(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Exploding(Orchestrator):
        def start_execution(self, text: str, **kwargs: Any) -> str:
            raise RuntimeError("boom: internal detail")

    client = TestClient(
        create_app(store, Exploding(store, owner="t"), version="1"), headers=auth_headers(store)
    )
    with caplog.at_level(logging.ERROR, logger="noetl.server"):
        response = client.post("/api/executions", json={"playbook": NO_TOOLS})
    body = assert_error(response, 500, "internal", "server log")
    assert "boom" not in response.text
    assert body.keys() == {"error", "message"}
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


def test_openapi_documents_every_route_with_a_summary(client: TestClient, app: FastAPI) -> None:
    spec = client.get("/openapi.json").json()
    operations = {
        (path, method): op for path, item in spec["paths"].items() for method, op in item.items()
    }
    expected = {
        ("/health", "get"),
        ("/api/playbooks", "post"),
        ("/api/playbooks", "get"),
        ("/api/playbooks/{path}", "get"),
        ("/api/executions", "post"),
        ("/api/executions", "get"),
        ("/api/executions/{execution_id}", "get"),
        ("/api/executions/{execution_id}/cancel", "post"),
        ("/api/executions/{execution_id}/graph", "get"),
        ("/api/executions/{execution_id}/events", "get"),
        ("/api/executions/{execution_id}/steps/{step}/events", "get"),
    }
    assert expected <= set(operations)
    for key, op in operations.items():
        assert op.get("summary"), key
    assert client.get("/docs").status_code == 200


# --- playbooks ---------------------------------------------------------------------------


def test_register_list_and_get_playbooks(client: TestClient) -> None:
    first = client.post("/api/playbooks", json={"content": NO_TOOLS})
    assert first.status_code == 201, first.text
    body = first.json()
    assert (body["path"], body["version"], body["name"]) == ("tests/no_tools", 1, "no_tools")
    # The same text again is the same version; new text is the next one.
    again = client.post("/api/playbooks", json={"content": NO_TOOLS}).json()
    assert again["version"] == 1
    changed = NO_TOOLS.replace("user: ada", "user: bob")
    assert client.post("/api/playbooks", json={"content": changed}).json()["version"] == 2
    named = client.post("/api/playbooks", json={"content": ROUTING, "path": "team/routing"})
    assert named.json()["path"] == "team/routing"

    listed = client.get("/api/playbooks").json()["items"]
    assert {(p["path"], p["version"]) for p in listed} == {
        ("tests/no_tools", 2),
        ("team/routing", 1),
    }
    latest = client.get("/api/playbooks/tests/no_tools").json()
    assert (latest["version"], latest["content"]) == (2, changed)
    assert client.get("/api/playbooks/tests/no_tools", params={"version": 1}).json()["content"] == (
        NO_TOOLS
    )


def test_register_reports_warnings(client: TestClient) -> None:
    text = NO_TOOLS.replace("apiVersion: noetl.io/v2\n", "")
    warnings_ = client.post("/api/playbooks", json={"content": text}).json()["warnings"]
    assert [w["code"] for w in warnings_] == ["W402"]


def test_register_invalid_playbook_is_422_with_diagnostics(client: TestClient) -> None:
    response = client.post("/api/playbooks", json={"content": INVALID, "path": "x/broken"})
    body = assert_error(response, 422, "invalid_playbook", "1 error")
    (diag,) = body["diagnostics"]
    assert diag["line"] == 7  # the `next:` line
    assert diag["step"] == "start"
    assert diag["file"] == "x/broken"
    assert diag["code"].startswith("E")
    assert "nowhere" in diag["message"]
    assert diag["key"].startswith("workflow[0].next")
    assert client.get("/api/playbooks").json()["items"] == []


def test_register_bad_requests(client: TestClient) -> None:
    no_path = ROUTING  # no metadata.path and none given
    response = client.post("/api/playbooks", json={"content": no_path})
    assert_error(response, 422, "invalid_request", "body.path", "metadata.path")
    assert_error(client.post("/api/playbooks", json={}), 422, "invalid_request", "body.content")
    response = client.post("/api/playbooks", json={"content": ""})
    assert_error(response, 422, "invalid_request", "body.content")
    response = client.post("/api/playbooks", json={"content": "key: [unclosed"})
    body = assert_error(response, 422, "invalid_playbook")
    assert body["diagnostics"][0]["line"] == 1


def test_unknown_playbooks_are_404(client: TestClient) -> None:
    assert_error(client.get("/api/playbooks/no/such"), 404, "not_found", "no/such")
    client.post("/api/playbooks", json={"content": NO_TOOLS})
    response = client.get("/api/playbooks/tests/no_tools", params={"version": 7})
    assert_error(response, 404, "not_found", "version 7")
    response = client.get("/api/playbooks/tests/no_tools", params={"version": 0})
    assert_error(response, 422, "invalid_request", "query.version")


# --- starting and listing executions --------------------------------------------------


UPSTREAM_CTX = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: upstream_ctx
  path: tests/upstream_ctx
workload:
  api_token: s3cr3t
  user: bob
workflow:
  - step: start
    set:
      ctx.session: {api_token: "{{ api_token }}", user: "{{ user }}"}
      ctx.count: 1
"""


def test_an_upstream_playbooks_ctx_is_shown_masked(client: TestClient) -> None:
    execution_id = start(client, {"playbook": UPSTREAM_CTX})
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["status"] == "ok"
    assert detail["ctx"] == {"session": {"api_token": "***", "user": "bob"}, "count": 1}
    assert "s3cr3t" not in client.get(f"/api/executions/{execution_id}").text
    assert "s3cr3t" not in client.get(f"/api/executions/{execution_id}/events").text
    native = start(client, {"playbook": NO_TOOLS})
    assert "ctx" not in client.get(f"/api/executions/{native}").json()


def test_inline_execution_without_tools_finishes_at_once(client: TestClient) -> None:
    execution_id = start(client, {"playbook": NO_TOOLS, "workload": {"user": "bob"}})
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["execution_id"] == execution_id
    assert detail["status"] == "ok"
    assert detail["steps"] == {
        "start": {"status": "ok"},
        "items": {"status": "ok", "total": 3, "completed": 3, "succeeded": 3, "failed": 0},
    }
    assert detail["context"] == {"creds": {"api_token": "***", "user": "bob"}}
    assert detail["workload"] == {"api_token": "***", "user": "bob"}
    assert "s3cr3t" not in client.get(f"/api/executions/{execution_id}").text
    assert detail["playbook_name"] == "no_tools"
    assert detail["playbook_path"] == "tests/no_tools"
    assert detail["finished_at"] is not None
    assert detail["finished_at"] >= detail["created_at"]
    assert detail["parent_execution_id"] is None
    assert "error" not in detail


def test_status_is_the_object_noetl_run_json_prints(client: TestClient) -> None:
    execution_id = start(client, {"playbook": ROUTING, "workload": {"amount": 5}})
    detail = client.get(f"/api/executions/{execution_id}").json()
    playbook = load_playbook_text(ROUTING).require()
    with EmbeddedRuntime(MemoryStore(), ToolRegistry()) as runtime:
        local = runtime.run(playbook, workload={"amount": 5}, source_text=ROUTING).to_dict()
    assert set(local) <= set(detail)
    for key in ("status", "steps", "context"):
        assert detail[key] == local[key], key
    assert detail["steps"]["small"] == {"status": "ok"}
    assert detail["steps"]["large"] == {"status": "skipped"}


def test_start_a_registered_playbook_by_path_and_version(client: TestClient) -> None:
    client.post("/api/playbooks", json={"content": NO_TOOLS})
    second = NO_TOOLS.replace("user: ada", "user: eve")
    assert client.post("/api/playbooks", json={"content": second}).json()["version"] == 2
    latest = start(client, {"path": "tests/no_tools"})
    pinned = start(client, {"path": "tests/no_tools", "version": 1})
    parent = start(client, {"path": "tests/no_tools", "options": {"parent_execution_id": latest}})
    contexts = {
        i: client.get(f"/api/executions/{i}").json()["context"]["creds"]["user"]
        for i in (latest, pinned)
    }
    assert contexts == {latest: "eve", pinned: "ada"}
    child = client.get(f"/api/executions/{parent}").json()
    assert child["parent_execution_id"] == latest
    assert child["playbook_path"] == "tests/no_tools"


def test_a_registered_playbook_starts_without_reading_its_yaml_again(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registering builds the playbook's engine from the model it validated: its first
    start reads no YAML (a large playbook's read is most of a start)."""
    client.post("/api/playbooks", json={"content": NO_TOOLS})

    def no_reading(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the playbook's YAML was read again")

    monkeypatch.setattr("noetl.decision.decider.load_playbook_text", no_reading)
    started = start(client, {"path": "tests/no_tools"})
    assert client.get(f"/api/executions/{started}").json()["status"] == "ok"
    # Another text (not registered) is read as it starts, as before (here: refused).
    other = NO_TOOLS.replace("user: ada", "user: eve")
    assert client.post("/api/executions", json={"playbook": other}).status_code == 500


@pytest.mark.parametrize(
    ("body", "needles"),
    [
        ({"playbook": NO_TOOLS, "path": "tests/no_tools"}, ["exactly one"]),
        ({"workload": {}}, ["exactly one"]),
        ({"playbook": NO_TOOLS, "version": 2}, ['"version" goes with "path"']),
        ({"playbook": NO_TOOLS, "workload": [1, 2]}, ["body.workload"]),
        ({"playbook": NO_TOOLS, "options": {"priority": 3}}, ["body.options.priority"]),
        ({"playbook": NO_TOOLS, "surprise": 1}, ["body.surprise"]),
        ({"path": "x", "version": "latest"}, ["body.version"]),
        ([1, 2, 3], ["body"]),
    ],
)
def test_start_rejects_bad_requests(client: TestClient, body: Any, needles: list[str]) -> None:
    response = client.post("/api/executions", json=body)
    assert_error(response, 422, "invalid_request", *needles)


def test_start_rejects_an_invalid_inline_playbook_with_line_numbers(client: TestClient) -> None:
    response = client.post("/api/executions", json={"playbook": INVALID})
    body = assert_error(response, 422, "invalid_playbook")
    assert [(d["line"], d["step"]) for d in body["diagnostics"]] == [(7, "start")]
    assert client.get("/api/executions").json()["items"] == []


def test_start_an_unregistered_path_is_404(client: TestClient) -> None:
    response = client.post("/api/executions", json={"path": "not/registered"})
    assert_error(response, 404, "not_found", "not/registered")
    client.post("/api/playbooks", json={"content": NO_TOOLS})
    response = client.post("/api/executions", json={"path": "tests/no_tools", "version": 5})
    assert_error(response, 404, "not_found", "version 5")


def test_list_executions_newest_first_with_filters(client: TestClient) -> None:
    first = start(client, {"playbook": NO_TOOLS})
    running = start(client, {"playbook": WITH_TOOL})
    third = start(client, {"playbook": ROUTING})
    listed = client.get("/api/executions").json()
    assert [i["execution_id"] for i in listed["items"]] == [third, running, first]
    assert (listed["limit"], listed["offset"]) == (50, 0)
    assert listed["items"][0]["playbook_name"] == "routing"
    only_running = client.get("/api/executions", params={"status": "running"}).json()["items"]
    assert [i["execution_id"] for i in only_running] == [running]
    page = client.get("/api/executions", params={"limit": 1, "offset": 1}).json()
    assert [i["execution_id"] for i in page["items"]] == [running]
    assert (page["limit"], page["offset"]) == (1, 1)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "bogus"}, "query.status"),
        ({"limit": 0}, "query.limit"),
        ({"limit": 100_000}, "query.limit"),
        ({"offset": -1}, "query.offset"),
        ({"limit": "ten"}, "query.limit"),
    ],
)
def test_list_executions_rejects_bad_filters(
    client: TestClient, params: dict[str, Any], field: str
) -> None:
    assert_error(client.get("/api/executions", params=params), 422, "invalid_request", field)


# --- a running execution -----------------------------------------------------------------


def finish_one_task(store: Store, orchestrator: Orchestrator) -> None:
    """Play a worker for one task, then let the orchestrator decide."""
    (lease,) = store.claim("test-worker", limit=1)
    outcome = Outcome(task_id=lease.task.task_id, ok=True, this=lease.task.args)
    assert store.complete(lease.task.task_id, lease.token, outcome.to_payload())
    orchestrator.run_once()


def test_a_running_execution_is_folded_from_its_events(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, {"playbook": WITH_TOOL})
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["status"] == "running"
    assert detail["finished_at"] is None
    assert detail["steps"]["work"] == {
        "status": "running",
        "total": 3,
        "completed": 0,
        "succeeded": 0,
        "failed": 0,
    }
    finish_one_task(store, orchestrator)
    work = client.get(f"/api/executions/{execution_id}").json()["steps"]["work"]
    assert (work["status"], work["completed"], work["succeeded"]) == ("running", 1, 1)
    nodes = client.get(f"/api/executions/{execution_id}/graph").json()["nodes"]
    assert nodes[1] == {
        "id": "work",
        "status": "running",
        "run": 1,
        "runs": 1,
        "total": 3,
        "completed": 1,
        "succeeded": 1,
        "failed": 0,
    }
    finish_one_task(store, orchestrator)
    finish_one_task(store, orchestrator)
    done = client.get(f"/api/executions/{execution_id}").json()
    assert done["status"] == "ok"
    assert done["steps"]["work"]["completed"] == 3


def test_cancel(client: TestClient, orchestrator: Orchestrator) -> None:
    execution_id = start(client, {"playbook": WITH_TOOL})
    url = f"/api/executions/{execution_id}/cancel"
    first = client.post(url)
    assert first.status_code == 202
    assert first.json() == {"execution_id": execution_id, "canceled": True, "status": "running"}
    assert client.post(url).status_code == 202  # asking twice is harmless
    orchestrator.run_once()
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["status"] == "canceled"
    assert detail["steps"]["work"]["status"] == "canceled"
    late = client.post(url)
    assert late.status_code == 202
    assert late.json() == {"execution_id": execution_id, "canceled": False, "status": "canceled"}
    finished = start(client, {"playbook": NO_TOOLS})
    response = client.post(f"/api/executions/{finished}/cancel")
    assert response.json()["canceled"] is False


def test_an_execution_whose_playbook_text_is_gone_shows_the_steps_of_its_log(
    client: TestClient, store: SqliteStore
) -> None:
    # `noetl run` over the same database, its playbook text not stored: no graph to lay
    # the steps out, so they come from the log, in order of appearance.
    playbook = load_playbook_text(ROUTING).require()
    with EmbeddedRuntime(store, ToolRegistry()) as runtime:
        execution_id = runtime.run(playbook, workload={"amount": 5000}, source_text="").execution_id
    detail = client.get(f"/api/executions/{execution_id}").json()
    assert detail["status"] == "ok"
    assert detail["steps"] == {"start": {"status": "ok"}, "large": {"status": "ok"}}
    graph = client.get(f"/api/executions/{execution_id}/graph").json()
    assert [n["id"] for n in graph["nodes"]] == ["start", "large"]
    assert graph["edges"] == []


# --- graph and events --------------------------------------------------------------------


def test_graph_marks_the_edges_taken(client: TestClient) -> None:
    execution_id = start(client, {"playbook": ROUTING, "workload": {"amount": 500}})
    graph = client.get(f"/api/executions/{execution_id}/graph").json()
    assert graph["execution_id"] == execution_id
    assert [(n["id"], n["status"]) for n in graph["nodes"]] == [
        ("start", "ok"),
        ("large", "skipped"),
        ("medium", "ok"),
        ("small", "skipped"),
    ]
    assert [(e["from"], e["to"], e["mode"], e["taken"]) for e in graph["edges"]] == [
        ("start", "large", "exclusive", False),
        ("start", "medium", "exclusive", True),
        ("start", "small", "exclusive", False),
    ]
    assert graph["edges"][0]["when"] == "{{ workload.amount >= 1000 }}"
    assert graph["edges"][2]["when"] is None
    assert {e["origin"] for e in graph["edges"]} == {"next"}


def test_events_with_filters(client: TestClient) -> None:
    execution_id = start(client, {"playbook": NO_TOOLS})
    url = f"/api/executions/{execution_id}/events"
    body = client.get(url).json()
    events = body["items"]
    assert body["execution_id"] == execution_id
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "workflow.started"
    assert events[0]["payload"]["workload"] == {"api_token": "***", "user": "ada"}
    assert events[-1]["type"] == "workflow.finished"
    assert "s3cr3t" not in client.get(url).text

    finished = client.get(url, params={"event_type": "step.finished"}).json()["items"]
    assert [e["step"] for e in finished] == ["start", "items"]
    of_items = client.get(url, params={"step": "items"}).json()["items"]
    assert of_items
    assert {e["step"] for e in of_items} == {"items"}
    by_path = client.get(f"/api/executions/{execution_id}/steps/items/events").json()["items"]
    assert by_path == of_items
    started = client.get(
        f"/api/executions/{execution_id}/steps/items/events",
        params={"event_type": "loop.iteration.started"},
    ).json()["items"]
    assert [e["payload"]["index"] for e in started] == [0, 1, 2]
    assert [e["seq"] for e in client.get(url, params={"limit": 2}).json()["items"]] == [1, 2]
    after = client.get(url, params={"after_seq": 3, "limit": 1}).json()["items"]
    assert [e["seq"] for e in after] == [4]
    later = client.get(url, params={"from_timestamp": time.time() + 3600}).json()["items"]
    assert later == []
    assert client.get(url, params={"step": "nope"}).json()["items"] == []


def test_event_filters_are_validated(client: TestClient) -> None:
    execution_id = start(client, {"playbook": NO_TOOLS})
    url = f"/api/executions/{execution_id}/events"
    assert_error(client.get(url, params={"limit": 0}), 422, "invalid_request", "query.limit")
    response = client.get(url, params={"from_timestamp": "yesterday"})
    assert_error(response, 422, "invalid_request", "query.from_timestamp")


# --- errors on every route ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/executions/123",
        "/api/executions/123/graph",
        "/api/executions/123/events",
        "/api/executions/123/steps/start/events",
    ],
)
def test_unknown_execution_is_404(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404, "not_found", "123")


def test_cancel_unknown_execution_is_404(client: TestClient) -> None:
    assert_error(client.post("/api/executions/123/cancel"), 404, "not_found", "123")


def test_unknown_routes_and_methods_keep_the_error_shape(client: TestClient) -> None:
    assert_error(client.get("/api/nothing"), 404, "not_found")
    assert_error(client.delete("/api/executions"), 405, "method_not_allowed")


def _concrete(path: str, execution_id: str) -> str:
    return (
        path.replace("{execution_id}", execution_id)
        .replace("{step}", "start")
        .replace("{path}", "tests/no_tools")
    )


def every_route(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route: the API from its OpenAPI document (FastAPI's own
    route objects differ between versions), the docs pages from the router."""
    out = {
        (method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item
    }
    for route in app.routes:
        if isinstance(route, Route) and route.methods:
            out.update((method, route.path) for method in route.methods)
    return out


GARBAGE: list[dict[str, Any]] = [
    {"content": b"{not json", "headers": {"content-type": "application/json"}},
    {"content": b"\xff\xfe\x00garbage", "headers": {"content-type": "application/json"}},
    {"content": b"[1, 2]", "headers": {"content-type": "application/json"}},
    {"content": b"null", "headers": {"content-type": "application/json"}},
    {
        "content": b'{"content": 5, "playbook": {}, "path": [], "workload": "x"}',
        "headers": {"content-type": "application/json"},
    },
    {"content": b"plain text", "headers": {"content-type": "text/plain"}},
]


def test_no_route_answers_500_to_a_garbage_body(client: TestClient, app: FastAPI) -> None:
    client.post("/api/playbooks", json={"content": NO_TOOLS})
    real = start(client, {"playbook": NO_TOOLS})
    routes = every_route(app)
    assert len(routes) >= 13  # 11 API operations, /openapi.json, /docs
    statuses = set()
    for method, path in sorted(routes):
        for execution_id in (real, "no-such-id"):
            url = _concrete(path, execution_id)
            for body in GARBAGE:
                response = client.request(method, url, **body)
                assert response.status_code < 500, (method, url, body, response.text)
                statuses.add(response.status_code)
    assert {200, 404, 422} <= statuses


def test_a_return_step_is_checked_against_the_registered_child(client: TestClient) -> None:
    child = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: kid, path: team/kid}\n"
        "workflow:\n  - step: made\n    tool: noop\n"
    )

    def parent(step: str, path: str = "team/kid") -> str:
        return (
            "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: dad, path: team/dad}\n"
            "workflow:\n  - step: call\n"
            f"    tool: {{kind: playbook, path: {path}, return_step: {step}}}\n"
        )

    # Not registered yet: the run checks it, not the registration.
    assert client.post("/api/playbooks", json={"content": parent("end")}).status_code == 201
    assert client.post("/api/playbooks", json={"content": child}).status_code == 201
    response = client.post("/api/playbooks", json={"content": parent("gone")})
    body = assert_error(response, 422, "invalid_playbook", "1 error")
    (diag,) = body["diagnostics"]
    assert (diag["code"], diag["line"], diag["step"]) == ("E333", 6, "call")
    assert "return_step 'gone' is not a step of child playbook 'team/kid'" in diag["message"]
    assert client.post("/api/playbooks", json={"content": parent("made")}).status_code == 201
    checked = client.post("/api/playbooks/validate", json={"content": parent("gone")}).json()
    assert checked["valid"] is False
    assert [d["code"] for d in checked["diagnostics"]] == ["E333"]
    templated = parent("gone", path='"{{ workload.kid }}"')
    assert client.post("/api/playbooks/validate", json={"content": templated}).json()["valid"]
