"""What the console needs beyond the plain state: queued work without a live worker, the
playbook an execution runs (registered or not), and replaying a loop's dead letters at once.

Over a real SQLite file and a real Orchestrator (FastAPI's TestClient); a test plays the
worker with the store's queue and turns the orchestrator by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl import __version__
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from noetl.store.base import WorkerRecord
from tests.helpers.auth import auth_headers
from tests.integration.test_api_console import INSTANT, LOOP, TestClient, start, work

REGISTERED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: reg, path: team/reg}
workflow:
  - step: start
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
def client(store: SqliteStore, orchestrator: Orchestrator) -> Iterator[TestClient]:
    app = create_app(store, orchestrator, version=__version__)
    with TestClient(app, headers=auth_headers(store)) as test_client:
        yield test_client


def worker(store: SqliteStore, worker_id: str, *, pool: str = "default", **kw: object) -> None:
    now = time.time()
    status = str(kw.get("status", "running"))
    beat = float(kw.get("beat", now))  # type: ignore[arg-type]
    store.register_worker(WorkerRecord(worker_id, pool, "host", 1, status, now - 60, beat))


# --- queued work and live workers -------------------------------------------------------


def test_queued_tasks_without_a_live_worker_are_said_to_wait(
    client: TestClient, store: SqliteStore
) -> None:
    execution_id = start(client, LOOP)
    url = f"/api/executions/{execution_id}"
    alone = client.get(url).json()
    assert alone["status"] == "running"
    assert (alone["workers_alive"], alone["queued_tasks"]) == (0, 3)
    assert alone["queued_steps"] == {"items": 3}
    assert (alone["waiting_without_workers"], alone["waiting_steps"]) == (True, ["items"])
    step = client.get(f"{url}/steps/items").json()
    assert (step["queued"], step["waiting_without_workers"]) == (3, True)
    assert client.get(f"{url}/steps/start").json()["queued"] == 0

    # Neither a silent worker, a draining one nor one of another pool takes the tasks.
    worker(store, "w-quiet", beat=time.time() - 3600)
    worker(store, "w-drain", status="draining")
    worker(store, "w-gpu", pool="gpu")
    still = client.get(url).json()
    assert (still["workers_alive"], still["waiting_without_workers"]) == (2, True)

    worker(store, "w-live")
    served = client.get(url).json()
    assert (served["workers_alive"], served["queued_tasks"]) == (3, 3)
    assert (served["waiting_without_workers"], served["waiting_steps"]) == (False, [])
    assert client.get(f"{url}/steps/items").json()["waiting_without_workers"] is False


def test_claimed_and_finished_work_is_not_queued(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = start(client, LOOP)
    while work(store, orchestrator):
        pass
    done = client.get(f"/api/executions/{execution_id}").json()
    assert done["status"] == "ok"
    assert (done["queued_tasks"], done["queued_steps"], done["waiting_without_workers"]) == (
        0,
        {},
        False,
    )


# --- the playbook of an execution ---------------------------------------------------------


def test_an_execution_shows_the_playbook_it_runs_registered_or_not(
    client: TestClient,
) -> None:
    inline = start(client, INSTANT)
    body = client.get(f"/api/executions/{inline}/playbook").json()
    assert body["content"] == INSTANT
    assert (body["playbook_path"], body["catalog_version"], body["catalog_latest"]) == (
        None,
        None,
        None,
    )
    # metadata.path names a catalog entry nobody registered (as `noetl run` leaves it)
    unregistered = start(client, REGISTERED)
    body = client.get(f"/api/executions/{unregistered}/playbook").json()
    assert (body["playbook_path"], body["content"], body["catalog_version"]) == (
        "team/reg",
        REGISTERED,
        None,
    )
    assert client.get("/api/playbooks/team/reg").status_code == 404

    assert client.post("/api/playbooks", json={"content": REGISTERED}).status_code == 201
    changed = REGISTERED.replace("name: reg", "name: reg2")
    assert client.post("/api/playbooks", json={"content": changed}).status_code == 201
    body = client.get(f"/api/executions/{unregistered}/playbook").json()
    assert (body["catalog_version"], body["catalog_latest"]) == (1, 2)
    latest = client.post("/api/executions", json={"path": "team/reg"}).json()["execution_id"]
    body = client.get(f"/api/executions/{latest}/playbook").json()
    assert (body["content"], body["catalog_version"], body["catalog_latest"]) == (changed, 2, 2)
    assert client.get("/api/executions/nope/playbook").status_code == 404


# --- replaying a loop's dead letters at once ----------------------------------------------


def failed_loop(client: TestClient, store: SqliteStore, orchestrator: Orchestrator) -> str:
    """A LOOP execution whose items 0 and 2 failed for good (two attempts each)."""
    execution_id = start(client, LOOP)
    assert work(store, orchestrator, fail={0, 2}) == 3
    assert work(store, orchestrator, fail={0, 2}) == 2
    assert client.get(f"/api/executions/{execution_id}").json()["status"] == "fail"
    return execution_id


def test_one_call_replays_every_dead_letter_of_a_loop(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = failed_loop(client, store, orchestrator)
    url = f"/api/executions/{execution_id}"
    assert client.get(url).json()["dead_letters"] == {"items": 2}
    assert client.get(f"{url}/steps/items").json()["dead_letters"] == 2

    body = {"execution_id": execution_id, "step": "items"}
    answer = client.post("/api/dlq/replay", json=body)
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert sorted(r["message_id"] for r in done["replayed"]) == [
        f"{execution_id}.items.0",
        f"{execution_id}.items.2",
    ]
    assert all(r["replayed"] for r in done["replayed"])
    assert (done["refused"], done["remaining"]) == ([], 0)
    assert client.get(url).json()["dead_letters"] == {}

    orchestrator.run_once()  # the replays reopen the execution and queue both items
    assert client.get(url).json()["queued_steps"] == {"items": 2}
    assert work(store, orchestrator) == 2
    assert client.get(url).json()["status"] == "ok"
    again = client.post("/api/dlq/replay", json=body).json()
    assert (again["replayed"], again["refused"]) == ([], [])


def test_a_batch_replay_keeps_to_its_step_and_limit_and_reports_refusals(
    client: TestClient, store: SqliteStore, orchestrator: Orchestrator
) -> None:
    execution_id = failed_loop(client, store, orchestrator)
    other = client.post("/api/dlq/replay", json={"execution_id": execution_id, "step": "start"})
    assert other.json()["replayed"] == []
    one = client.post("/api/dlq/replay", json={"execution_id": execution_id, "limit": 1}).json()
    assert (len(one["replayed"]), one["remaining"]) == (1, 1)

    rest = (
        f"{execution_id}.items.2"
        if one["replayed"][0]["message_id"].endswith(".0")
        else (f"{execution_id}.items.0")
    )
    orchestrator.run_once()  # reopened: one item runs again, the other stays failed
    assert client.post(f"/api/executions/{execution_id}/cancel").json()["canceled"] is True
    orchestrator.run_once()
    refused = client.post("/api/dlq/replay", json={"execution_id": execution_id}).json()
    assert refused["replayed"] == []
    assert [(r["message_id"], r["reason"]) for r in refused["refused"]] == [
        (rest, "the execution was canceled")
    ]
    missing = client.post("/api/dlq/replay", json={"execution_id": "nope"})
    assert missing.status_code == 404
    bad = client.post("/api/dlq/replay", json={"execution_id": execution_id, "patch": {"x": 1}})
    assert bad.status_code == 422


def test_the_api_document_describes_the_new_fields_and_routes(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    assert "post" in document["paths"]["/api/dlq/replay"]
    assert "get" in document["paths"]["/api/executions/{execution_id}/playbook"]
    detail = document["components"]["schemas"]["ExecutionDetail"]["properties"]
    for name in ("workers_alive", "queued_tasks", "waiting_without_workers", "dead_letters"):
        assert detail[name]["description"], name
    step = document["components"]["schemas"]["StepDetail"]["properties"]
    assert {"queued", "waiting_without_workers", "dead_letters"} <= set(step)
