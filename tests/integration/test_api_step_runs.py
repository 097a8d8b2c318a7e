"""The runs of a step on a cycle of the graph, as the API shows them to the console.

The first test runs the paging playbook (`fetch -> check -> fetch` against a real HTTP API
on loopback) with the real `noetl run` into a SQLite file, then reads that file through the
API. The second plays the worker by hand to look at a cycle while it runs.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from noetl import __version__
from noetl.core import Outcome
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.helpers.auth import auth_headers
from tests.helpers.cli import noetl
from tests.helpers.loopback import base_url, serving
from tests.helpers.paging import PAGES, PagingHandler, paging_playbook

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

CYCLE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cycle}
workload: {api_token: s3cr3t}
workflow:
  - step: start
    next: [fetch]
  - step: fetch
    tool: {kind: noop, args: {page: "{{ (pages | default([]) | length) + 1 }}"}}
    result: {collect: {into: pages}}
    next: [check]
  - step: check
    next:
      mode: exclusive
      to:
        - {step: fetch, when: "{{ pages | length < 3 }}"}
        - {step: done}
  - step: done
"""


def client_over(store: SqliteStore, orchestrator: Orchestrator) -> TestClient:
    app = create_app(store, orchestrator, version=__version__)
    return TestClient(app, headers=auth_headers(store))


@pytest.fixture
def paged(tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    """The paging playbook run to its end by `noetl run`; the API over its database."""
    db = tmp_path / "noetl.db"
    with serving(PagingHandler) as server:
        playbook = tmp_path / "paging.yaml"
        playbook.write_text(paging_playbook(base_url(server)))
        proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    execution_id = json.loads(proc.stdout)["execution_id"]
    store = SqliteStore(db)
    try:
        with client_over(store, Orchestrator(store, owner="test")) as client:
            yield client, execution_id
    finally:
        store.close()


def test_a_paging_cycle_shows_every_run_of_its_steps(paged: tuple[TestClient, str]) -> None:
    client, execution_id = paged
    base = f"/api/executions/{execution_id}"
    nodes = {n["id"]: n for n in client.get(f"{base}/graph").json()["nodes"]}
    assert {name: (n["run"], n["runs"]) for name, n in nodes.items()} == {
        "start": (1, 1),
        "fetch": (PAGES, PAGES),
        "check": (PAGES, PAGES),
        "report": (1, 1),
    }
    # The status object stays the one `noetl run --json` prints: `run` only past the first.
    steps = client.get(base).json()["steps"]
    assert steps["fetch"] == {"status": "ok", "run": PAGES}
    assert steps["report"] == {"status": "ok"}

    fetch = client.get(f"{base}/steps/fetch").json()
    assert (fetch["status"], fetch["run"], fetch["runs"]) == ("ok", PAGES, PAGES)
    history = fetch["run_history"]
    assert [(r["run"], r["by"], r["status"], r["attempts"]) for r in history] == [
        (1, "start", "ok", 1),
        *[(n, "check", "ok", 1) for n in range(2, PAGES + 1)],
    ]
    for earlier, later in pairwise(history):
        assert earlier["called_at"] <= earlier["started_at"] <= earlier["finished_at"]
        assert earlier["finished_at"] <= later["called_at"]
    # The latest run is the step's own state.
    assert (history[-1]["started_at"], history[-1]["finished_at"]) == (
        fetch["started_at"],
        fetch["finished_at"],
    )
    assert [(a["task_id"], a["run"]) for a in fetch["attempts"]] == [
        (f"{execution_id}.fetch", 1),
        *[(f"{execution_id}.fetch.run{n}", n) for n in range(2, PAGES + 1)],
    ]
    third = client.get(f"{base}/steps/fetch", params={"run": 3}).json()
    assert [a["task_id"] for a in third["attempts"]] == [f"{execution_id}.fetch.run3"]
    assert third["attempts_total"] == 1
    latest = client.get(f"{base}/steps/fetch", params={"run_limit": 2}).json()
    assert [r["run"] for r in latest["run_history"]] == [PAGES - 1, PAGES]
    assert latest["runs"] == PAGES

    report = client.get(f"{base}/steps/report").json()
    assert (report["run"], report["runs"]) == (1, 1)
    assert [(r["run"], r["by"], r["status"]) for r in report["run_history"]] == [(1, "check", "ok")]
    bad = client.get(f"{base}/steps/fetch", params={"run": 0})
    assert bad.status_code == 422


def test_a_cycle_while_it_runs(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "noetl.db")
    orchestrator = Orchestrator(store, owner="test")
    try:
        with client_over(store, orchestrator) as client:
            created = client.post("/api/executions", json={"playbook": CYCLE})
            base = f"/api/executions/{created.json()['execution_id']}"

            def work(*, error: str | None = None) -> None:
                (lease,) = store.claim("test-worker", limit=10)
                task = lease.task
                this = {**task.args, "password": "hunter2"}
                outcome = Outcome(task.task_id, ok=error is None, this=this, error=error)
                assert store.complete(task.task_id, lease.token, outcome.to_payload())
                orchestrator.run_once()

            done = client.get(f"{base}/steps/done").json()
            assert (done["status"], done["run"], done["runs"], done["run_history"]) == (
                "pending",
                1,
                0,
                [],
            )
            work()
            nodes = {n["id"]: n for n in client.get(f"{base}/graph").json()["nodes"]}
            assert (nodes["fetch"]["status"], nodes["fetch"]["run"]) == ("running", 2)
            assert (nodes["check"]["status"], nodes["check"]["runs"]) == ("ok", 1)
            assert nodes["done"]["runs"] == 0
            fetch = client.get(f"{base}/steps/fetch").json()
            assert [(r["run"], r["status"]) for r in fetch["run_history"]] == [
                (1, "ok"),
                (2, "running"),
            ]
            assert fetch["run_history"][1]["finished_at"] is None
            assert [(a["run"], a["status"]) for a in fetch["attempts"]] == [
                (1, "ok"),
                (2, "running"),
            ]
            assert '"password": "***"' in fetch["attempts"][0]["output"]
            assert "hunter2" not in client.get(f"{base}/steps/fetch").text

            work(error="page 2 broke")
            fetch = client.get(f"{base}/steps/fetch").json()
            assert (fetch["status"], fetch["runs"]) == ("failed", 2)
            second = fetch["run_history"][1]
            assert (second["status"], second["error"]) == ("failed", "page 2 broke")
            assert client.get(base).json()["status"] == "fail"
    finally:
        store.close()
