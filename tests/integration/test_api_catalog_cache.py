"""Starts of registered playbooks read the catalog once per server, yet always run the
latest version: two servers (apps) over one store, as two `noetl server start` share a
database; a version registered through one is what the other starts next.

Both ways a start is answered (the lean path and the FastAPI route), on SQLite and on
PostgreSQL (where the refusal of a stale start is `noetl_start`'s).
"""

from __future__ import annotations

from typing import Any

import pytest

from noetl.auth import Role
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.starts import Playbooks
from noetl.store.base import Store
from tests.helpers.auth import bearer, new_token
from tests.helpers.testclient import TestClient

PATH = "tests/cached"


def playbook(version: int) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cached, path: {PATH}}}
workload: {{v: {version}}}
workflow:
  - step: start
    next: [work]
  - step: work
    tool:
      kind: python
      code: "def main(context, args):\\n    return {version}\\n"
"""


class Server:
    def __init__(self, store: Store, name: str, *, lean: bool) -> None:
        self.app = create_app(store, Orchestrator(store, owner=name), version="t", lean_start=lean)
        self.client = TestClient(self.app, raise_server_exceptions=False)
        self.headers = bearer(new_token(store, Role.ADMIN))
        assert self.client.get("/api/executions", headers=self.headers).status_code == 200

    @property
    def catalog(self) -> Playbooks:
        found: Playbooks = self.app.state.services.catalog
        return found

    def register(self, version: int) -> None:
        answer = self.client.post(
            "/api/playbooks", json={"content": playbook(version)}, headers=self.headers
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["version"] == version

    def start(self, **body: Any) -> Any:
        return self.client.post(
            "/api/executions", json={"path": PATH, **body}, headers=self.headers
        )


class Pair:
    def __init__(self, store: Store, *, lean: bool) -> None:
        self.store = store
        self.a = Server(store, "a", lean=lean)
        self.b = Server(store, "b", lean=lean)

    def started(self, server: Server, **body: Any) -> int:
        """Start through `server`; the version of the playbook the execution runs."""
        answer = server.start(**body)
        assert answer.status_code == 201, answer.text
        record = self.store.get_execution(answer.json()["execution_id"])
        assert record is not None and record.playbook_path == PATH
        [version] = [v for v in range(1, 4) if record.playbook_text == playbook(v)]
        return version


@pytest.fixture(params=[True, False], ids=["lean", "route"])
def pair(request: pytest.FixtureRequest, store: Store) -> Pair:
    """Two servers over `store` (tests/integration/conftest.py: SQLite, PostgreSQL)."""
    return Pair(store, lean=request.param)


def test_starts_by_path_read_the_catalog_once(pair: Pair) -> None:
    pair.b.register(1)

    assert [pair.started(pair.a) for _ in range(3)] == [1, 1, 1]
    assert pair.a.catalog.reads == 1


def test_a_version_registered_by_another_server_is_the_one_started_next(pair: Pair) -> None:
    pair.b.register(1)
    assert pair.started(pair.a) == 1

    pair.b.register(2)  # server a still keeps version 1

    assert pair.started(pair.a) == 2  # refused as stale, read again, started
    assert pair.started(pair.a) == 2
    assert pair.a.catalog.reads == 2


def test_a_registration_on_this_server_is_read_at_its_next_start(pair: Pair) -> None:
    pair.a.register(1)
    assert pair.started(pair.a) == 1
    pair.a.register(2)

    assert pair.started(pair.a) == 2
    assert pair.a.catalog.reads == 2


def test_a_pinned_version_runs_as_pinned(pair: Pair) -> None:
    pair.b.register(1)
    pair.b.register(2)

    assert [pair.started(pair.a, version=1) for _ in range(2)] == [1, 1]
    assert pair.started(pair.a) == 2
    assert pair.a.catalog.reads == 2


def test_a_path_not_registered_yet_is_not_remembered(pair: Pair) -> None:
    missing = pair.a.start()
    assert missing.status_code == 404
    assert "not registered" in missing.text

    pair.b.register(1)

    assert pair.started(pair.a) == 1
