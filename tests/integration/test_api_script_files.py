"""Script files through the HTTP API (a real SQLite file, a real Orchestrator): the server
reads them from its playbooks root when an execution starts, so the task a worker claims
carries the code, and a file it cannot read is a 422 naming the step and the path."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl import __version__
from noetl.runtime.orchestrator import Orchestrator
from noetl.scripts import script_reader
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.helpers.auth import auth_headers

with warnings.catch_warnings():
    # Starlette asks for `httpx2` instead of `httpx`; either drives the app the same way.
    warnings.filterwarnings("ignore", message=".*httpx2", category=UserWarning)
    from fastapi.testclient import TestClient

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: scripted, path: tests/scripted}
workload:
  file: code/count.py
workflow:
  - step: start
    tool:
      kind: python
      script: {uri: "{{ file }}", source: {type: file}}
      input: {n: 3}
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, SqliteStore]]:
    store = SqliteStore(tmp_path / "noetl.db")
    root = tmp_path / "root"
    root.mkdir()
    orchestrator = Orchestrator(store, owner="test", scripts=script_reader(root))
    app = create_app(store, orchestrator, version=__version__)
    try:
        with TestClient(app, headers=auth_headers(store)) as test_client:
            yield test_client, store
    finally:
        store.close()


def test_the_server_reads_the_file_into_the_task(
    client: tuple[TestClient, SqliteStore], tmp_path: Path
) -> None:
    api, store = client
    (tmp_path / "root" / "code").mkdir()
    (tmp_path / "root" / "code" / "count.py").write_text("result = list(range(n))\n")
    response = api.post("/api/executions", json={"playbook": PLAYBOOK})
    assert response.status_code == 201, response.text
    execution_id = response.json()["execution_id"]
    compiled = json.loads(store.get_compiled(execution_id) or "{}")
    spec = compiled["workflow"][0]["tool"]["spec"]
    assert spec["code"] == "result = list(range(n))\n" and "script" not in spec
    (claimed,) = store.claim("w", limit=1)
    assert claimed.task.spec["code"] == "result = list(range(n))\n"


def test_a_file_the_server_cannot_read_is_refused_at_start(
    client: tuple[TestClient, SqliteStore],
) -> None:
    api, _ = client
    response = api.post("/api/executions", json={"playbook": PLAYBOOK})
    assert response.status_code == 422, response.text
    (diag,) = response.json()["diagnostics"]
    assert (diag["code"], diag["step"]) == ("E332", "start")
    assert "no file 'code/count.py'" in diag["message"]
