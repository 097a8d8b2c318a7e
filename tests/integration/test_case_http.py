"""An `on_event` case branching on the HTTP status of a real server on loopback: 503 is
retried by the case, 404 routed, 200 acted on with a branch tool. Run embedded over a
SQLite file, and distributed (an orchestrator and a worker, with the worker's
continuation) over SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from noetl.dsl.validate import load_playbook_text
from noetl.runtime.local import embedded_runtime, local_cluster, wait_finished
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import open_store
from noetl.store.base import Store


class Api(ThreadingHTTPServer):
    """`/items`: 503 for the first `failures` calls, then 200 with the call number;
    anything else: 404."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.failures = 0
        self.calls = 0
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Api

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.calls += 1
            number = self.server.calls
            failing = number <= self.server.failures
        if self.path != "/items":
            status, body = 404, {"error": "no such thing"}
        elif failing:
            status, body = 503, {"error": "unavailable"}
        else:
            status, body = 200, {"call": number}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def playbook(url: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: case_http}}
workflow:
  - step: fetch
    tool:
      kind: http
      spec: {{url: "{url}"}}
      retry: false
    spec: {{eval_mode: on_event}}
    case:
      - when: "{{{{ status_code == 503 }}}}"
        then:
          retry: {{max_attempts: 4, initial_delay: 0.05, jitter: false}}
      - when: "{{{{ status_code == 404 }}}}"
        then: {{set: {{missing: true}}, next: create}}
      - when: "{{{{ status_code == 200 }}}}"
        then:
          set: {{answered_on: "{{{{ attempt }}}}"}}
          tool:
            kind: python
            code: |
              def main(context, args):
                  return {{"doubled": args["call"] * 2}}
            args: {{call: "{{{{ this.data.call }}}}"}}
          result: {{as: doubled}}
          next: done
  - step: create
  - step: done
"""


def _embedded(db: Path, text: str) -> tuple[str, str, dict[str, Any], Store]:
    with embedded_runtime(str(db), workers=2) as runtime:
        result = runtime.run(load_playbook_text(text).require())
    store = open_store(str(db))
    return result.execution_id, result.status.value, result.context, store


def _distributed(url: str, text: str) -> tuple[str, str, dict[str, Any], Store]:
    store = open_store(url)
    execution_id = Orchestrator(store, owner="test").start_execution(text)
    with local_cluster(store, execution_id, workers=2):
        record = wait_finished(store, execution_id, timeout=60)
    return execution_id, record.status.value, dict(record.context or {}), store


@pytest.fixture(params=["embedded", "sqlite", "postgres"])
def runner(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "embedded":
        return lambda text: _embedded(tmp_path / "noetl.db", text)
    if request.param == "sqlite":
        return lambda text: _distributed(str(tmp_path / "noetl.db"), text)
    database = request.getfixturevalue("pg_database")
    return lambda text: _distributed(database, text)


def test_a_503_is_retried_by_the_case_then_the_200_branch_acts(api: Api, runner: Any) -> None:
    api.failures = 2
    execution_id, status, context, store = runner(playbook(api.url("/items")))
    try:
        assert status == "ok"
        assert api.calls == 3
        assert context == {"answered_on": 3, "doubled": {"doubled": 6}}
        events = store.load_events(execution_id)
        rounds = [e.payload for e in events if e.type == "case.evaluated"]
        assert [(r["round"], r["fired"]) for r in rounds] == [(1, [0]), (2, [0]), (3, [2])]
        retries = [e.payload for e in events if e.type == "retry.started"]
        assert [(r["attempt"], r["reason"], r["delay_ms"]) for r in retries] == [
            (2, "case", 50),
            (3, "case", 100),
        ]
        steps = store.get_steps(execution_id)
        assert (steps["fetch"]["status"], steps["done"]["status"]) == ("ok", "ok")
        assert store.list_dead_letters() == []
    finally:
        store.close()


def test_a_404_is_routed_by_its_branch_and_dead_lettered(api: Api, runner: Any) -> None:
    execution_id, status, context, store = runner(playbook(api.url("/nothing")))
    try:
        assert status == "ok"  # the branch handled the failure
        assert context == {"missing": True}
        steps = store.get_steps(execution_id)
        assert (steps["fetch"]["status"], steps["create"]["status"]) == ("failed", "ok")
        [entry] = store.list_dead_letters()
        assert (entry.message_id, entry.reason, entry.tool_kind) == (
            f"{execution_id}.fetch",
            "fatal",
            "http",
        )
    finally:
        store.close()
