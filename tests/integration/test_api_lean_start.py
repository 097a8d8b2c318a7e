"""`POST /api/executions` answered by the lean path (noetl.server.lean_start) and by the
FastAPI route: the same answers, and the lean path taken only where it may be.

Two apps over one SQLite store and one token cache, as `noetl server start` builds them:
one with the lean path (the default), one without; each request goes to both and the
answers are compared (execution ids aside).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from noetl.auth import Role
from noetl.auth.cache import CachedTokens
from noetl.core import ExecutionStatus
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.server.auth import Gate
from noetl.server.lean_start import LOOP_BODY_BYTES, LeanStart
from noetl.sessions import Sessions
from noetl.store import SqliteStore
from noetl.store.base import Store
from tests.helpers.auth import bearer, new_token
from tests.helpers.testclient import TestClient

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: lean, path: tests/lean}
workload: {n: 1}
workflow:
  - step: start
    next: [work]
  - step: work
    tool:
      kind: python
      code: "def main(context, args):\\n    return args['n']\\n"
      args: {n: "{{ workload.n }}"}
"""
INVALID = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bad}
workflow:
  - step: start
    next: [nowhere]
"""


class Pair:
    """The lean app and the plain one, over one store and one gate."""

    def __init__(self, store: Store) -> None:
        self.store = store
        gate = Gate(CachedTokens(store.tokens, ttl_s=30), Sessions(store.sessions))
        self.orchestrator = Orchestrator(store, owner="t")
        self.lean_app = create_app(store, self.orchestrator, version="t", gate=gate)
        self.plain_app = create_app(
            store, self.orchestrator, version="t", gate=gate, lean_start=False
        )
        self.lean = TestClient(self.lean_app, raise_server_exceptions=False)
        self.plain = TestClient(self.plain_app, raise_server_exceptions=False)
        self.operator = new_token(store, Role.OPERATOR)
        admin = bearer(new_token(store, Role.ADMIN))
        answer = self.plain.post("/api/playbooks", json={"content": PLAYBOOK}, headers=admin)
        assert answer.status_code in (200, 201), answer.text
        self.warm(self.operator)

    def warm(self, secret: str) -> None:
        """A read with the token, so the cache knows it (as any earlier request would)."""
        assert self.plain.get("/api/executions", headers=bearer(secret)).status_code in (200, 403)

    def answered(self) -> int:
        return _lean_of(self.lean_app).answered


def _lean_of(app: FastAPI) -> LeanStart:
    layer: Any = app.middleware_stack
    while layer is not None:
        if isinstance(layer, LeanStart):
            return layer
        layer = getattr(layer, "app", None)
    raise AssertionError("no LeanStart in the app's middleware")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    store = SqliteStore(tmp_path / "noetl.db")
    try:
        yield Pair(store)
    finally:
        store.close()


def _same(lean: Any, plain: Any) -> None:
    assert lean.status_code == plain.status_code, (lean.text, plain.text)
    body_lean, body_plain = lean.json(), plain.json()
    if "execution_id" in body_plain:
        assert set(body_lean) == set(body_plain) == {"execution_id"}
    else:
        assert body_lean == body_plain
    for header in ("content-type", "www-authenticate", "retry-after"):
        assert lean.headers.get(header) == plain.headers.get(header), header


def test_a_plain_start_is_answered_by_the_lean_path_as_the_route_would(pair: Pair) -> None:
    body = {"path": "tests/lean", "workload": {"n": 7}}
    lean = pair.lean.post("/api/executions", json=body, headers=bearer(pair.operator))
    plain = pair.plain.post("/api/executions", json=body, headers=bearer(pair.operator))
    _same(lean, plain)
    assert lean.status_code == 201
    assert pair.answered() == 1
    execution_id = lean.json()["execution_id"]
    assert lean.headers["location"] == f"/api/executions/{execution_id}"
    assert plain.headers["location"] == f"/api/executions/{plain.json()['execution_id']}"
    record = pair.store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.RUNNING
    assert record.playbook_path == "tests/lean"
    # Its first task is queued with the workload given.
    leases = pair.store.claim("w", limit=10, executions=[execution_id])
    assert [lease.task.args for lease in leases] == [{"n": 7}]


def test_an_inline_playbook_and_a_version_start_on_the_lean_path(pair: Pair) -> None:
    headers = bearer(pair.operator)
    inline = pair.lean.post("/api/executions", json={"playbook": PLAYBOOK}, headers=headers)
    assert inline.status_code == 201, inline.text
    versioned = pair.lean.post(
        "/api/executions", json={"path": "tests/lean", "version": 1}, headers=headers
    )
    assert versioned.status_code == 201, versioned.text
    assert pair.answered() == 2


DEEP = json.loads("[" * 80 + "]" * 80)
CASES: dict[str, dict[str, Any]] = {
    "no token": {"json": {"path": "tests/lean"}, "auth": None},
    "an unknown token": {"json": {"path": "tests/lean"}, "auth": "noetl_nope"},
    "a viewer": {"json": {"path": "tests/lean"}, "auth": "viewer"},
    "a basic scheme": {"json": {"path": "tests/lean"}, "auth": "basic"},
    "text, not JSON": {"content": b'{"path": "tests/lean"}', "type": "text/plain"},
    "broken JSON": {"content": b'{"path": "tests/', "type": "application/json"},
    "both sources": {"json": {"path": "tests/lean", "playbook": PLAYBOOK}},
    "neither source": {"json": {"workload": {}}},
    "an unregistered path": {"json": {"path": "tests/nowhere"}},
    "an unregistered version": {"json": {"path": "tests/lean", "version": 9}},
    "an invalid inline playbook": {"json": {"playbook": INVALID}},
    "an unknown parent": {"json": {"path": "tests/lean", "options": {"parent_execution_id": "x"}}},
    "a NUL in the workload": {"json": {"path": "tests/lean", "workload": {"a": "b\u0000"}}},
    "too deep a workload": {"json": {"path": "tests/lean", "workload": {"a": DEEP}}},
    "an unknown field": {"json": {"path": "tests/lean", "extra": 1}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_the_lean_path_does_not_start_is_answered_as_the_route_answers_it(
    pair: Pair, case: str
) -> None:
    spec = CASES[case]
    auth = spec.get("auth", "operator")
    if auth == "viewer":
        secret = new_token(pair.store, Role.VIEWER)
        pair.warm(secret)
        headers = bearer(secret)
    elif auth == "basic":
        headers = {"Authorization": f"Basic {pair.operator}"}
    elif auth == "operator":
        headers = bearer(pair.operator)
    else:
        headers = {} if auth is None else bearer(auth)
    answers = []
    for client in (pair.lean, pair.plain):
        if "json" in spec:
            answers.append(client.post("/api/executions", json=spec["json"], headers=headers))
        else:
            answers.append(
                client.post(
                    "/api/executions",
                    content=spec["content"],
                    headers={**headers, "Content-Type": spec["type"]},
                )
            )
    lean, plain = answers
    assert lean.status_code >= 400, lean.text
    _same(lean, plain)
    assert pair.answered() == 0
    assert pair.store.list_executions(limit=10) == []


def test_a_token_the_cache_has_not_read_goes_through_the_route_then_the_lean_path(
    pair: Pair,
) -> None:
    fresh = new_token(pair.store, Role.OPERATOR)
    first = pair.lean.post("/api/executions", json={"path": "tests/lean"}, headers=bearer(fresh))
    assert first.status_code == 201, first.text
    assert pair.answered() == 0  # the route read the token from the store
    second = pair.lean.post("/api/executions", json={"path": "tests/lean"}, headers=bearer(fresh))
    assert second.status_code == 201, second.text
    assert pair.answered() == 1


def test_a_start_that_fails_unexpectedly_is_a_logged_500_once_and_not_tried_again(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def broken(*args: Any, **kwargs: Any) -> str:
        calls.append(args)
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(pair.orchestrator, "start_execution", broken)
    headers = bearer(pair.operator)
    lean = pair.lean.post("/api/executions", json={"path": "tests/lean"}, headers=headers)
    assert len(calls) == 1
    plain = pair.plain.post("/api/executions", json={"path": "tests/lean"}, headers=headers)
    _same(lean, plain)
    assert lean.status_code == 500
    assert "fire" not in lean.text
    logged = [r for r in caplog.records if "unhandled error in POST /api/executions" in r.message]
    assert len(logged) == 2  # once per app


def _asgi_post(app: FastAPI, chunks: list[bytes], headers: dict[str, str]) -> dict[str, Any]:
    """POST /api/executions with its body in `chunks` (ASGI `more_body`), straight to the
    app; the status and the JSON body of the answer."""
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[MutableMapping[str, Any]] = []
    lock = threading.Lock()

    async def receive() -> MutableMapping[str, Any]:
        with lock:
            if messages:
                return messages.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/executions",
        "raw_path": b"/api/executions",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return {"status": status, "json": json.loads(body)}


def test_a_body_in_several_parts_is_read_whole_by_either_path(pair: Pair) -> None:
    headers = {**bearer(pair.operator), "Content-Type": "application/json"}
    good = _asgi_post(pair.lean_app, [b'{"path": "tests', b'/lean", "workl', b'oad": {}}'], headers)
    assert good["status"] == 201, good
    assert pair.answered() == 1
    # Broken JSON in parts: the route gets the whole body, and names it.
    bad = _asgi_post(pair.lean_app, [b'{"path": ', b'"tests/lean"'], headers)
    assert bad["status"] == 422, bad
    assert bad["json"]["error"] == "invalid_request"
    assert "JSON" in bad["json"]["message"]
    assert pair.answered() == 1


def test_with_authentication_off_a_start_without_a_token_takes_the_lean_path(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "open.db")
    try:
        gate = Gate(CachedTokens(store.tokens, ttl_s=30), Sessions(store.sessions), enabled=False)
        app = create_app(store, Orchestrator(store, owner="t"), version="t", gate=gate)
        client = TestClient(app)
        answer = client.post("/api/executions", json={"playbook": PLAYBOOK})
        assert answer.status_code == 201, answer.text
        assert _lean_of(app).answered == 1
        assert store.get_execution(answer.json()["execution_id"]) is not None
    finally:
        store.close()


def test_a_ready_playbook_is_decided_in_the_event_loop(pair: Pair) -> None:
    headers = bearer(pair.operator)

    ids = []
    for n in range(4):
        answer = pair.lean.post(
            "/api/executions", json={"path": "tests/lean", "workload": {"n": n}}, headers=headers
        )
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["execution_id"])

    # The first start reads the catalog (in the thread pool); the playbook is kept then.
    lean = _lean_of(pair.lean_app)
    assert (lean.answered, lean.in_loop) == (4, 3)
    assert len(set(ids)) == 4
    for n, execution_id in enumerate(ids):
        record = pair.store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.RUNNING
        leases = pair.store.claim("w", limit=10, executions=[execution_id])
        assert [lease.task.args for lease in leases] == [{"n": n}]


def test_an_inline_playbook_is_decided_in_the_loop_once_its_engine_is_built(pair: Pair) -> None:
    headers = bearer(pair.operator)
    text = PLAYBOOK.replace("name: lean", "name: inline")

    for _ in range(2):
        answer = pair.lean.post("/api/executions", json={"playbook": text}, headers=headers)
        assert answer.status_code == 201, answer.text

    lean = _lean_of(pair.lean_app)
    assert (lean.answered, lean.in_loop) == (2, 1)


def test_a_big_body_is_decided_in_the_thread_pool(pair: Pair) -> None:
    headers = bearer(pair.operator)
    big = {"path": "tests/lean", "workload": {"n": 1, "pad": "x" * (LOOP_BODY_BYTES + 1)}}
    for body in ({"path": "tests/lean"}, {"path": "tests/lean"}, big):
        answer = pair.lean.post("/api/executions", json=body, headers=headers)
        assert answer.status_code == 201, answer.text

    lean = _lean_of(pair.lean_app)
    assert (lean.answered, lean.in_loop) == (3, 1)  # the first read the catalog
